// Flat buffers ("arenas") in a backend's memory and the plans that carve them into named tensors.
// Parameters, gradients, optimizer states and activations each live in one arena (DESIGN.md #1):
// zeroing, optimizer updates, allreduce and checkpoints become loops over one buffer.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "perceiver/backend.h"
#include "perceiver/error.h"
#include "perceiver/tensor.h"

namespace perceiver {

/// Owns n zero-initialised elements of T in a backend's memory. Move-only. Host code never
/// touches data() of a device backend: it goes through upload()/download() or the backend's ops.
template <class T>
class Arena {
  static_assert(std::is_trivially_copyable_v<T>, "arenas hold plain numbers");

 public:
  Arena() = default;
  Arena(Backend& backend, size_t n) : backend_(&backend), size_(n) {
    if (n == 0) return;
    buffer_ = backend.allocate(n * sizeof(T));
    zero();
  }
  /// Host memory (the CPU backend), for tests and host-side staging.
  explicit Arena(size_t n) : Arena(cpu_backend(), n) {}

  /// Tells the backend what this arena is (Backend::name_buffer): state that outlives a step.
  void name(std::string_view n) {
    if (size_) backend_->name_buffer(buffer_.data(), n);
  }
  T* data() { return static_cast<T*>(buffer_.data()); }
  const T* data() const { return static_cast<const T*>(buffer_.data()); }
  size_t size() const { return size_; }
  Backend* backend() const { return backend_; }
  void zero() {
    if (size_) backend_->zero(buffer_.data(), size_ * sizeof(T));
  }
  /// Host → arena: n elements of `src` to elements [offset, offset + n).
  void upload(const T* src, size_t n, size_t offset = 0) {
    PCV_ASSERT(offset + n <= size_, "upload of ", n, " elements at ", offset, " into an arena of ", size_);
    if (n) backend_->copy_to_device(data() + offset, src, n * sizeof(T));
  }
  /// Arena → host: elements [offset, offset + n) into `dst`.
  void download(T* dst, size_t n, size_t offset = 0) const {
    PCV_ASSERT(offset + n <= size_, "download of ", n, " elements at ", offset, " from an arena of ", size_);
    if (n) backend_->copy_to_host(dst, data() + offset, n * sizeof(T));
  }
  std::vector<T> to_host() const {
    std::vector<T> v(size_);
    download(v.data(), size_);
    return v;
  }

 private:
  Backend* backend_ = nullptr;
  Buffer buffer_;
  size_t size_ = 0;
};

/// Copies src into dst (equal sizes) across backends: directly where one side is host memory,
/// staged through the host otherwise.
template <class T>
void copy_arena(const Arena<T>& src, Arena<T>& dst) {
  PCV_CHECK(src.size() == dst.size(), "copy of an arena of ", src.size(), " elements into one of ", dst.size());
  if (src.size() == 0) return;
  if (dst.backend()->host_accessible()) {
    src.download(dst.data(), src.size());
  } else if (src.backend()->host_accessible()) {
    dst.upload(src.data(), src.size());
  } else {
    const std::vector<T> host = src.to_host();
    dst.upload(host.data(), host.size());
  }
}

/// A device view's elements, copied to the host.
template <class T>
std::vector<std::remove_const_t<T>> download(Backend& backend, TensorView<T> v) {
  std::vector<std::remove_const_t<T>> host(size_t(v.numel()));
  if (!host.empty()) backend.copy_to_host(host.data(), v.data, host.size() * sizeof(T));
  return host;
}

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
  PlannedArena(Backend& backend, ArenaPlan plan) : plan_(std::move(plan)), arena_(backend, plan_.size()) {}
  /// Host memory (the CPU backend).
  explicit PlannedArena(ArenaPlan plan) : PlannedArena(cpu_backend(), std::move(plan)) {}
  TensorView<T> operator[](const std::string& name) { return plan_.view(arena_.data(), name); }
  const ArenaPlan& plan() const { return plan_; }
  Arena<T>& arena() { return arena_; }

 private:
  ArenaPlan plan_;
  Arena<T> arena_;
};

}  // namespace perceiver
