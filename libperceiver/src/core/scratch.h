// Scratch memory for backward temporaries: a stack allocator over the backend's memory. take()
// hands out aligned views zeroed by the backend (take_for_write: not zeroed); a ScratchScope
// gives back what was taken during its lifetime. It grows by adding blocks (so live views stay
// valid) and, whenever the stack empties, merges them into one block of the most it ever held at
// once, so after the first training step no step allocates, and no more is kept than a step needs.
#pragma once

#include <algorithm>
#include <vector>

#include "core/arena.h"
#include "perceiver/tensor.h"

namespace perceiver {

template <class T>
class Scratch {
 public:
  explicit Scratch(Backend& backend) : backend_(&backend) {}

  /// A zero-filled view of `shape`, valid until the enclosing ScratchScope ends (backward ops
  /// accumulate into their outputs).
  TensorView<T> take(Shape shape) {
    TensorView<T> v = take_for_write(shape);
    backend_->zero(v.data, size_t(shape.numel()) * sizeof(T));
    return v;
  }

  /// As take(), but not zeroed: for an output that the next op overwrites whole (a forward's
  /// result), where zeroing would only cost memory traffic.
  TensorView<T> take_for_write(Shape shape) {
    const int64_t n = round_up(shape.numel());
    for (;;) {
      if (cur_ < blocks_.size() && used_ + n <= int64_t(blocks_[cur_].size())) break;
      if (cur_ < blocks_.size()) discard_above(cur_, used_);  // stepping off this block's free top
      if (cur_ + 1 < blocks_.size()) {
        ++cur_;
        used_ = 0;
        continue;
      }
      blocks_.emplace_back(*backend_, size_t(std::max(n, reserved_elems())));
      cur_ = blocks_.size() - 1;
      used_ = 0;
    }
    T* p = blocks_[cur_].data() + used_;
    used_ += n;
    ++live_;
    live_elems_ += n;
    peak_elems_ = std::max(peak_elems_, live_elems_);
    return {p, shape};
  }

  struct Mark {
    size_t block;
    int64_t used;
    int live;
    int64_t live_elems;
  };
  Mark mark() const { return {cur_, used_, live_, live_elems_}; }
  void release(const Mark& m) {
    for (size_t b = m.block + 1; b <= cur_ && b < blocks_.size(); ++b) discard_above(b, 0);  // stepped back off them
    cur_ = m.block;
    used_ = m.used;
    live_ = m.live;
    live_elems_ = m.live_elems;
    if (live_ == 0 && blocks_.size() > 1) {  // merge: the same sequence of takes fits in one block
      blocks_.clear();
      blocks_.emplace_back(*backend_, size_t(peak_elems_));
      cur_ = 0;
      used_ = 0;
    }
  }
  int64_t reserved_bytes() const { return reserved_elems() * int64_t(sizeof(T)); }

 private:
  // While the stack spans several blocks (the first step, as it grows), memory above its top in a
  // block it has left is dead but was written: given back to the backend, so that the first
  // step's resident memory follows what is live, not everything it has touched.
  void discard_above(size_t block, int64_t used) {
    Arena<T>& b = blocks_[block];
    if (used < int64_t(b.size())) backend_->discard(b.data() + used, size_t(int64_t(b.size()) - used) * sizeof(T));
  }
  static int64_t round_up(int64_t n) {
    return (n + ArenaPlan::kAlignElems - 1) / ArenaPlan::kAlignElems * ArenaPlan::kAlignElems;
  }
  int64_t reserved_elems() const {
    int64_t n = 0;
    for (const auto& b : blocks_) n += int64_t(b.size());
    return n;
  }
  Backend* backend_;
  std::vector<Arena<T>> blocks_;
  size_t cur_ = 0;
  int64_t used_ = 0;
  int live_ = 0;
  int64_t live_elems_ = 0, peak_elems_ = 0;  // taken and not given back (rounded), and its maximum
};

/// Releases everything taken from `s` during its lifetime.
template <class T>
class ScratchScope {
 public:
  explicit ScratchScope(Scratch<T>& s) : s_(s), mark_(s.mark()) {}
  ~ScratchScope() { s_.release(mark_); }
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  Scratch<T>& s_;
  typename Scratch<T>::Mark mark_;
};

}  // namespace perceiver
