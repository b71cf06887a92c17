#include "backend/cuda/cuda_profile.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_kernels.h"

namespace perceiver::cuda {
namespace {

enum OpIndex : int {
#define PCV_OP_INDEX(op) k_##op,
  PCV_KERNEL_OPS(PCV_OP_INDEX)
#undef PCV_OP_INDEX
};
constexpr const char* kOpNames[] = {
#define PCV_OP_NAME(op) #op,
    PCV_KERNEL_OPS(PCV_OP_NAME)
#undef PCV_OP_NAME
};

struct Total {
  int64_t calls = 0;
  double ms = 0;
};

// Sums by op and shape; printed once, at exit.
class Profile {
 public:
  void add(const std::string& key, float ms) {
    std::lock_guard<std::mutex> lock(mu_);
    Total& t = totals_[key];
    ++t.calls, t.ms += ms;
  }
  ~Profile() {
    std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double all = 0;
    for (const auto& r : rows) all += r.second.ms;
    std::fprintf(stderr, "\nPERCEIVER_CUDA_PROFILE: GPU time by op and shape, every step (warm-up included)\n");
    std::fprintf(stderr, "%10s %6s %9s %10s  %s\n", "ms", "%", "calls", "us/call", "op");
    for (const auto& [key, t] : rows)
      std::fprintf(stderr, "%10.2f %6.2f %9lld %10.1f  %s\n", t.ms, 100 * t.ms / all, static_cast<long long>(t.calls),
                   1000 * t.ms / double(t.calls), key.c_str());
    std::fprintf(stderr, "%10.2f %6.2f %9s %10s  all ops\n", all, 100.0, "", "");
  }

 private:
  std::mutex mu_;
  std::map<std::string, Total> totals_;
};

Profile& profile() {
  static Profile p;
  return p;
}

const char* t_name(Transpose t) { return t == Transpose::kYes ? "T" : "N"; }

// What tells calls of one op apart in the table: the product's shape, the attention's extent.
template <int Index, class Args>
std::string key_of(const Args& a) {
  std::string key = kOpNames[Index];
  char buf[160];
  if constexpr (Index == k_gemm || Index == k_gemm_batched) {
    std::snprintf(buf, sizeof buf, " %s%s m=%lld n=%lld k=%lld", t_name(std::get<0>(a)), t_name(std::get<1>(a)),
                  static_cast<long long>(std::get<2>(a)), static_cast<long long>(std::get<3>(a)),
                  static_cast<long long>(std::get<4>(a)));
    key += buf;
    if constexpr (Index == k_gemm_batched) key += " batch=" + std::to_string(std::get<16>(a));
  } else if constexpr (Index == k_attention_forward || Index == k_attention_backward) {
    const AttentionDims& d = std::get<0>(a);
    std::snprintf(buf, sizeof buf, " B=%lld H=%lld nq=%lld nk=%lld%s", static_cast<long long>(d.batch),
                  static_cast<long long>(d.heads), static_cast<long long>(d.nq), static_cast<long long>(d.nk),
                  d.streamed() ? " streamed" : "");
    key += buf;
  } else if constexpr (Index == k_layer_norm_forward || Index == k_layer_norm_backward ||
                       Index == k_softmax_forward || Index == k_softmax_backward) {
    std::snprintf(buf, sizeof buf, " %lldx%lld", static_cast<long long>(std::get<0>(a)),
                  static_cast<long long>(std::get<1>(a)));
    key += buf;
  }
  return key;
}

// The timed form of one table slot: Fn's own arguments, events around the call.
template <int Index, auto Fn>
struct Timed;
template <int Index, class... A, void (*Fn)(void*, A...)>
struct Timed<Index, Fn> {
  static void call(void* h, A... a) {
    static thread_local cudaEvent_t start = nullptr, stop = nullptr;
    if (!start) {
      PCV_CUDA_CHECK(cudaEventCreate(&start));
      PCV_CUDA_CHECK(cudaEventCreate(&stop));
    }
    const cudaStream_t stream = handle_of(h).stream;
    PCV_CUDA_CHECK(cudaEventRecord(start, stream));
    Fn(h, a...);
    PCV_CUDA_CHECK(cudaEventRecord(stop, stream));
    PCV_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    PCV_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    profile().add(key_of<Index>(std::forward_as_tuple(a...)), ms);
  }
};

}  // namespace

bool profiling_requested() {
  static const bool on = [] {
    const char* v = std::getenv("PERCEIVER_CUDA_PROFILE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

KernelTable<float> profiled_table() {
  KernelTable<float> t;
#define PCV_OP_WRAP(op) t.op = &Timed<k_##op, &cuda::op>::call;
  PCV_KERNEL_OPS(PCV_OP_WRAP)
#undef PCV_OP_WRAP
  return t;
}

}  // namespace perceiver::cuda
