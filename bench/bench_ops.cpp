// Op benchmarks at the shapes of the released Kinetics model (perceiver-spec.md §1, §8), measured
// through the real dispatch path perceiver::cpu_backend().kernels<float>().
//
// Each benchmark reports a rate counter: GFLOP/s ("GFLOP") for GEMMs and attention, GB/s ("GB")
// for memory-bound ops. The ceilings are measured first in the same run: a 2048³ SGEMM through
// our dispatch and as one multi-threaded OpenBLAS call (the SGEMM ceiling is the faster of the
// two), and a streaming add over [M,C]; every later row also reports "pct_ceil", its percentage
// of the matching ceiling. bench/run_ops.sh pairs these rows with bench/torch_ops.py (same ids, same
// shapes) and prints one table; bench/README.md says how to read it.
//
// Shape legend (spec §8): M = 52097 input tokens, C = 704 input channels, N = 784 latents,
// D = 512 latent channels, O = 1025 decoder queries, E = 1026 decoder query channels.
//
// Work models (identical in torch_ops.py, so ours/PyTorch is a ratio of times):
//  - GEMM: 2·m·n·k FLOP.
//  - attention: the algorithmic FLOPs of the materialised form, forward 2·Nq·Nk·(dqk + dv),
//    backward 4·Nq·Nk·(dqk + dv) (per batch and head). The streamed form recomputes Q·Kᵀ in
//    backward; that extra work is not counted, so it shows as a lower rate.
//  - memory-bound ops: 4 bytes per element per compulsory stream. Forward reads x and writes y
//    (2 streams); backward reads x (or y), dy and dx and writes dx (4 streams: our backward
//    kernels accumulate into dx).
//
// Usage: bench_ops [--threads N] [--precision fp32|bf16] [Google Benchmark flags, e.g.
// --benchmark_filter=gemm]
// --threads N (or PERCEIVER_BENCH_THREADS=N) sets the OpenMP pool; 0 or unset: one per core.
// --precision bf16 runs the products (GEMMs, attention) with bf16 operands and float32
// accumulation, as perceiver-train --precision bf16 does; only those rows are registered then (the
// other ops are float32 in both precisions), and the ceiling is the same square GEMM in bf16.
// --benchmark_min_time defaults to 0.3 s here.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "perceiver/backend.h"
#include "perceiver/error.h"
#include "backend/cpu/cpu_isa.h"
#include "core/blas.h"
#include "perceiver/threads.h"

// Declared as in core/threads.cpp (cblas.h does not declare it in every OpenBLAS build).
extern "C" void openblas_set_num_threads(int);

namespace {

using perceiver::AttentionDims;
using perceiver::GeluKind;
using perceiver::KernelTable;
using perceiver::Transpose;

// Model sizes (spec §1).
constexpr int64_t kM = 52097;  // input tokens: 1920 audio + 50176 image + 1 label
constexpr int64_t kC = 704;    // input channels (encoder K/V width)
constexpr int64_t kN = 784;    // latents
constexpr int64_t kD = 512;    // latent channels
constexpr int64_t kO = 1025;   // decoder queries (512 image + 512 audio + 1 label)
constexpr int64_t kE = 1026;   // decoder query channels
constexpr int64_t kLatentHeads = 8;
constexpr int64_t kKvRowChunk = 2048;  // rows per chunk of the encoder's LN_kv/K/V path (perceiver_net.cpp)
constexpr int64_t kCeilingSize = 2048;

// Default --benchmark_min_time: seconds per benchmark run (big ops take one iteration anyway).
char g_default_min_time[] = "--benchmark_min_time=0.3";

// The CPU backend the rows run on: float32 products, or bf16 ones (--precision bf16).
std::unique_ptr<perceiver::Backend> g_backend;
perceiver::Kernels<float> ops() { return g_backend->kernels<float>(); }

// ---- workspace ------------------------------------------------------------------------------

// Named float buffers, allocated by the CPU backend (64-byte aligned), filled once with values
// uniform in [-1, 1) and kept for the whole run, so big operands are shared between benchmarks
// and page faults never land inside a timed loop.
class Workspace {
 public:
  float* get(const std::string& name, int64_t elems) {
    auto it = entries_.find(name);
    if (it != entries_.end() && it->second.elems == elems) return it->second.data;
    if (it != entries_.end()) entries_.erase(it);
    Entry e{perceiver::cpu_backend().allocate(size_t(elems) * sizeof(float)), nullptr, elems};
    e.data = static_cast<float*>(e.buf.data());
    fill_uniform(e.data, elems, uint64_t(std::hash<std::string>{}(name)));
    return entries_.emplace(name, std::move(e)).first->second.data;
  }

 private:
  struct Entry {
    perceiver::Buffer buf;
    float* data;
    int64_t elems;
  };
  // splitmix64 of (seed, index): deterministic and independent of the thread count.
  static void fill_uniform(float* x, int64_t n, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint64_t z = seed + uint64_t(i) * 0x9E3779B97F4A7C15ull;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      x[i] = float(double(z >> 40) * 0x1.0p-24 * 2.0 - 1.0);
    }
  }
  std::map<std::string, Entry> entries_;
};

Workspace& ws() {
  static Workspace w;
  return w;
}

// ---- registration ---------------------------------------------------------------------------

enum class Unit { kGflop, kGbyte };

// Ceilings measured in this run (best over repetitions); 0 until their benchmark has run.
double g_sgemm_ceiling = 0.0;   // GFLOP/s
double g_stream_ceiling = 0.0;  // GB/s

// One benchmark: `setup` runs untimed (once per Google Benchmark run), `op` is timed.
struct OpBench {
  std::string id;           // joins with torch_ops.py
  std::string shape;        // printed in the table; must match torch_ops.py
  std::string what;         // one-line description (the benchmark label)
  Unit unit;
  double work;              // FLOP or bytes per call
  std::function<std::function<void()>()> setup;  // returns the timed call
  double* ceiling_out = nullptr;  // set for the ceiling benchmarks (the faster one counts)
};

// An untimed first call for quick ops only: a GEMM or attention of several GFLOP runs for
// seconds, which dwarfs start-up effects, and a second untimed call would double the run time.
// torch_ops.py applies the same rule.
bool needs_warmup(const OpBench& b) { return b.unit == Unit::kGbyte || b.work < 4e9; }

void run(benchmark::State& state, const OpBench& b, bool& warmed) {
  std::function<void()> op = b.setup();
  if (!warmed && needs_warmup(b)) {  // first touch of scratch, OpenBLAS buffers, thread start-up
    op();
    warmed = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    op();
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double rate = b.work * 1e-9 * double(state.iterations()) / seconds;
  state.counters[b.unit == Unit::kGflop ? "GFLOP" : "GB"] =
      benchmark::Counter(b.work * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (b.ceiling_out) *b.ceiling_out = std::max(*b.ceiling_out, rate);
  const double ceiling = b.unit == Unit::kGflop ? g_sgemm_ceiling : g_stream_ceiling;
  if (ceiling > 0) state.counters["pct_ceil"] = 100.0 * rate / ceiling;
  state.SetLabel(b.what);
}

void add(OpBench b) {
  auto spec = std::make_shared<const OpBench>(std::move(b));
  auto warmed = std::make_shared<bool>(false);
  benchmark::RegisterBenchmark((spec->id + "/" + spec->shape).c_str(),
                               [spec, warmed](benchmark::State& state) { run(state, *spec, *warmed); })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

// A workspace buffer keyed by role and size, so operands of equal size are shared.
float* buf(const std::string& role, int64_t elems) {
  return ws().get(role + "." + std::to_string(elems), elems);
}

std::string dims(std::initializer_list<int64_t> extents) {
  std::string s;
  for (int64_t e : extents) s += (s.empty() ? "" : "x") + std::to_string(e);
  return s;
}

// ---- the benchmarks ------------------------------------------------------------------------

// C[m,n] = op(A)·op(B) + beta·C; shape "NT:m x n x k" (row-major, as KernelTable::gemm).
void add_gemm(const std::string& id, const std::string& what, Transpose ta, Transpose tb,
              int64_t m, int64_t n, int64_t k, float beta, double* ceiling_out = nullptr) {
  const auto letter = [](Transpose t) { return t == Transpose::kYes ? "T" : "N"; };
  OpBench b{id, std::string(letter(ta)) + letter(tb) + ":" + dims({m, n, k}), what, Unit::kGflop,
            2.0 * double(m) * double(n) * double(k), {}, ceiling_out};
  b.setup = [=] {
    const int64_t lda = ta == Transpose::kNo ? k : m, ldb = tb == Transpose::kNo ? n : k;
    const float* a = buf("gemm.a", m * k);   // [m,k] or [k,m]
    const float* bm = buf("gemm.b", k * n);  // [k,n] or [n,k]
    float* c = buf("gemm.c", m * n);         // [m,n]
    return std::function<void()>(
        [=] { ops().gemm(ta, tb, m, n, k, 1.0f, a, lda, bm, ldb, beta, c, n); });
  };
  add(std::move(b));
}

// The same square SGEMM as one OpenBLAS call running OpenBLAS's own threads (as PyTorch calls it),
// outside our pool: the machine's SGEMM ceiling independent of cpu::gemm's tiling. Our pool is
// idle meanwhile; OpenBLAS goes back to one thread afterwards (threads.h).
void add_blas_ceiling(int64_t size) {
  OpBench b{"ceiling_sgemm_blas", "NN:" + dims({size, size, size}),
            "square SGEMM, one multi-threaded OpenBLAS call", Unit::kGflop,
            2.0 * double(size) * double(size) * double(size), {}, &g_sgemm_ceiling};
  b.setup = [=] {
    const float *a = buf("gemm.a", size * size), *bm = buf("gemm.b", size * size);
    float* c = buf("gemm.c", size * size);
    const int threads = perceiver::threads::num_threads();
    return std::function<void()>([=] {
      openblas_set_num_threads(threads);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(size), int(size), int(size), 1.0f, a,
                  int(size), bm, int(size), 0.0f, c, int(size));
      openblas_set_num_threads(1);
    });
  };
  add(std::move(b));
}

// y = a + b over n elements: three streams, the memory-bound ceiling.
void add_stream_ceiling(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  OpBench b{"ceiling_stream_add", dims({rows, cols}), "y = a + b (bandwidth ceiling)", Unit::kGbyte,
            3.0 * 4.0 * double(n), {}, &g_stream_ceiling};
  b.setup = [=] {
    const float *a = buf("ln.x", n), *bb = buf("ln.dy", n);
    float* y = buf("ln.y", n);
    return std::function<void()>([=] { ops().add(n, a, bb, y); });
  };
  add(std::move(b));
}

void add_layer_norm(const std::string& suffix, const std::string& what, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  struct Tensors {
    const float *x, *gamma, *beta;  // [rows,cols], [cols], [cols]
    float *y, *mean, *rstd;         // [rows,cols], [rows], [rows]
    const float* dy;                // [rows,cols]
    float *dx, *dgamma, *dbeta;     // [rows,cols], [cols], [cols]
  };
  const auto tensors = [=] {
    return Tensors{buf("ln.x", n),    buf("ln.gamma", cols), buf("ln.beta", cols),
                   buf("ln.y", n),    buf("ln.mean", rows),  buf("ln.rstd", rows),
                   buf("ln.dy", n),   buf("ln.dx", n),       buf("ln.dgamma", cols),
                   buf("ln.dbeta", cols)};
  };
  OpBench fwd{"layer_norm_fwd" + suffix, dims({rows, cols}), what, Unit::kGbyte,
              2.0 * 4.0 * double(n), {}, nullptr};
  fwd.setup = [=] {
    const Tensors t = tensors();
    return std::function<void()>(
        [=] { ops().layer_norm_forward(rows, cols, t.x, t.gamma, t.beta, 1e-5, t.y, t.mean, t.rstd); });
  };
  OpBench bwd{"layer_norm_bwd" + suffix, dims({rows, cols}), what, Unit::kGbyte,
              4.0 * 4.0 * double(n), {}, nullptr};
  bwd.setup = [=] {
    const Tensors t = tensors();
    ops().layer_norm_forward(rows, cols, t.x, t.gamma, t.beta, 1e-5, t.y, t.mean, t.rstd);
    return std::function<void()>([=] {
      ops().layer_norm_backward(rows, cols, t.x, t.gamma, t.mean, t.rstd, t.dy, t.dx, t.dgamma, t.dbeta);
    });
  };
  add(std::move(fwd));
  add(std::move(bwd));
}

void add_softmax(const std::string& suffix, const std::string& what, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  OpBench fwd{"softmax_fwd" + suffix, dims({rows, cols}), what, Unit::kGbyte, 2.0 * 4.0 * double(n),
              {}, nullptr};
  fwd.setup = [=] {
    const float* x = buf("sm.x", n);  // [rows,cols]
    float* y = buf("sm.y", n);        // [rows,cols]
    return std::function<void()>([=] { ops().softmax_forward(rows, cols, x, y); });
  };
  OpBench bwd{"softmax_bwd" + suffix, dims({rows, cols}), what, Unit::kGbyte, 4.0 * 4.0 * double(n),
              {}, nullptr};
  bwd.setup = [=] {
    const float *x = buf("sm.x", n), *dy = buf("sm.dy", n);
    float *y = buf("sm.y", n), *dx = buf("sm.dx", n);
    ops().softmax_forward(rows, cols, x, y);
    return std::function<void()>([=] { ops().softmax_backward(rows, cols, y, dy, dx); });
  };
  add(std::move(fwd));
  add(std::move(bwd));
}

// The softmax forward on scores spread over [-100, 100]: most of e^(x − max) is below float's
// normal range, as in a trained model's peaked attention rows (and under a −inf mask).
void add_softmax_peaked(const std::string& what, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  OpBench fwd{"softmax_fwd_peaked", dims({rows, cols}), what, Unit::kGbyte, 2.0 * 4.0 * double(n), {}, nullptr};
  fwd.setup = [=] {
    const float* x = buf("sm.x", n);
    float* xp = buf("sm.x_peaked", n);
    for (int64_t i = 0; i < n; ++i) xp[i] = 100.0f * x[i];
    float* y = buf("sm.y", n);
    return std::function<void()>([=] { ops().softmax_forward(rows, cols, xp, y); });
  };
  add(std::move(fwd));
}

void add_gelu(const std::string& suffix, const std::string& what, GeluKind kind, int64_t rows,
              int64_t cols) {
  const int64_t n = rows * cols;
  const std::string flavour = kind == GeluKind::kErf ? "erf" : "tanh";
  OpBench fwd{"gelu_" + flavour + "_fwd" + suffix, dims({rows, cols}), what, Unit::kGbyte,
              2.0 * 4.0 * double(n), {}, nullptr};
  fwd.setup = [=] {
    const float* x = buf("gelu.x", n);
    float* y = buf("gelu.y", n);
    return std::function<void()>([=] { ops().gelu_forward(kind, n, x, y); });
  };
  OpBench bwd{"gelu_" + flavour + "_bwd" + suffix, dims({rows, cols}), what, Unit::kGbyte,
              4.0 * 4.0 * double(n), {}, nullptr};
  bwd.setup = [=] {
    const float *x = buf("gelu.x", n), *dy = buf("gelu.dy", n);
    float* dx = buf("gelu.dx", n);
    return std::function<void()>([=] { ops().gelu_backward(kind, n, x, dy, dx); });
  };
  add(std::move(fwd));
  add(std::move(bwd));
}

// Fused attention core, batch 1: Q [nq, H·dh], K and V [nk, H·dh]. The backward's setup runs
// the forward of the same mode once, so O and the saved softmax state are real. `folded_of` > 0:
// the encoder's folded call (layers/attention_folded.cpp): keys and values are one buffer, the
// call's nk keys the first range of `folded_of`, scores kept.
void add_attention(const std::string& id, const std::string& what, int64_t heads, int64_t nq,
                   int64_t nk, int64_t dh, int64_t kv_chunk, bool keep_scores = false, int64_t folded_of = 0) {
  AttentionDims d;
  d.heads = heads;
  d.nq = nq;
  d.nk = nk;
  d.dqk = d.dv = dh;
  d.scale = 1.0 / std::sqrt(double(dh));
  d.kv_chunk = kv_chunk;
  d.keep_scores = keep_scores;
  d.key_count = folded_of;
  const bool folded = folded_of > 0;
  const int64_t width = heads * dh;
  const std::string shape = "Nq" + std::to_string(nq) + ",Nk" + std::to_string(nk) + ",d" +
                            std::to_string(dh) + ",h" + std::to_string(heads);
  const std::string mode = (kv_chunk > 0 ? "_kc" + std::to_string(kv_chunk) : "_mat") + (keep_scores ? "_keep" : "") +
                           (folded ? "_folded" : "");
  const double fwd_flop = 2.0 * double(heads) * double(nq) * double(nk) * double(2 * dh);
  struct Tensors {
    const float *q, *k, *v, *dout;  // [nq,width], [nk,width], [nk,width], [nq,width]
    float *o, *saved;               // [nq,width], P [heads,nq,nk] or lse [heads,nq] (then S)
    float *dq, *dk, *dv;            // like q, k, v
  };
  const auto tensors = [=] {
    return Tensors{buf("attn.q", nq * width),  buf("attn.k", nk * width),
                   buf(folded ? "attn.k" : "attn.v", nk * width),  buf("attn.do", nq * width),
                   buf("attn.o", nq * width),  buf("attn.saved", d.saved_elems()),
                   buf("attn.dq", nq * width), buf("attn.dk", nk * width),
                   buf(folded ? "attn.dk" : "attn.dv", nk * width)};
  };
  OpBench fwd{id + "_fwd" + mode, shape, what, Unit::kGflop, fwd_flop, {}, nullptr};
  fwd.setup = [=] {
    const Tensors t = tensors();
    return std::function<void()>([=] { ops().attention_forward(d, t.q, t.k, t.v, t.o, t.saved); });
  };
  OpBench bwd{id + "_bwd" + mode, shape, what, Unit::kGflop, 2.0 * fwd_flop, {}, nullptr};
  bwd.setup = [=] {
    const Tensors t = tensors();
    ops().attention_forward(d, t.q, t.k, t.v, t.o, t.saved);
    return std::function<void()>([=] {
      ops().attention_backward(d, t.q, t.k, t.v, t.o, t.saved, t.dout, t.dq, t.dk, t.dv);
    });
  };
  add(std::move(fwd));
  add(std::move(bwd));
}

// The folded range call's backward as the net runs it on the CPU: dQ and, in place of dK + dV, the
// sums that give the padding and mask tokens their gradients (attention_backward_key_sums; its
// keys in the image rows' group, weights near a layer norm's rstd). Its work is dP and dQ, two
// products; PyTorch's row is the full backward of the same call.
void add_attention_key_sums(const std::string& id, const std::string& what, int64_t nq, int64_t nk, int64_t dh,
                            int64_t kv_chunk, int64_t folded_of) {
  AttentionDims d;
  d.nq = nq, d.nk = nk, d.dqk = d.dv = dh, d.kv_chunk = kv_chunk, d.keep_scores = true, d.key_count = folded_of;
  d.scale = 1.0 / std::sqrt(double(dh));
  constexpr int64_t kGroups = 6;
  const std::string shape = "Nq" + std::to_string(nq) + ",Nk" + std::to_string(nk) + ",d" + std::to_string(dh) + ",h1";
  OpBench bwd{id + "_bwd_kc" + std::to_string(kv_chunk) + "_keep_folded_sums", shape, what, Unit::kGflop,
              2.0 * double(nq) * double(nk) * double(2 * dh), {}, nullptr};
  bwd.setup = [=] {
    const float *q = buf("attn.q", nq * dh), *x = buf("attn.k", nk * dh), *dout = buf("attn.do", nq * dh);
    float *o = buf("attn.o", nq * dh), *saved = buf("attn.saved", d.saved_elems()), *dq = buf("attn.dq", nq * dh);
    float *q_sums = buf("attn.q_sums", nq * 2 * kGroups), *key_sums = buf("attn.key_sums", kGroups * dh);
    float* rstd = buf("attn.rstd", folded_of);
    auto* groups = reinterpret_cast<uint8_t*>(buf("attn.groups", folded_of / 4 + 1));
    std::fill_n(groups, folded_of, uint8_t(1));
    for (int64_t j = 0; j < folded_of; ++j) rstd[j] = 1.0f + 0.01f * float(j % 7);
    ops().attention_forward(d, q, x, x, o, saved);
    return std::function<void()>([=] {
      ops().attention_backward_key_sums(d, q, x, o, saved, dout, groups, rstd, kGroups, dq, q_sums, key_sums);
    });
  };
  add(std::move(bwd));
}

// Registration order is run order: the ceilings first, so later rows can report pct_ceil.
// (With --benchmark_enable_random_interleaving pct_ceil uses the ceilings measured so far.)
// bf16: the products only, against the square GEMM in bf16.
void register_all(perceiver::Precision precision) {
  constexpr auto N = Transpose::kNo;
  constexpr auto T = Transpose::kYes;
  const bool bf16 = precision == perceiver::Precision::kBf16;
  if (bf16) {
    add_gemm("ceiling_gemm_bf16", "square GEMM, bf16 operands (compute ceiling)", N, N, kCeilingSize, kCeilingSize,
             kCeilingSize, 0.0f, &g_sgemm_ceiling);
  } else {
    add_gemm("ceiling_sgemm", "square SGEMM (compute ceiling)", N, N, kCeilingSize, kCeilingSize, kCeilingSize,
             0.0f, &g_sgemm_ceiling);
    add_blas_ceiling(kCeilingSize);
    add_stream_ceiling(kM, kC);
  }

  add_gemm("gemm_kv_proj", "encoder K/V projection Y = X·Wᵀ", N, T, kM, kC, kC, 0.0f);
  add_gemm("gemm_kv_proj_dx", "encoder K/V projection dX = dY·W", N, N, kM, kC, kC, 0.0f);
  add_gemm("gemm_kv_proj_dw", "encoder K/V projection dW += dYᵀ·X", T, N, kC, kC, kM, 1.0f);
  add_gemm("gemm_kv_proj_chunk", "the K/V projection over one chunk of rows, as the model runs it", N, T,
           kKvRowChunk, kC, kC, 0.0f);
  add_gemm("gemm_kv_proj_dx_chunk", "its dX over one chunk of rows", N, N, kKvRowChunk, kC, kC, 0.0f);
  add_gemm("gemm_kv_proj_dw_chunk", "its dW over one chunk of rows", T, N, kC, kC, kKvRowChunk, 1.0f);
  add_gemm("gemm_q_proj", "encoder query projection Q = LN(z)·Wqᵀ", N, T, kN, kC, kD, 0.0f);
  add_gemm("gemm_latent_proj", "latent self-attention projection", N, T, kN, kD, kD, 0.0f);
  add_gemm("gemm_qk", "encoder scores S = Q·Kᵀ (also dP = dO·Vᵀ)", N, T, kN, kM, kC, 0.0f);
  add_gemm("gemm_pv", "encoder O = P·V (also dQ = dS·K)", N, N, kN, kC, kM, 0.0f);
  add_gemm("gemm_dk", "encoder dK = dSᵀ·Q (also dV = Pᵀ·dO)", T, N, kM, kC, kN, 0.0f);

  if (!bf16) {
    add_layer_norm("", "LN over the input array", kM, kC);
    add_layer_norm("_latent", "LN over the latents", kN, kD);
    add_softmax("", "rows of the encoder attention P", kN, kM);
    add_softmax("_latent", "rows of latent self-attention P, 8 heads", kLatentHeads * kN, kN);
    add_softmax_peaked("rows of the encoder attention P, peaked: scores spread over 200", kN, kM);
    add_gelu("", "latent MLP hidden (HF exact GELU)", GeluKind::kErf, kN, kD);
    add_gelu("", "latent MLP hidden (DM tanh GELU)", GeluKind::kTanh, kN, kD);
    add_gelu("_dec", "decoder MLP hidden", GeluKind::kErf, kO, kE);
  }

  add_attention("attn_enc", "encoder cross-attention core", 1, kN, kM, kC, 0);
  add_attention("attn_enc", "encoder cross-attention core, streamed", 1, kN, kM, kC, 512);
  add_attention("attn_enc", "encoder cross-attention core, streamed", 1, kN, kM, kC, 2048);
  add_attention("attn_enc", "encoder cross-attention core, streamed, scores kept (the projecting model's)", 1, kN,
                kM, kC, 512, true);
  add_attention("attn_enc_range", "encoder cross-attention core as the model runs it: K/V folded (keys = values = "
                "LN(x)), one 2048-key range of the 52097, scores kept", 1, kN, kKvRowChunk, kC, 512, true, kM);
  if (bf16)  // with bf16 products the model keeps no scores (the recompute is cheaper there)
    add_attention("attn_enc_range", "the same as the bf16 model runs it: no scores kept", 1, kN, kKvRowChunk, kC, 512,
                  false, kM);
  add_attention_key_sums("attn_enc_range", "its backward as the net runs it on the CPU: dQ and the padding and mask "
                         "tokens' group sums in place of dK + dV", kN, kKvRowChunk, kC, 512, kM);
  add_attention("attn_latent", "latent self-attention core", kLatentHeads, kN, kN, kD / kLatentHeads, 0);
  add_attention("attn_latent", "latent self-attention core as a training step runs it: streamed in 512-key chunks "
                "(its 8 x 784^2 probabilities are over the 16 MB materialising limit)", kLatentHeads, kN, kN,
                kD / kLatentHeads, 512);
}

// Strips `--name VALUE` / `--name=VALUE` from argv and returns VALUE (`fallback` when absent).
std::string take_flag(std::vector<char*>& args, const std::string& name, std::string fallback) {
  std::string value = std::move(fallback);
  std::vector<char*> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a == name) {
      PCV_CHECK(i + 1 < args.size(), name, " needs a value");
      value = args[++i];
    } else if (a.rfind(name + "=", 0) == 0) {
      value = a.substr(name.size() + 1);
    } else {
      rest.push_back(args[i]);
    }
  }
  args = rest;
  return value;
}

// --threads N / --threads=N; PERCEIVER_BENCH_THREADS is the fallback.
int take_threads_flag(std::vector<char*>& args) {
  const char* env = std::getenv("PERCEIVER_BENCH_THREADS");
  const std::string value = take_flag(args, "--threads", env ? env : "0");
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  PCV_CHECK(!value.empty() && *end == '\0' && n >= 0 && n <= 1024, "--threads: bad value '", value,
            "'; HINT: a count of threads, 0 for one per physical core");
  return int(n);
}

}  // namespace

int main(int argc, char** argv) {
  // As the apps do: run the OpenBLAS kernels the CPU's features call for.
  perceiver::threads::use_fastest_cpu_kernels(argv);
  try {
    std::vector<char*> args(argv, argv + argc);
    const int threads = take_threads_flag(args);
    perceiver::BackendOptions options;
    options.precision = perceiver::parse_precision(take_flag(args, "--precision", "fp32"));
    for (char* a : args)
      if (std::strcmp(a, "--help") == 0)
        std::printf("bench_ops [--threads N] [--precision fp32|bf16] [Google Benchmark flags below]\n"
                    "  --threads N         OpenMP compute threads (default: PERCEIVER_BENCH_THREADS, "
                    "else one per physical core)\n"
                    "  --precision bf16    the products only, with bf16 operands and float32 accumulation "
                    "(CPUs with AVX512-BF16 or AMX)\n\n");
    perceiver::threads::set_num_threads(threads);
    g_backend = perceiver::make_backend("cpu", options);
    benchmark::AddCustomContext("perceiver_threads", std::to_string(perceiver::threads::num_threads()));
    benchmark::AddCustomContext("perceiver_topology", perceiver::threads::topology().summary);
    benchmark::AddCustomContext("openblas_core", perceiver::blas::blas_core());
    benchmark::AddCustomContext("openblas_kernels", perceiver::blas::kernel_summary());
    benchmark::AddCustomContext("cpu_isa", perceiver::cpu::isa_summary());
    benchmark::AddCustomContext("precision", perceiver::precision_name(options.precision));
    register_all(options.precision);
    const bool has_min_time = std::any_of(args.begin(), args.end(), [](const char* a) {
      return std::strncmp(a, "--benchmark_min_time", 20) == 0;
    });
    if (!has_min_time) args.insert(args.begin() + 1, g_default_min_time);
    int n = int(args.size());
    args.push_back(nullptr);
    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
}
