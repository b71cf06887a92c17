// After the first step, no step allocates (issue 11): the kernels' temporaries come from grow-only
// per-thread scratch (backend/cpu/cpu_workspace.h), so a training step with the shapes of the one
// before calls no allocator from our code. This program replaces the C allocator (glibc allows
// it) and anonymous mmap with ones that, while a step runs, attribute each call to the first
// caller outside libc and libstdc++ (operator new, std containers and Eigen all end up here).
// Libraries that allocate inside their own calls are counted apart: libgomp (a team per parallel
// region, now and then a thread), OpenBLAS 0.3.21 (its small-matrix SGEMM kernels; now and then a
// buffer map) and oneDNN 2.6's primitive execution (an argument map per call; our side of the call
// reuses its memory objects and argument list).
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <cxxabi.h>
#include <execinfo.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_workspace.h"
#include "core/rng.h"
#include "model/sampling.h"
#include "model/step.h"
#include "optim/optimizer.h"

// A sanitizer owns the allocator (GCC says so with a macro, clang with __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define PCV_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define PCV_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef PCV_COUNT_ALLOCATIONS
#define PCV_COUNT_ALLOCATIONS 1
#endif

namespace {

std::atomic<bool> counting{false};
std::atomic<long> ours{0}, libraries{0};
thread_local bool inside = false;  // the classification itself must not count
std::atomic<void*> first_caller{nullptr};  // of our first allocation, for the failure message
std::atomic<void*> its_caller{nullptr};    // and the function that called it

bool in_object(const char* file, const char* name) { return file && std::strstr(file, name); }

// A frame of the replacement allocator below (or of note()).
bool allocator_frame(const Dl_info& info) {
  if (!info.dli_sname || !in_object(info.dli_fname, "test_step_allocations")) return false;
  for (const char* name : {"malloc", "calloc", "realloc", "memalign", "aligned_alloc", "posix_memalign", "mmap"})
    if (std::strcmp(info.dli_sname, name) == 0) return true;
  return std::strstr(info.dli_sname, "4note") != nullptr;
}

// Whose allocation: the first frame outside the allocator, libc and libstdc++.
void note() {
  if (!counting.load(std::memory_order_relaxed) || inside) return;
  inside = true;
  void* frames[24];
  const int n = backtrace(frames, 24);
  bool library = false;
  for (int i = 1; i < n; ++i) {
    Dl_info info{};
    if (!dladdr(frames[i], &info)) continue;
    const char* f = info.dli_fname;
    // libc, libstdc++ and the loader allocate for their callers (the loader: a new thread's TLS).
    if (in_object(f, "libc.so") || in_object(f, "libstdc++") || in_object(f, "ld-linux")) continue;
    if (allocator_frame(info)) continue;
    library = in_object(f, "libgomp") || in_object(f, "libopenblas") || in_object(f, "libdnnl");
    void* none = nullptr;
    if (!library && first_caller.compare_exchange_strong(none, frames[i]))
      its_caller = i + 1 < n ? frames[i + 1] : nullptr;
    break;
  }
  (library ? libraries : ours).fetch_add(1, std::memory_order_relaxed);
  inside = false;
}

struct Counts {
  long ours, libraries;
  std::string where;  // the function of our first allocation, and its caller
};

std::string function_at(void* address) {
  Dl_info info{};
  if (!address || !dladdr(address, &info)) return "?";
  if (!info.dli_sname)  // a local function: its object and offset (addr2line -e OBJECT OFFSET)
    return std::string(info.dli_fname ? info.dli_fname : "?") + " +" +
           std::to_string(reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_fbase));
  int status = 0;
  char* name = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string s = status == 0 ? name : info.dli_sname;
  std::free(name);
  return s.substr(0, 160);
}

// Allocations while f() runs.
template <class F>
Counts allocations_during(F f) {
  ours = 0, libraries = 0;
  first_caller = nullptr, its_caller = nullptr;
  counting = true;
  f();
  counting = false;
  return {ours.load(), libraries.load(),
          function_at(first_caller.load()) + " called from " + function_at(its_caller.load())};
}

}  // namespace

#if PCV_COUNT_ALLOCATIONS
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);

void* malloc(size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  note();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* memalign(size_t alignment, size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  note();
  void* p = __libc_memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }

// Anonymous maps too: blocks of a megabyte and more come from mmap (cpu_workspace.h's
// allocate_host), not malloc. The system call itself, so no lookup of the next mmap can allocate.
void* mmap(void* address, size_t n, int protection, int flags, int fd, off_t offset) {
  if (flags & MAP_ANONYMOUS) note();
  return reinterpret_cast<void*>(syscall(SYS_mmap, address, n, protection, flags, fd, offset));
}
}
#endif

namespace perceiver {
namespace {

class StepAllocations : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PCV_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer replaces the allocator";
    void* frames[2];
    backtrace(frames, 2);  // its first call loads libgcc (and allocates): not inside a count
  }
};

// The counter sees what it should: a vector's allocation counts, and so does a mapped block (a
// megabyte and more of the kernels' scratch).
TEST_F(StepAllocations, TheCounterCounts) {
  std::vector<float>* v = nullptr;
  EXPECT_GE(allocations_during([&] { v = new std::vector<float>(1000); }).ours, 2);
  delete v;
  const size_t big = size_t(4) << 20;
  void* p = nullptr;
  EXPECT_EQ(allocations_during([&] { p = cpu::allocate_host(big); }).ours, 1);
  ASSERT_NE(p, nullptr);
  static_cast<char*>(p)[big - 1] = 1;
  cpu::free_host(p, big);
}

// The precisions whose steps are checked: float32 and, where the CPU has them (or they are
// emulated), bf16 products.
std::vector<Precision> cpu_precisions() {
  std::vector<Precision> p{Precision::kFp32};
  if (cpu::bf16_products_available(nullptr)) p.push_back(Precision::kBf16);
  return p;
}

// `calls` (an attention forward and backward, say) on a cpu backend's float table three times in
// each precision, each followed by the synchronisation a caller makes before reading results:
// after the first, nothing allocates; then `check` looks at the results.
template <class Calls, class Check>
void expect_calls_after_the_first_allocate_nothing(Calls calls, Check check) {
  for (const Precision p : cpu_precisions()) {
    const auto backend = make_backend("cpu", {.precision = p});
    const Kernels<float> kern = backend->kernels<float>();
    for (int call = 0; call < 3; ++call) {
      const Counts n = allocations_during([&] {
        calls(kern);
        backend->synchronize();
      });
      if (call > 0) {
        EXPECT_EQ(n.ours, 0) << precision_name(p) << " call " << call << " allocated " << n.ours
                             << " time(s), first in " << n.where;
      }
    }
    check(precision_name(p));
  }
}

// The tiny model with dropout, masks and every loss term: forward, backward and an AdamW update
// with clipping, their losses and norms read back once. Step 1 sizes the scratch (the read-back
// evens out the threads' scratch: cpu_workspace.h); steps 2 and 3 (the same shapes, other data)
// allocate nothing. In float32 and, where the CPU has them (or they are emulated), with bf16
// products.
void expect_steps_after_the_first_allocate_nothing(Backend& backend) {
  ModelConfig c = model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/tiny.yaml");
  c.mask_prob_label = 0.5;
  c.mask_prob_image = 0.25;
  c.attention_probs_dropout_prob = 0.1;
  PerceiverNet<float> net(c, backend);
  net.store().initialize(3, InitScheme::kHuggingFace);
  OptimizerOptions oo;
  oo.name = "adamw";
  oo.max_grad_norm = 0.05;
  auto opt = make_optimizer(oo, net.store().registry(), backend);
  const int64_t B = 2;
  RngStream rng(11, RngPurpose::kTest);
  std::vector<float> video(size_t(B * c.pixels() * 3)), audio(size_t(B * c.audio_samples()));
  std::vector<int64_t> labels(B);
  Arena<double> stats(backend, size_t(kLossTermCount + kOptimStatCount));
  std::vector<double> host(stats.size());
  const LossConfig lc;
  const char* precision = precision_name(backend.precision());
  for (int64_t step = 0; step < 3; ++step) {
    for (auto& v : video) v = float(rng.uniform());
    for (auto& v : audio) v = float(rng.normal() * 0.3);
    for (auto& l : labels) l = int64_t(rng.below(uint64_t(c.num_labels)));
    const OutputPoints pts = draw_output_points(c, 5, step);  // the sampler's host data
    const std::vector<uint8_t> mask = draw_masks(c, B, 5, step, 0);
    const Counts n = allocations_during([&] {
      net.store().zero_grad();
      enqueue_step(net, video.data(), audio.data(), labels.data(), B, pts, mask, lc, true, stats.data(),
                   TrainingMode{true, 5, step, 0});
      opt->enqueue_step(net.store(), 1e-3, stats.data() + kLossTermCount);
      stats.download(host.data(), host.size());
      opt->finish_step(host.data() + kLossTermCount);
    });
    if (step > 0) {
      EXPECT_EQ(n.ours, 0) << precision << " step " << step << " allocated " << n.ours << " time(s), first in "
                           << n.where;
      std::printf("%s step %ld: %ld allocations inside libgomp, OpenBLAS and oneDNN\n", precision, long(step),
                  n.libraries);
    }
    EXPECT_TRUE(std::isfinite(host[0])) << precision << " step " << step;
  }
}

TEST_F(StepAllocations, ATrainingStepAfterTheFirstAllocatesNothing) {
  for (const Precision p : cpu_precisions()) {
    const auto backend = make_backend("cpu", {.precision = p});
    expect_steps_after_the_first_allocate_nothing(*backend);
  }
}

// The streamed attention kernels (the encoder's 52k keys; the tiny model materialises P) with
// dropout and in-place K/V gradients, forward and backward: nothing after the first call. In
// float32 and, where the CPU has them (or they are emulated), with bf16 products, whose operands
// get per-thread scratch sized by each product of a dynamically scheduled loop.
TEST_F(StepAllocations, StreamedAttentionAfterTheFirstCallAllocatesNothing) {
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 40, d.nk = 700, d.dqk = 8, d.dv = 8;
  d.scale = 0.35, d.kv_chunk = 64, d.kv_grad_in_place = true;
  d.dropout_p = 0.1, d.dropout_key = 9;
  const size_t q_size = size_t(d.batch * d.nq * d.heads * d.dqk), k_size = size_t(d.batch * d.nk * d.heads * d.dqk);
  std::vector<float> q(q_size, 0.1f), k(k_size), v(k_size), o(q_size), saved(size_t(d.saved_elems()));
  std::vector<float> dout(q_size, 0.01f), dq(q_size);
  expect_calls_after_the_first_allocate_nothing(
      [&](const Kernels<float>& kern) {
        // K and V again: the backward wrote their gradients over them (writes, no allocation).
        for (size_t i = 0; i < k_size; ++i) k[i] = float(i % 13) * 0.01f, v[i] = float(i % 7) * 0.02f;
        kern.attention_forward(d, q.data(), k.data(), v.data(), o.data(), saved.data());
        kern.attention_backward(d, q.data(), k.data(), v.data(), o.data(), saved.data(), dout.data(), dq.data(),
                                k.data(), v.data());
      },
      [&](const char* precision) { EXPECT_TRUE(std::isfinite(dq[0])) << precision; });
}

// One (batch, head) pair materialised: the decoder's attention at batch 1. Its products are tiled
// over the pool, so they must run in the pool's threads: opened inside a one-thread parallel
// region they would be nested teams, for which libgomp makes new threads on every call, and each
// new thread its own scratch (allocations here). In float32 and, where the CPU has them, with
// bf16 products.
TEST_F(StepAllocations, ASinglePairAttentionAfterTheFirstCallAllocatesNothing) {
  AttentionDims d;
  d.batch = 1, d.heads = 1, d.nq = 300, d.nk = 400, d.dqk = 64, d.dv = 64;
  d.scale = 0.125;
  const size_t q_size = size_t(d.nq * d.dqk), k_size = size_t(d.nk * d.dqk);
  std::vector<float> q(q_size), k(k_size), v(k_size), o(q_size), saved(size_t(d.saved_elems()));
  std::vector<float> dout(q_size, 0.01f), dq(q_size), dk(k_size), dv(k_size);
  for (size_t i = 0; i < q_size; ++i) q[i] = float(i % 11) * 0.03f;
  for (size_t i = 0; i < k_size; ++i) k[i] = float(i % 13) * 0.01f, v[i] = float(i % 7) * 0.02f;
  expect_calls_after_the_first_allocate_nothing(
      [&](const Kernels<float>& kern) {
        kern.attention_forward(d, q.data(), k.data(), v.data(), o.data(), saved.data());
        kern.attention_backward(d, q.data(), k.data(), v.data(), o.data(), saved.data(), dout.data(), dq.data(),
                                dk.data(), dv.data());
      },
      [&](const char* precision) { EXPECT_TRUE(std::isfinite(dq[0]) && std::isfinite(dk[0])) << precision; });
}

}  // namespace
}  // namespace perceiver
