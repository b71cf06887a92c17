// Multi-head attention core O = softmax(scale·Q·Kᵀ)·V on the GPU, forward and backward, with
// attention dropout (AttentionDims). Every product goes through matmul() (cuBLASLt), batched
// over the batch for one head at a time; the row work is done by the kernels below, a block
// per query row. The two forms and the formulas are those of backend/cpu/cpu_attention.cpp:
//  - materialised: P [B,H,Nq,Nk] is saved; backward dS = P ⊙ (dP⊙M − rowsum(dP⊙M ⊙ P))·scale;
//  - streamed: keys in chunks with an online softmax (running max m and sum l per row, O
//    rescaled by exp(m_old − m_new) per chunk); only lse = m + log l is saved; backward
//    recomputes P = exp(S − lse) chunk by chunk with delta = rowsum(dO ⊙ O).
// This is the encoder's cross-attention at kinetics700 (784 queries × 52097 keys, d = 704),
// for which no library kernel does forward and backward (ACCELERATORS.md). The GPU picks its own
// key chunk, as large as kChunkBudgetBytes of score buffers allows (one chunk when everything
// fits): AttentionDims::kv_chunk only selects the streamed form here, so chunking changes
// results only by float rounding, as on the CPU.
//
// Dropout masks are Philox words of (key, stream, example, head, row, key index) exactly as on
// the CPU (bodies/philox.h), recomputed wherever needed, never stored.
// kv_grad_in_place: dK and dV of a key chunk are written (=) over K and V once that chunk's
// products no longer read them (see streamed_backward for the order).
#include <algorithm>
#include <cmath>

#include "backend/cuda/bodies/philox.h"
#include "backend/cuda/bodies/pointwise.h"
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace perceiver::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int64_t kChunkBudgetBytes = int64_t(256) << 20;  // score buffers of one key chunk

// The B·Nq query rows of head h: row r is query i = r % nq of batch item b = r / nq.
struct HeadRows {
  int64_t nq, heads, h;
  __device__ int64_t b(int64_t r) const { return r / nq; }
  __device__ int64_t i(int64_t r) const { return r % nq; }
  /// Index of the row in [B, H, Nq] tensors (saved P rows, lse, running statistics).
  __device__ int64_t stat(int64_t r) const { return (b(r) * heads + h) * nq + i(r); }
};

// Calls f(c, factor) for every column c < n of a key chunk starting at key j0 of one query row
// (threads stride over groups of 4 keys: one Philox block serves the 4 keys of a group).
template <class F>
__device__ __forceinline__ void chunk_columns(const body::Dropout& dp, uint32_t pair, int64_t i, int64_t j0,
                                              int64_t n, F f) {
  const int64_t g_end = (j0 + n + 3) >> 2;
  for (int64_t g = (j0 >> 2) + threadIdx.x; g < g_end; g += blockDim.x) {
    const body::Philox4 w = dp.active ? dp.block(pair, i, 4 * g) : body::Philox4{0, 0, 0, 0};
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int64_t j = 4 * g + jj;
      if (j >= j0 && j < j0 + n) f(j - j0, dp.active ? dp.factor(w, j) : 1.f);
    }
  }
}

// Materialised: out[r, :] = P_h[r, :] ⊙ M / (1−p) (packed [B·Nq, Nk]).
__global__ void __launch_bounds__(kRowThreads) dropout_rows_kernel(HeadRows hr, int64_t nk, body::Dropout dp,
                                                                   const float* p, float* out) {
  const int64_t r = blockIdx.x;
  const float* pr = p + hr.stat(r) * nk;
  float* o = out + r * nk;
  chunk_columns(dp, dp.pair(hr.b(r), hr.h), hr.i(r), 0, nk, [&](int64_t c, float f) { o[c] = pr[c] * f; });
}

// Materialised backward: ds ← P ⊙ (ds⊙M − Σ ds⊙M⊙P)·scale, the sum in double as on the CPU.
__global__ void __launch_bounds__(kRowThreads) softmax_grad_kernel(HeadRows hr, int64_t nk, body::Dropout dp,
                                                                   const float* p, float* ds, float scale) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* pr = p + hr.stat(r) * nk;
  float* g = ds + r * nk;
  double dot = 0;
  chunk_columns(dp, dp.pair(hr.b(r), hr.h), hr.i(r), 0, nk, [&](int64_t c, float f) {
    g[c] *= f;
    dot += double(g[c]) * double(pr[c]);
  });
  const float d = float(block_sum<kRowThreads>(dot, scratch));
  for (int64_t c = threadIdx.x; c < nk; c += kRowThreads) g[c] = body::attention_ds(pr[c], g[c], d, scale);
}

// Streamed forward, one key chunk [j0, j0+n): s holds scale·Q·K_cᵀ ([B·Nq, n]). Updates the
// running max m and sum l (undropped), writes exp(s − m_new)⊙M to out and rescales the row of
// O by exp(m_old − m_new) (the first chunk's product overwrites O instead).
template <class OutT>
__global__ void __launch_bounds__(kRowThreads) online_softmax_kernel(HeadRows hr, int64_t j0, int64_t n, bool first,
                                                                     body::Dropout dp, const float* s, OutT* out,
                                                                     float* m, float* l, float* o, int64_t ldo,
                                                                     int64_t dv) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, st = hr.stat(r);
  const float* sr = s + r * n;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < n; c += kRowThreads) mx = fmaxf(mx, sr[c]);
  mx = block_max<kRowThreads>(mx, scratch);
  const float m_old = first ? -INFINITY : m[st], m_new = fmaxf(m_old, mx);
  const float corr = first ? 0.f : body::hd_exp(m_old - m_new);
  float sum = 0;
  OutT* orow = out + r * n;
  chunk_columns(dp, dp.pair(hr.b(r), hr.h), hr.i(r), j0, n, [&](int64_t c, float f) {
    const float e = body::hd_exp(sr[c] - m_new);
    sum += e;
    store(orow + c, e * f);
  });
  sum = block_sum<kRowThreads>(sum, scratch);
  if (!first) {
    float* orow_o = o + (hr.b(r) * hr.nq + hr.i(r)) * ldo + hr.h * dv;
    for (int64_t j = threadIdx.x; j < dv; j += kRowThreads) orow_o[j] *= corr;
  }
  if (threadIdx.x == 0) {
    l[st] = (first ? 0.f : l[st] * corr) + sum;
    m[st] = m_new;
  }
}

// Streamed forward, after the last chunk: O /= l, lse = m + log l.
__global__ void finalize_kernel(HeadRows hr, int64_t rows, int64_t dv, int64_t ldo, const float* m, const float* l,
                                float* o, float* lse) {
  for (int64_t e = global_thread(); e < rows * dv; e += grid_threads()) {
    const int64_t r = e / dv, j = e % dv, st = hr.stat(r);
    o[(hr.b(r) * hr.nq + hr.i(r)) * ldo + hr.h * dv + j] *= 1.f / l[st];
    if (j == 0) lse[st] = m[st] + body::hd_log(l[st]);
  }
}

// delta[b, h, i] = Σ_j dO[b, i, h·dv + j]·O[b, i, h·dv + j], a warp per (b, i, h).
__global__ void __launch_bounds__(kThreads) delta_kernel(int64_t rows, int64_t heads, int64_t nq, int64_t dv,
                                                         const float* dout, const float* o, float* delta) {
  const int64_t w = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (w >= rows) return;
  const int64_t h = w % heads, bi = w / heads;  // bi = b·Nq + i
  const float *go = dout + bi * heads * dv + h * dv, *oo = o + bi * heads * dv + h * dv;
  float s = 0;
  for (int64_t j = threadIdx.x & 31; j < dv; j += 32) s += go[j] * oo[j];
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) delta[((bi / nq) * heads + h) * nq + bi % nq] = s;
}

// Streamed backward, one key chunk: s = scale·Q·K_cᵀ, dp = dO·V_cᵀ ([B·Nq, n]) →
// p_out = P⊙M/(1−p) (for dV) and ds_out = P ⊙ (dp⊙M/(1−p) − delta)·scale (for dQ, dK).
// (min blocks 1: with the plain bound, ptxas for sm_90 capped the bf16 instance at 32 registers
// and spilled 8 bytes, which the build refuses.)
template <class OutT>
__global__ void __launch_bounds__(kRowThreads, 1) streamed_grad_kernel(HeadRows hr, int64_t j0, int64_t n,
                                                                    body::Dropout dp, const float* lse,
                                                                    const float* delta, float scale, const float* s,
                                                                    const float* dpm, OutT* p_out, OutT* ds_out) {
  const int64_t r = blockIdx.x, st = hr.stat(r);
  const float row_lse = lse[st], row_delta = delta[st];
  const float *sr = s + r * n, *dr = dpm + r * n;
  OutT *po = p_out + r * n, *dso = ds_out + r * n;
  chunk_columns(dp, dp.pair(hr.b(r), hr.h), hr.i(r), j0, n, [&](int64_t c, float f) {
    const float p = body::hd_exp(sr[c] - row_lse), g = dr[c] * f;
    store(po + c, p * f);
    store(dso + c, body::attention_ds(p, g, row_delta, scale));
  });
}

body::Dropout dropout_of(const AttentionDims& d) {
  body::Dropout r;
  r.heads = d.heads;
  if (!d.dropout()) return r;
  r.active = true;
  r.key0 = uint32_t(d.dropout_key), r.key1 = uint32_t(d.dropout_key >> 32);
  r.stream = d.dropout_stream;
  r.threshold = uint32_t(std::min(std::ldexp(d.dropout_p, 32), 4294967295.0));
  r.keep_scale = float(1.0 / (1.0 - d.dropout_p));
  r.example0 = d.dropout_example0;
  return r;
}

// Operands of head h, batched over the batch (row-major, leading dimensions of the full widths).
struct Layout {
  const AttentionDims& d;
  int64_t ldq() const { return d.heads * d.dqk; }
  int64_t ldv() const { return d.heads * d.dv; }
  // Rows [row0, ...) of the head's column block of a [B, rows, H·width] tensor.
  MatOperand head(const void* base, ElemType t, int64_t h, int64_t width, int64_t rows, int64_t row0 = 0) const {
    const int64_t ld = d.heads * width, off = row0 * ld + h * width;
    const void* p = t == ElemType::kF32 ? static_cast<const void*>(static_cast<const float*>(base) + off)
                                        : static_cast<const void*>(static_cast<const __nv_bfloat16*>(base) + off);
    return {p, t, ld, rows * ld};
  }
};

MatOperand packed(const void* p, ElemType t, int64_t rows, int64_t cols) { return {p, t, cols, rows * cols}; }

void product(CudaHandle& h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
             const MatOperand& a, const MatOperand& b, float beta, float* c, int64_t ldc, int64_t stride_c,
             int64_t batch) {
  Matmul mm;
  mm.ta = ta, mm.tb = tb, mm.m = m, mm.n = n, mm.k = k, mm.alpha = alpha, mm.a = a, mm.b = b, mm.beta = beta;
  mm.c = c, mm.ldc = ldc, mm.stride_c = stride_c, mm.batch = batch;
  matmul(h, mm);
}

// Keys per chunk: as many as `bytes_per_key` per query row allows within the budget, a multiple
// of 64 (so chunk starts are multiples of 4, the dropout's Philox groups), or all of them.
int64_t key_chunk(const AttentionDims& d, int64_t bytes_per_key) {
  const int64_t per_key = d.batch * d.nq * bytes_per_key;
  const int64_t n = std::max<int64_t>(64, kChunkBudgetBytes / std::max<int64_t>(per_key, 1) / 64 * 64);
  return n >= d.nk ? d.nk : n;
}

// A bf16 copy of a whole [rows, cols] tensor in `slot` (attention operands reused by every chunk).
const void* bf16_copy(CudaHandle& h, Slot slot, const float* x, int64_t rows, int64_t cols) {
  void* dst = h.ws->get(slot, size_t(rows * cols) * 2);
  convert_to_bf16(h.stream, 1, rows, cols, x, cols, rows * cols, dst);
  return dst;
}

unsigned row_grid(int64_t rows) {
  PCV_ASSERT(rows > 0 && rows <= INT32_MAX, "attention over ", rows, " query rows");
  return unsigned(rows);
}

void materialised_forward(CudaHandle& h, const AttentionDims& d, const float* q, const float* k, const float* v,
                          float* o, float* p) {
  const Layout L{d};
  const body::Dropout dp = dropout_of(d);
  const int64_t B = d.batch, pstride = d.heads * d.nq * d.nk;
  for (int64_t hd = 0; hd < d.heads; ++hd)
    product(h, Transpose::kNo, Transpose::kYes, d.nq, d.nk, d.dqk, float(d.scale), L.head(q, ElemType::kF32, hd, d.dqk, d.nq),
            L.head(k, ElemType::kF32, hd, d.dqk, d.nk), 0.f, p + hd * d.nq * d.nk, d.nk, pstride, B);
  softmax_forward(&h, B * d.heads * d.nq, d.nk, p, p);
  for (int64_t hd = 0; hd < d.heads; ++hd) {
    MatOperand pa{p + hd * d.nq * d.nk, ElemType::kF32, d.nk, pstride};
    if (dp.active) {
      float* pd = h.ws->get<float>(Slot::kAttnS, size_t(B * d.nq * d.nk));
      dropout_rows_kernel<<<row_grid(B * d.nq), kRowThreads, 0, h.stream>>>({d.nq, d.heads, hd}, d.nk, dp, p, pd);
      PCV_CUDA_CHECK_LAUNCH("dropout_rows_kernel");
      pa = packed(pd, ElemType::kF32, d.nq, d.nk);
    }
    product(h, Transpose::kNo, Transpose::kNo, d.nq, d.dv, d.nk, 1.f, pa, L.head(v, ElemType::kF32, hd, d.dv, d.nk), 0.f,
            o + hd * d.dv, L.ldv(), d.nq * L.ldv(), B);
  }
}

void materialised_backward(CudaHandle& h, const AttentionDims& d, const float* q, const float* k, const float* v,
                           const float* p, const float* dout, float* dq, float* dk, float* dv) {
  const Layout L{d};
  const body::Dropout dp = dropout_of(d);
  const int64_t B = d.batch, pstride = d.heads * d.nq * d.nk;
  for (int64_t hd = 0; hd < d.heads; ++hd) {
    const HeadRows hr{d.nq, d.heads, hd};
    const MatOperand q_h = L.head(q, ElemType::kF32, hd, d.dqk, d.nq), k_h = L.head(k, ElemType::kF32, hd, d.dqk, d.nk);
    const MatOperand v_h = L.head(v, ElemType::kF32, hd, d.dv, d.nk), do_h = L.head(dout, ElemType::kF32, hd, d.dv, d.nq);
    MatOperand pa{p + hd * d.nq * d.nk, ElemType::kF32, d.nk, pstride};
    if (dp.active) {
      float* pd = h.ws->get<float>(Slot::kAttnS, size_t(B * d.nq * d.nk));
      dropout_rows_kernel<<<row_grid(B * d.nq), kRowThreads, 0, h.stream>>>(hr, d.nk, dp, p, pd);
      PCV_CUDA_CHECK_LAUNCH("dropout_rows_kernel");
      pa = packed(pd, ElemType::kF32, d.nq, d.nk);
    }
    product(h, Transpose::kYes, Transpose::kNo, d.nk, d.dv, d.nq, 1.f, pa, do_h, 1.f, dv + hd * d.dv, L.ldv(),
            d.nk * L.ldv(), B);
    float* ds = h.ws->get<float>(Slot::kAttnDP, size_t(B * d.nq * d.nk));
    product(h, Transpose::kNo, Transpose::kYes, d.nq, d.nk, d.dv, 1.f, do_h, v_h, 0.f, ds, d.nk, d.nq * d.nk, B);
    softmax_grad_kernel<<<row_grid(B * d.nq), kRowThreads, 0, h.stream>>>(hr, d.nk, dp, p, ds, float(d.scale));
    PCV_CUDA_CHECK_LAUNCH("softmax_grad_kernel");
    const MatOperand ds_op = packed(ds, ElemType::kF32, d.nq, d.nk);
    product(h, Transpose::kNo, Transpose::kNo, d.nq, d.dqk, d.nk, 1.f, ds_op, k_h, 1.f, dq + hd * d.dqk, L.ldq(),
            d.nq * L.ldq(), B);
    product(h, Transpose::kYes, Transpose::kNo, d.nk, d.dqk, d.nq, 1.f, ds_op, q_h, 1.f, dk + hd * d.dqk, L.ldq(),
            d.nk * L.ldq(), B);
  }
}

void streamed_forward(CudaHandle& h, const AttentionDims& d, const float* q, const float* k, const float* v, float* o,
                      float* lse) {
  const Layout L{d};
  const body::Dropout dp = dropout_of(d);
  const bool bf16 = h.precision == Precision::kBf16;
  const int64_t B = d.batch, rows = B * d.nq;
  const int64_t n_max = key_chunk(d, bf16 ? 6 : 4);
  const ElemType qt = bf16 ? ElemType::kBf16 : ElemType::kF32;
  const void* qx = bf16 ? bf16_copy(h, Slot::kAttnQ16, q, rows, L.ldq()) : static_cast<const void*>(q);
  float* s = h.ws->get<float>(Slot::kAttnS, size_t(rows * n_max));
  __nv_bfloat16* s16 = bf16 ? h.ws->get<__nv_bfloat16>(Slot::kAttnS16, size_t(rows * n_max)) : nullptr;
  float* m = h.ws->get<float>(Slot::kAttnStats, size_t(B * d.heads * d.nq));
  float* l = h.ws->get<float>(Slot::kAttnStats2, size_t(B * d.heads * d.nq));
  for (int64_t hd = 0; hd < d.heads; ++hd) {
    const HeadRows hr{d.nq, d.heads, hd};
    const MatOperand q_h = L.head(qx, qt, hd, d.dqk, d.nq);
    for (int64_t j0 = 0; j0 < d.nk; j0 += n_max) {
      const int64_t n = std::min(n_max, d.nk - j0);
      const bool first = j0 == 0;
      product(h, Transpose::kNo, Transpose::kYes, d.nq, n, d.dqk, float(d.scale), q_h,
              L.head(k, ElemType::kF32, hd, d.dqk, d.nk, j0), 0.f, s, n, d.nq * n, B);
      if (bf16) online_softmax_kernel<<<row_grid(rows), kRowThreads, 0, h.stream>>>(hr, j0, n, first, dp, s, s16, m, l, o, L.ldv(), d.dv);
      else online_softmax_kernel<<<row_grid(rows), kRowThreads, 0, h.stream>>>(hr, j0, n, first, dp, s, s, m, l, o, L.ldv(), d.dv);
      PCV_CUDA_CHECK_LAUNCH("online_softmax_kernel");
      const MatOperand pa = bf16 ? packed(s16, ElemType::kBf16, d.nq, n) : packed(s, ElemType::kF32, d.nq, n);
      product(h, Transpose::kNo, Transpose::kNo, d.nq, d.dv, n, 1.f, pa, L.head(v, ElemType::kF32, hd, d.dv, d.nk, j0),
              first ? 0.f : 1.f, o + hd * d.dv, L.ldv(), d.nq * L.ldv(), B);
    }
    finalize_kernel<<<grid_for(rows * d.dv), kThreads, 0, h.stream>>>(hr, rows, d.dv, L.ldv(), m, l, o, lse);
    PCV_CUDA_CHECK_LAUNCH("finalize_kernel");
  }
}

// Per key chunk: S and dP products, one row kernel, then dV, dQ, dK. With kv_grad_in_place the
// dV product writes over V_c after dP read it, and the dK product over K_c after the S and dQ
// products read it (every later chunk reads other rows).
void streamed_backward(CudaHandle& h, const AttentionDims& d, const float* q, const float* k, const float* v,
                       const float* o, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const Layout L{d};
  const body::Dropout dp = dropout_of(d);
  const bool bf16 = h.precision == Precision::kBf16;
  const int64_t B = d.batch, rows = B * d.nq;
  const int64_t n_max = key_chunk(d, bf16 ? 12 : 8);
  const float beta_kv = d.kv_grad_in_place ? 0.f : 1.f;
  float* delta = h.ws->get<float>(Slot::kAttnStats, size_t(B * d.heads * d.nq));
  const int64_t delta_rows = rows * d.heads;
  delta_kernel<<<unsigned((delta_rows + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, h.stream>>>(
      delta_rows, d.heads, d.nq, d.dv, dout, o, delta);
  PCV_CUDA_CHECK_LAUNCH("delta_kernel");
  const ElemType xt = bf16 ? ElemType::kBf16 : ElemType::kF32;
  const void* qx = bf16 ? bf16_copy(h, Slot::kAttnQ16, q, rows, L.ldq()) : static_cast<const void*>(q);
  const void* dox = bf16 ? bf16_copy(h, Slot::kAttnDO16, dout, rows, L.ldv()) : static_cast<const void*>(dout);
  float* s = h.ws->get<float>(Slot::kAttnS, size_t(rows * n_max));
  float* dpm = h.ws->get<float>(Slot::kAttnDP, size_t(rows * n_max));
  __nv_bfloat16* s16 = bf16 ? h.ws->get<__nv_bfloat16>(Slot::kAttnS16, size_t(rows * n_max)) : nullptr;
  __nv_bfloat16* ds16 = bf16 ? h.ws->get<__nv_bfloat16>(Slot::kAttnDP16, size_t(rows * n_max)) : nullptr;
  for (int64_t hd = 0; hd < d.heads; ++hd) {
    const HeadRows hr{d.nq, d.heads, hd};
    const MatOperand q_h = L.head(qx, xt, hd, d.dqk, d.nq), do_h = L.head(dox, xt, hd, d.dv, d.nq);
    for (int64_t j0 = 0; j0 < d.nk; j0 += n_max) {
      const int64_t n = std::min(n_max, d.nk - j0);
      const MatOperand k_c = L.head(k, ElemType::kF32, hd, d.dqk, d.nk, j0), v_c = L.head(v, ElemType::kF32, hd, d.dv, d.nk, j0);
      product(h, Transpose::kNo, Transpose::kYes, d.nq, n, d.dqk, float(d.scale), q_h, k_c, 0.f, s, n, d.nq * n, B);
      product(h, Transpose::kNo, Transpose::kYes, d.nq, n, d.dv, 1.f, do_h, v_c, 0.f, dpm, n, d.nq * n, B);
      if (bf16)
        streamed_grad_kernel<<<row_grid(rows), kRowThreads, 0, h.stream>>>(hr, j0, n, dp, lse, delta, float(d.scale), s, dpm, s16, ds16);
      else
        streamed_grad_kernel<<<row_grid(rows), kRowThreads, 0, h.stream>>>(hr, j0, n, dp, lse, delta, float(d.scale), s, dpm, s, dpm);
      PCV_CUDA_CHECK_LAUNCH("streamed_grad_kernel");
      const MatOperand pa = bf16 ? packed(s16, xt, d.nq, n) : packed(s, xt, d.nq, n);
      const MatOperand dsa = bf16 ? packed(ds16, xt, d.nq, n) : packed(dpm, xt, d.nq, n);
      product(h, Transpose::kYes, Transpose::kNo, n, d.dv, d.nq, 1.f, pa, do_h, beta_kv, dv + j0 * L.ldv() + hd * d.dv,
              L.ldv(), d.nk * L.ldv(), B);
      product(h, Transpose::kNo, Transpose::kNo, d.nq, d.dqk, n, 1.f, dsa, k_c, 1.f, dq + hd * d.dqk, L.ldq(),
              d.nq * L.ldq(), B);
      product(h, Transpose::kYes, Transpose::kNo, n, d.dqk, d.nq, 1.f, dsa, q_h, beta_kv, dk + j0 * L.ldq() + hd * d.dqk,
              L.ldq(), d.nk * L.ldq(), B);
    }
  }
}

// Q, K and V stored as bf16 (AttentionDims::q_bf16, kv_bf16) come with the CPU table's
// store_bf16; this backend keeps them in float32 and would misread half-width data.
void refuse_bf16_storage(const AttentionDims& d) {
  PCV_CHECK(!d.kv_bf16 && !d.q_bf16, "cuda attention: Q, K or V stored as bf16 (q_bf16, kv_bf16) are a CPU-table "
            "feature (store_bf16); this backend keeps them in float32");
}

}  // namespace

void attention_forward(void* h, const AttentionDims& d, const float* q, const float* k, const float* v, float* o,
                       float* saved) {
  PCV_CHECK(d.dropout_p >= 0 && d.dropout_p < 1, "attention dropout p must be in [0, 1), got ", d.dropout_p);
  PCV_CHECK(!d.continues && !d.key_range(), "attention: this backend does not merge calls over key ranges "
            "(merges_attention_chunks)");
  refuse_bf16_storage(d);
  if (d.batch * d.nq == 0) return;
  CudaHandle& hh = handle_of(h);
  if (d.streamed()) return streamed_forward(hh, d, q, k, v, o, saved);
  materialised_forward(hh, d, q, k, v, o, saved);
}

void attention_backward(void* h, const AttentionDims& d, const float* q, const float* k, const float* v,
                        const float* o, const float* saved, const float* dout, float* dq, float* dk, float* dv) {
  PCV_CHECK(!d.kv_grad_in_place || (d.streamed() && dk == k && dv == v),
            "attention: kv_grad_in_place needs the streamed kernel and dk == k, dv == v");
  PCV_CHECK(!d.key_range(), "attention: this backend does not run a backward over a key range (merges_attention_chunks)");
  refuse_bf16_storage(d);
  CudaHandle& hh = handle_of(h);
  if (d.batch * d.nq == 0) {  // no query: every key and value gradient is zero (in place: K and V become dK, dV)
    if (d.kv_grad_in_place) {
      PCV_CUDA_CHECK(cudaMemsetAsync(dk, 0, size_t(d.batch * d.nk * d.heads * d.dqk) * sizeof(float), hh.stream));
      PCV_CUDA_CHECK(cudaMemsetAsync(dv, 0, size_t(d.batch * d.nk * d.heads * d.dv) * sizeof(float), hh.stream));
    }
    return;
  }
  if (d.streamed()) return streamed_backward(hh, d, q, k, v, o, saved, dout, dq, dk, dv);
  materialised_backward(hh, d, q, k, v, saved, dout, dq, dk, dv);
}

}  // namespace perceiver::cuda
