// Shared by the gpu suite: the skip without a device, host↔device tensors for a test, and the
// NMSE comparison (ggml's test-backend-ops measure).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "perceiver/backend.h"

namespace perceiver::gpu_test {

/// Why the CUDA backend cannot run here ("" when a GPU is visible).
inline std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no GPU: cudaGetDeviceCount returned ") + cudaGetErrorName(e);
  if (n == 0) return "no GPU: cudaGetDeviceCount found 0 devices";
  return "";
}

/// First statement of every GPU test: a ctest SKIP (the suite's SKIP_REGULAR_EXPRESSION) when
/// no GPU is visible, never a pass.
#define PCV_REQUIRE_GPU()                                            \
  do {                                                               \
    const std::string pcv_why_ = ::perceiver::gpu_test::no_gpu_reason(); \
    if (!pcv_why_.empty()) GTEST_SKIP() << pcv_why_;                 \
  } while (0)

// Normal draws by (n, seed, std), each drawn once until forget_random_vecs(): an op case runs on
// both backends with the same inputs, and drawing the kinetics-sized ones twice (tens of millions
// of normals each) took most of the suite's time on a GPU host.
inline std::map<std::tuple<int64_t, uint64_t, float>, std::vector<float>>& random_vecs() {
  static std::map<std::tuple<int64_t, uint64_t, float>, std::vector<float>> drawn;
  return drawn;
}
inline void forget_random_vecs() { random_vecs().clear(); }

inline std::vector<float> random_vec(int64_t n, uint64_t seed, float std = 1.0f) {
  std::vector<float>& v = random_vecs()[{n, seed, std}];
  if (v.size() != static_cast<size_t>(n)) {
    RngStream rng(seed, RngPurpose::kTest);
    v.resize(static_cast<size_t>(n));
    for (auto& x : v) x = float(std * rng.normal());
  }
  return v;
}

/// Tensors of one backend for one test: uploads host data, remembers sizes, reads back.
class Tensors {
 public:
  explicit Tensors(Backend& b) : b_(b) {}
  template <class T>
  T* up(const std::vector<T>& host) {
    auto& a = arenas<T>().emplace_back(b_, host.size());
    a.upload(host.data(), host.size());
    sizes_[a.data()] = host.size();
    return a.data();
  }
  float* zeros(int64_t n) { return up(std::vector<float>(static_cast<size_t>(n), 0.f)); }
  double* doubles(int64_t n) { return up(std::vector<double>(static_cast<size_t>(n), 0.0)); }
  template <class T>
  std::vector<double> down(const T* p) const {
    const size_t n = sizes_.at(p);
    std::vector<T> host(n);
    if (n) b_.copy_to_host(host.data(), p, n * sizeof(T));
    return std::vector<double>(host.begin(), host.end());
  }
  Backend& backend() { return b_; }
  Kernels<float> k() { return b_.kernels<float>(); }

 private:
  template <class T>
  std::deque<Arena<T>>& arenas() {
    if constexpr (std::is_same_v<T, float>) return f_;
    else if constexpr (std::is_same_v<T, double>) return d_;
    else if constexpr (std::is_same_v<T, int64_t>) return i_;
    else if constexpr (std::is_same_v<T, uint8_t>) return u_;
    else return c_;
  }
  Backend& b_;
  std::deque<Arena<float>> f_;
  std::deque<Arena<double>> d_;
  std::deque<Arena<int64_t>> i_;
  std::deque<Arena<uint8_t>> u_;
  std::deque<Arena<OptimChunk>> c_;
  std::map<const void*, size_t> sizes_;
};

/// Σ(a − b)² / Σ b² (0 when both are 0), and the largest |a − b|.
struct Diff {
  double nmse = 0, max_abs = 0;
};
inline Diff compare(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = a[i] - b[i];
    if (std::isnan(a[i]) != std::isnan(b[i])) return {INFINITY, INFINITY};
    if (std::isnan(a[i])) continue;
    num += d * d, den += b[i] * b[i], mx = std::max(mx, std::abs(d));
  }
  if (a.size() != b.size()) return {INFINITY, INFINITY};
  return {den > 0 ? num / den : (num > 0 ? INFINITY : 0.0), mx};
}

}  // namespace perceiver::gpu_test
