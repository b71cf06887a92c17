// Shapes and row-major tensor views. A view never owns memory: it points into an arena
// (parameters, gradients, activations) or a caller's buffer.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "perceiver/error.h"

namespace perceiver {

/// Up to 6 dimensions, row-major (last index fastest).
class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    PCV_CHECK(dims.size() <= kMaxRank, "shape rank ", dims.size(), " exceeds ", kMaxRank);
    for (int64_t d : dims) push_back(d);
  }
  explicit Shape(const std::vector<int64_t>& dims) {
    for (int64_t d : dims) push_back(d);
  }
  void push_back(int64_t d) {
    PCV_CHECK(rank_ < kMaxRank, "shape rank exceeds ", kMaxRank);
    PCV_CHECK(d >= 0, "negative dimension ", d);
    dims_[rank_++] = d;
  }

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank_ : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  /// Product of all dimensions but the last: the number of rows of a [..., C] tensor.
  int64_t rows() const { return rank_ == 0 ? 1 : numel() / (dims_[rank_ - 1] ? dims_[rank_ - 1] : 1); }
  int64_t cols() const { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }

  std::vector<int64_t> dims() const { return {dims_.begin(), dims_.begin() + rank_}; }

  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? "," : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

/// A contiguous row-major view of T. Copying a view copies the pointer, not the data.
template <class T>
struct TensorView {
  T* data = nullptr;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  int64_t rows() const { return shape.rows(); }
  int64_t cols() const { return shape.cols(); }
  bool empty() const { return data == nullptr; }
  operator TensorView<const T>() const { return {data, shape}; }

  /// The same memory seen with another shape of equal size.
  TensorView reshaped(Shape s) const {
    PCV_ASSERT(s.numel() == numel(), "reshape ", shape.str(), " -> ", s.str());
    return {data, s};
  }
  /// Rows [begin, begin+count) of the view seen as [rows, cols].
  TensorView row_slice(int64_t begin, int64_t count) const {
    PCV_ASSERT(begin >= 0 && begin + count <= rows(), "row slice out of range");
    return {data + begin * cols(), Shape{count, cols()}};
  }
};

template <class T>
using ConstView = TensorView<const T>;

}  // namespace perceiver
