// Flat, 64-byte aligned buffers ("arenas") and the plans that carve them into named tensors.
// Parameters, gradients, optimizer states and activations each live in one arena (DESIGN.md #1):
// zeroing, optimizer updates, allreduce and checkpoints become loops over one buffer.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "perceiver/error.h"
#include "perceiver/tensor.h"

namespace perceiver {

inline constexpr size_t kArenaAlignBytes = 64;

/// Owns n zero-initialised elements of T, 64-byte aligned. Move-only.
template <class T>
class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t n) : size_(n) {
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + kArenaAlignBytes - 1) / kArenaAlignBytes * kArenaAlignBytes;
    void* p = std::aligned_alloc(kArenaAlignBytes, bytes);
    PCV_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
    data_.reset(static_cast<T*>(p));
    zero();
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  void zero() {
    if (size_) std::memset(static_cast<void*>(data_.get()), 0, size_ * sizeof(T));
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

/// A named tensor in a plan: its shape and where it starts (in elements).
struct TensorSpec {
  std::string name;
  Shape shape;
};

/// Assigns each named tensor an aligned offset in one arena. Names are unique.
class ArenaPlan {
 public:
  /// Element alignment: 16 elements keeps float rows 64-byte aligned.
  static constexpr int64_t kAlignElems = 16;

  int64_t add(const std::string& name, Shape shape) {
    PCV_ASSERT(!index_.count(name), "duplicate tensor name '", name, "' in arena plan");
    int64_t offset = (size_ + kAlignElems - 1) / kAlignElems * kAlignElems;
    index_[name] = entries_.size();
    entries_.push_back({name, shape, offset});
    size_ = offset + shape.numel();
    return offset;
  }
  void add(const std::vector<TensorSpec>& specs, const std::string& prefix = "") {
    for (const auto& s : specs) add(prefix + s.name, s.shape);
  }

  struct Entry {
    std::string name;
    Shape shape;
    int64_t offset;
  };
  const Entry& at(const std::string& name) const {
    auto it = index_.find(name);
    PCV_CHECK(it != index_.end(), "no tensor named '", name, "' in arena plan");
    return entries_[it->second];
  }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const std::vector<Entry>& entries() const { return entries_; }
  int64_t size() const { return size_; }

  template <class T>
  TensorView<T> view(T* base, const std::string& name) const {
    const Entry& e = at(name);
    return {base + e.offset, e.shape};
  }

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  int64_t size_ = 0;
};

/// A plan plus the arena it describes, for activations and scratch that live as long as a step.
template <class T>
class PlannedArena {
 public:
  PlannedArena() = default;
  explicit PlannedArena(ArenaPlan plan) : plan_(std::move(plan)), arena_(plan_.size()) {}
  TensorView<T> operator[](const std::string& name) { return plan_.view(arena_.data(), name); }
  const ArenaPlan& plan() const { return plan_; }
  Arena<T>& arena() { return arena_; }

 private:
  ArenaPlan plan_;
  Arena<T> arena_;
};

}  // namespace perceiver
