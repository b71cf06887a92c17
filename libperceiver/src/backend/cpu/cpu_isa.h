// Runtime dispatch of the CPU backend's vector kernels (elementwise ops, reductions, bias, layer
// norm, softmax, exp, GELU) by instruction-set level.
//
// The same source (cpu_vector_kernels.h) is compiled once per level: the baseline (the
// compiler's default target: SSE2 on x86-64, any arm64 CPU) and, on x86-64 only, the psABI
// levels x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512 F/BW/CD/DQ/VL). The level is chosen once
// per process from the CPU's features, or forced with PERCEIVER_CPU_ISA=baseline|v3|v4 (a
// level the CPU cannot run falls back to the best it can, with a warning on stderr).
//
// Each level gives bitwise-identical results at any thread count; levels differ from one
// another in the last bits (wider vectors reduce in other orders, and Eigen's exp/erf/tanh
// use FMA where it exists). tests/backend compares every level with the baseline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perceiver/activation.h"

namespace perceiver::cpu {

enum class Isa { kBaseline, kV3, kV4 };

/// "baseline", "v3", "v4": the PERCEIVER_CPU_ISA spellings.
const char* isa_name(Isa isa);
/// Compiled into this build and runnable on this CPU.
bool isa_supported(Isa isa);
/// The supported levels, baseline first.
std::vector<Isa> supported_isas();
/// The level the kernels run at (PERCEIVER_CPU_ISA, else the best supported; chosen once).
Isa active_isa();
/// One line for start-up logs: "x86-64-v4 (AVX-512), the best this CPU runs".
std::string isa_summary();

/// One query row of attention_backward_key_sums (VectorKernels::key_sums_row): the row's n scaled
/// scores s, its lse and delta, dP in ds (dS on return), and the chunk's key weights w, key
/// terms ks and runs of keys by group (runs[3u] ≤ j < runs[3u + 1] in group runs[3u + 2]).
template <class T>
struct KeySumsRow {
  int64_t n;
  const T* s;
  T lse, delta, scale, inv_scale;
  T* ds;
  uint16_t* ds16;  // dS rounded to bf16, or null
  T* p;            // room for the n probabilities (the kernels that store them)
  T* ks;
  const T* w;
  const int64_t* runs;
  int64_t run_count;
  T* sums;  // the row's group sums: [groups] of w·dS, then [groups] of w·P
  int64_t groups;
};

/// The kernels whose speed depends on the vector width; signatures as in cpu_kernels.h.
template <class T>
struct VectorKernels {
  void (*add)(int64_t n, const T* a, const T* b, T* y);
  void (*axpy)(int64_t n, T alpha, const T* x, T* y);
  void (*scale)(int64_t n, T alpha, T* x);
  void (*fill)(int64_t n, T value, T* x);
  double (*sum)(int64_t n, const T* x);
  double (*sum_squares)(int64_t n, const T* x);
  void (*bias_forward)(int64_t rows, int64_t cols, const T* bias, T* y);
  void (*bias_backward)(int64_t rows, int64_t cols, const T* dy, T* dbias);
  void (*layer_norm_forward)(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta,
                             double eps, T* y, T* mean, T* rstd);
  void (*layer_norm_backward)(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean,
                              const T* rstd, const T* dy, T* dx, T* dgamma, T* dbeta);
  void (*softmax_forward)(int64_t rows, int64_t cols, const T* x, T* y);
  void (*softmax_backward)(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx);
  void (*gelu_forward)(GeluKind kind, int64_t n, const T* x, T* y);
  void (*gelu_backward)(GeluKind kind, int64_t n, const T* x, const T* dy, T* dx);
  // x[i] = exp(x[i] − shift) for i < n, serially (attention calls it inside its own parallel
  // loops); returns Σ x[i] after the update.
  T (*exp_shifted)(int64_t n, T shift, T* x);
  // y[i] = exp(x[i] − shift), serially; returns Σ y[i].
  T (*exp_shifted_to)(int64_t n, const T* x, T shift, T* y);
  // y[i] = bf16(x[i]) (cpu_bf16_round.h), serially: the bf16 products' operand packing.
  void (*to_bf16)(int64_t n, const float* x, uint16_t* y);
  // The largest of x[0 .. n), n ≥ 1, serially.
  T (*max)(int64_t n, const T* x);
  // exp_shifted_to, and y16[i] = bf16(y[i]) in the same pass (float data; the attention's
  // probabilities for bf16 products). Returns Σ y[i], bitwise as exp_shifted_to does.
  T (*exp_shifted_bf16)(int64_t n, const T* x, T shift, T* y, uint16_t* y16);
  // ds[i] = p[i]·(ds[i] − delta)·scale, serially: the attention's score gradient from dP. Where
  // ds16 is not null (float data) also ds16[i] = bf16(ds[i]), in the same pass.
  void (*score_grad)(int64_t n, const T* p, T delta, T scale, T* ds, uint16_t* ds16);
  // ks[i] += ds[i]·(s[i] + 1)·inv_scale + delta·p[i], serially: one query row's terms of the key
  // gradient's dot products dX_j·x_j (attention_backward_key_sums), from the row's score gradient
  // ds, scaled scores s, probabilities p and delta (dS = P ⊙ (dP − delta)·scale, so
  // dS·s/scale + P·dP = ds·(s + 1)/scale + delta·p).
  void (*key_dot_terms)(int64_t n, const T* p, const T* ds, const T* s, T delta, T inv_scale, T* ks);
  // Σ w[i]·x[i], serially, summed as lane_sum does (cpu_reduce.h).
  double (*dot)(int64_t n, const T* w, const T* x);
  // (key_dot_terms and dot are key_sums_row's parts at the levels without its fused form; the
  // library calls them through it, and tests/backend compares it with them at each level.)
  // One row of the key sums in one pass, serially: p = exp(s − lse), dS = p·(dP − delta)·scale
  // over ds (and ds16), ks[j] += key_dot_terms' term, and per run u of group g, sums[g] +=
  // Σ w·dS and sums[groups + g] += Σ w·p over its keys, each run summed in lane_sum's order from
  // its first key. What exp_shifted_to, score_grad, key_dot_terms and two dots per run give.
  void (*key_sums_row)(const KeySumsRow<T>& row);
};

/// The kernels compiled for `isa` (which must be supported).
template <class T>
const VectorKernels<T>& vector_kernels(Isa isa);

/// The kernels of the active level.
template <class T>
const VectorKernels<T>& vector_kernels() {
  static const VectorKernels<T>& active = vector_kernels<T>(active_isa());
  return active;
}

}  // namespace perceiver::cpu
