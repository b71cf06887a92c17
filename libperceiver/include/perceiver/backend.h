// The compute seam (DESIGN.md #4). Layers call ops through a KernelTable; a backend fills the
// table. The CPU backend (Eigen + OpenBLAS + OpenMP) is always built and is the reference that
// every other backend is tested against. See libperceiver/src/backend/README.md for how a CUDA
// or Neuron backend plugs in.
//
// Conventions for every kernel:
//   - the first argument is the backend's handle; every pointer is the backend's memory;
//   - row-major, contiguous unless a leading dimension is passed;
//   - backward kernels ACCUMULATE (+=) into parameter and input gradients, so fan-out needs no
//     extra adds (the CPU reference; a faster backend documents where it writes with =);
//   - results are bitwise identical for any thread count (fixed work partitions, ordered sums).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "perceiver/activation.h"
#include "perceiver/error.h"
#include "perceiver/op_params.h"

namespace perceiver {

enum class Transpose { kNo, kYes };

/// Arithmetic of the matrix products and attention. Tensors stay float32 in memory either way
/// (except where a backend stores what only its bf16 products read: AttentionDims::kv_bf16);
/// with kBf16 a backend multiplies in bfloat16 with float32 accumulation (PyTorch's autocast),
/// and the optimizers keep float32 master weights and states (DESIGN.md #10).
enum class Precision { kFp32, kBf16 };


/// Shape of one multi-head attention call. Q [B,Nq,H*dqk], K [B,Nk,H*dqk], V [B,Nk,H*dv],
/// O [B,Nq,H*dv]; head h owns the contiguous channel block [h*d, (h+1)*d) (spec §2.1).
struct AttentionDims {
  int64_t batch = 1, heads = 1, nq = 0, nk = 0, dqk = 0, dv = 0;
  double scale = 1.0;     // usually 1/sqrt(dqk)
  int64_t kv_chunk = 0;   // 0: materialise P [B,H,Nq,Nk]; >0: stream keys in chunks of this size
  // Streamed only: the backward pass writes dK and dV over K and V (dk == k, dv == v; "=" not
  // "+="). A key chunk is only needed until its own gradients are done, so this saves two
  // [B,Nk,·] buffers; the saved K and V are gone afterwards.
  bool kv_grad_in_place = false;
  // Streamed, bf16 products only: K and V are given as bfloat16 values, [B,Nk,H*dqk] and
  // [B,Nk,H*dv] packed two to each T of buffers half the float size. attention_backward (with
  // kv_grad_in_place only) writes dK and dV over them as bfloat16; attention_backward_key_sums
  // reads them and writes nothing. The products round K and V to bf16 anyway, so this changes no
  // result but halves the largest saved tensors (the encoder's 52k-row K and V). Only a backend
  // whose table has store_bf16 (KernelTable) gets this.
  bool kv_bf16 = false;
  // Streamed, bf16 products only: Q is given as bfloat16 values [B,Nq,H*dqk], packed two to each
  // T (store_bf16), where the products would round it anyway: calls over the ranges of one key
  // axis (key0) then round their queries once, not once per call. No result changes. Only a
  // backend whose table has store_bf16 gets this.
  bool q_bf16 = false;
  // Streamed only: the forward pass also saves the scaled scores S = scale·Q·Kᵀ [B,H,Nq,Nk]
  // (after the log-sum-exp rows), and the backward pass reads P = exp(S − lse) from them instead
  // of recomputing Q·Kᵀ, the costliest of its five products. Memory for speed; no result changes
  // beyond float rounding. Set only where the backend says it uses them
  // (Backend::keeps_attention_scores); another backend may ignore them.
  bool keep_scores = false;
  // Streamed forward only, without keep_scores or dropout: o and the lse rows already hold the
  // attention of the same queries over earlier keys, and this call merges its keys into them
  // (an online softmax that resumes from (o, lse)). A caller can then make K and V one chunk of
  // keys at a time and never hold them whole (a forward-only pass). Set only where the backend
  // says it merges (Backend::merges_attention_chunks).
  bool continues = false;
  // A call over a range of a longer key axis (streamed, without dropout): its keys are keys
  // [key0, key0 + nk) of key_count (0: nk). Kept scores are rows of key_count values, of which
  // this call writes (forward) or reads (backward) its own columns; the backward adds its dQ to
  // dq as every call does, so calls over the ranges in turn give the gradients of one call.
  // Set only where the backend merges (Backend::merges_attention_chunks).
  int64_t key0 = 0, key_count = 0;
  // Streamed forward and attention_backward_key_sums only, keys that are their own values
  // (dqk == dv): this call's keys are zero past their first `key_columns` columns (0: all may not
  // be), so its products run over those columns only; O, dO and dQ keep all theirs (the online
  // softmax rescales and rowsum(dO ⊙ O) sums every column). A multiple of 32. The folded encoder's
  // ranges without the wider modality's rows (EmbedFactors::narrow_width).
  int64_t key_columns = 0;
  // Attention dropout (train mode only; HF attention_probs_dropout_prob, spec §11.2):
  // O = (P ⊙ M / (1−p))·V. The keep mask M is a pure function of (dropout_key, dropout_stream,
  // dropout_example0 + b, h, i, j) through Philox4x32-10 (keep iff the 32-bit word for the element
  // is ≥ p·2³²), so the materialised and the streamed kernels, forward and backward, at any thread
  // count, drop the same elements. The saved state stays P (or the row log-sum-exp of the
  // undropped P). dropout_p == 0 runs the code path without dropout.
  double dropout_p = 0;
  uint64_t dropout_key = 0;      // Philox key of the pass (the model derives it from seed and step)
  uint32_t dropout_stream = 0;   // the layer application within the pass
  int64_t dropout_example0 = 0;  // global index of batch item 0 (micro-batches, data-parallel ranks)
  bool streamed() const { return kv_chunk > 0; }
  bool dropout() const { return dropout_p > 0; }
  int64_t keys_total() const { return key_count ? key_count : nk; }
  bool key_range() const { return key0 != 0 || keys_total() != nk; }
  /// The columns of Q and K, and of V, that the products run over (AttentionDims::key_columns).
  int64_t qk_columns() const { return key_columns ? key_columns : dqk; }
  int64_t v_columns() const { return key_columns ? key_columns : dv; }
  /// Elements of the saved softmax state: P when materialised, log-sum-exp rows when streamed
  /// (then the scores, with keep_scores).
  int64_t saved_elems() const {
    if (!streamed()) return batch * heads * nq * nk;
    return batch * heads * nq * (keep_scores ? 1 + keys_total() : 1);
  }
};

/// Every op of the table, by name: registration checks, the forwarding Kernels<T> and generic
/// wrappers (the guarded test backend, a graph recorder) are written once over this list.
#define PCV_KERNEL_OPS(X)                                                                          \
  X(gemm) X(gemm_batched) X(layer_norm_forward) X(layer_norm_backward) X(softmax_forward)          \
  X(softmax_backward) X(gelu_forward) X(gelu_backward) X(bias_forward) X(bias_backward) X(add)      \
  X(axpy) X(scale) X(fill) X(copy) X(sum) X(sum_squares) X(l1_forward) X(l1_backward)              \
  X(mse_forward) X(mse_backward) X(softmax_ce_forward) X(softmax_ce_backward)                      \
  X(attention_forward) X(attention_backward) X(gather_rows) X(scatter_add_rows) X(broadcast_rows)  \
  X(embed_forward) X(embed_backward_rows) X(queries_forward) X(queries_backward)                   \
  X(gather_targets) X(clip_by_global_norm) X(sgd_update) X(adamw_update) X(lamb_update)

/// The op table. One forward and one backward slot per op, with the CPU signatures plus the
/// backend's handle `h` first (a CUDA stream and library handles, a graph being recorded; the
/// CPU backend ignores it). Every pointer is device memory of the same backend. Results of
/// reductions and losses are written to device doubles (`out`) and stay there until the host
/// reads them, once per step.
template <class T>
struct KernelTable {
  using Scalar = T;
  // C[m,n] = alpha·op(A)·op(B) + beta·C with leading dimensions (row-major).
  void (*gemm)(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
               int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) = nullptr;
  // The same for `batch` independent problems whose operands start `stride_*` elements apart.
  void (*gemm_batched)(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha,
                       const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                       int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c,
                       int64_t batch) = nullptr;

  // Layer norm over the last axis (biased variance). Saves mean and rstd per row.
  void (*layer_norm_forward)(void* h, int64_t rows, int64_t cols, const T* x, const T* gamma,
                             const T* beta, double eps, T* y, T* mean, T* rstd) = nullptr;
  void (*layer_norm_backward)(void* h, int64_t rows, int64_t cols, const T* x, const T* gamma,
                              const T* mean, const T* rstd, const T* dy, T* dx, T* dgamma,
                              T* dbeta) = nullptr;

  // Row softmax: y = softmax(x) per row; backward dx += y ⊙ (dy − rowsum(dy ⊙ y)).
  void (*softmax_forward)(void* h, int64_t rows, int64_t cols, const T* x, T* y) = nullptr;
  void (*softmax_backward)(void* h, int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) = nullptr;

  void (*gelu_forward)(void* h, GeluKind kind, int64_t n, const T* x, T* y) = nullptr;
  void (*gelu_backward)(void* h, GeluKind kind, int64_t n, const T* x, const T* dy, T* dx) = nullptr;

  // y[r,:] += bias; backward dbias += Σ_r dy[r,:].
  void (*bias_forward)(void* h, int64_t rows, int64_t cols, const T* bias, T* y) = nullptr;
  void (*bias_backward)(void* h, int64_t rows, int64_t cols, const T* dy, T* dbias) = nullptr;

  // Elementwise: y = a + b (residual), y += alpha·x, x *= alpha, x = value, y = x.
  void (*add)(void* h, int64_t n, const T* a, const T* b, T* y) = nullptr;
  void (*axpy)(void* h, int64_t n, T alpha, const T* x, T* y) = nullptr;
  void (*scale)(void* h, int64_t n, T alpha, T* x) = nullptr;
  void (*fill)(void* h, int64_t n, T value, T* x) = nullptr;
  void (*copy)(void* h, int64_t n, const T* x, T* y) = nullptr;
  // Reductions in double with a fixed summation order; *out = Σ x, Σ x².
  void (*sum)(void* h, int64_t n, const T* x, double* out) = nullptr;
  void (*sum_squares)(void* h, int64_t n, const T* x, double* out) = nullptr;

  // Losses, mean over n elements (or rows), into *out. Backward: dpred += weight · d(mean)/dpred.
  void (*l1_forward)(void* h, int64_t n, const T* pred, const T* target, double* out) = nullptr;
  void (*l1_backward)(void* h, int64_t n, const T* pred, const T* target, double weight, T* dpred) = nullptr;
  void (*mse_forward)(void* h, int64_t n, const T* pred, const T* target, double* out) = nullptr;
  void (*mse_backward)(void* h, int64_t n, const T* pred, const T* target, double weight, T* dpred) = nullptr;
  void (*softmax_ce_forward)(void* h, int64_t rows, int64_t cols, const T* logits, const int64_t* labels,
                             double* out) = nullptr;
  void (*softmax_ce_backward)(void* h, int64_t rows, int64_t cols, const T* logits, const int64_t* labels,
                              double weight, T* dlogits) = nullptr;

  // Fused multi-head attention core O = softmax(Q·Kᵀ·scale)·V (no projections), with optional
  // attention dropout on the probabilities (AttentionDims::dropout_p).
  // `saved` holds P (materialised) or per-row log-sum-exp (streamed); see AttentionDims.
  void (*attention_forward)(void* h, const AttentionDims& d, const T* q, const T* k, const T* v, T* o,
                            T* saved) = nullptr;
  // Needs O from the forward (streamed mode uses rowsum(dO ⊙ O)). dq, dk, dv accumulate. Without
  // kv_grad_in_place, k and v may be one buffer (keys that are their own values) and so may dk and
  // dv (their gradients then add up there).
  void (*attention_backward)(void* h, const AttentionDims& d, const T* q, const T* k, const T* v,
                             const T* o, const T* saved, const T* dout, T* dq, T* dk, T* dv) = nullptr;

  // Rows of [batch, rows, cols] tensors: dst[b,i,:] = src[b,row0+i,:] for i < n (gather), its
  // adjoint dst[b,row0+i,:] += src[b,i,:] (scatter_add), and dst[b,i] = src[i] for i < n
  // elements (broadcast over the batch).
  void (*gather_rows)(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n,
                      const T* src, T* dst) = nullptr;
  void (*scatter_add_rows)(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n,
                           const T* src, T* dst) = nullptr;
  void (*broadcast_rows)(void* h, int64_t batch, int64_t n, const T* src, T* dst) = nullptr;

  // Rows [row0, row0+n) of the multimodal input array x [B,M,C] seen as [B·M, C] (op_params.h
  // EmbedDims) into x_rows [n, C], so the encoder can make its input a chunk at a time; backward
  // accumulates the padding and mask-token gradients from the same rows of dx.
  void (*embed_forward)(void* h, const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n,
                        T* x_rows) = nullptr;
  void (*embed_backward_rows)(void* h, const EmbedDims& d, const uint8_t* mask, int64_t row0, int64_t n,
                              const T* dx_rows, const EmbedGrads<T>& g) = nullptr;
  // Decoder queries q [B,O,E] (QueryDims) and their padding / label-query gradients (+=).
  void (*queries_forward)(void* h, const QueryDims& d, const QueryArgs<T>& a, T* q) = nullptr;
  void (*queries_backward)(void* h, const QueryDims& d, const T* dq, const QueryGrads<T>& g) = nullptr;
  // Reconstruction targets of the queried points (TargetDims).
  void (*gather_targets)(void* h, const TargetDims& d, const int64_t* image_points, const int64_t* audio_points,
                         const T* video, const T* audio, T* image_targets, T* audio_targets) = nullptr;

  // optax.clip_by_global_norm on x [n] given Σx² (device): when the norm is finite and not
  // below max_norm, x ← (x / norm) · max_norm. *clipped = 1 or 0.
  void (*clip_by_global_norm)(void* h, int64_t n, T* x, const double* sumsq, double max_norm,
                              double* clipped) = nullptr;
  // Optimizer updates over the flat arenas (op_params.h OptimStep): SGD with momentum and AdamW
  // with torch semantics, LAMB with DeepMind's (spec §5). Skipped when the gradient is not finite.
  void (*sgd_update)(void* h, const OptimStep& s, T* params, const T* grads, T* momentum_buf) = nullptr;
  void (*adamw_update)(void* h, const OptimStep& s, T* params, const T* grads, T* m, T* v) = nullptr;
  void (*lamb_update)(void* h, const OptimStep& s, T* params, const T* grads, T* m, T* v) = nullptr;

  // Optional (outside PCV_KERNEL_OPS; null where a backend has none): bfloat16 storage for
  // tensors that only bf16 products read (AttentionDims::kv_bf16). x [rows, cols] (leading
  // dimension ldx) rounded to nearest even into y16, and bf16 back to T; y16/x16 hold bf16 values
  // with leading dimension ld16. Only a table whose products are bf16 fills these (storing what
  // they round anyway changes nothing), and it then accepts AttentionDims::kv_bf16.
  void (*store_bf16)(void* h, int64_t rows, int64_t cols, const T* x, int64_t ldx, uint16_t* y16,
                     int64_t ld16) = nullptr;
  void (*load_bf16)(void* h, int64_t rows, int64_t cols, const uint16_t* x16, int64_t ld16, T* y,
                    int64_t ldy) = nullptr;
  // gemm on operands stored as bf16 (by store_bf16, or kept so: AttentionDims::kv_bf16), so an
  // operand that feeds several products, or one already in bf16, is not rounded again per call.
  // Bitwise the same as gemm on the float values those bf16 values hold.
  void (*gemm_stored_bf16)(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha,
                           const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, T beta, T* c,
                           int64_t ldc) = nullptr;

  // Optional (null where a backend has none), and wanted together: the folded encoder then folds
  // its kv layer norm's gain and shift into its queries and output as well, and its backward
  // never forms the 52k-row key gradient (layers/attention_folded.cpp).
  // y[r,c] = x[r,c]·s[c] + b[c] (b may be null: + 0; y may be x), over rows × cols;
  void (*scale_columns)(void* h, int64_t rows, int64_t cols, const T* x, const T* s, const T* b, T* y) = nullptr;
  // out[c] += Σ_r a[r,c]·b[r,c];
  void (*column_dots)(void* h, int64_t rows, int64_t cols, const T* a, const T* b, T* out) = nullptr;
  // attention_backward for keys that are their own values (K = V = x, one buffer; one head,
  // streamed, no dropout) when x's gradient dX = dK + dV [B,Nk,dqk] is only wanted reduced, so
  // that neither dSᵀ·Q nor Pᵀ·dO is formed.
  // Keys fall in `groups` weighted groups: key j of item b (index b·keys_total + key0 + j into
  // key_group and key_scale, which span the whole key axis) has weight w = key_scale[·] in group
  // key_group[·] (< groups; any other value: in none). With dS the gradient of the scaled scores
  // and P the probabilities ([B,Nq,Nk]):
  //   q_sums[b,i,g] += Σ_j w_bgj·dS_bij and q_sums[b,i,groups+g] += Σ_j w_bgj·P_bij   [B,Nq,2·groups]
  //     (so Σ_j w_bgj·dX_bj = Σ_i q_sums[b,i,g]·q_bi + q_sums[b,i,groups+g]·dout_bi),
  //   key_sums[b,g,:] += Σ_j w_bgj·(dX_bj·x_bj)·x_bj                                  [B,groups,dqk]
  // and dq += as attention_backward. With AttentionDims::kv_bf16, x is given as bf16 (as the
  // forward takes it; nothing is written over it), and key_sums is made from those values.
  void (*attention_backward_key_sums)(void* h, const AttentionDims& d, const T* q, const T* x, const T* o,
                                      const T* saved, const T* dout, const uint8_t* key_group, const T* key_scale,
                                      int64_t groups, T* dq, T* q_sums, T* key_sums) = nullptr;

  // Optional (null where a backend has none): embed_forward's rows [row0, row0+n) layer-normalised
  // straight into y [n, C] (γ, β [C], eps; mean and rstd [n] as layer_norm_forward's), bitwise
  // embed_forward then layer_norm_forward, without the input rows going through memory. With
  // y16 (a table with store_bf16 only), the same rows also rounded to bf16 into y16 [n, C], as
  // store_bf16 would; y may then be null, and the float rows never go through memory either.
  void (*embed_layer_norm_forward)(void* h, const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n,
                                   const T* gamma, const T* beta, double eps, T* y, uint16_t* y16, T* mean,
                                   T* rstd) = nullptr;
  // Optional (null where a backend has none), and wanted together: the same rows normalised
  // without gain and shift, as their factors (EmbedFactors, EmbedFactors::of(d).width values a row)
  // into y [n, width] (or, with y16 and y null, as bf16 only), their mean and rstd as above; and
  // the matrices M [B, width, C] that give each item's rows back from them (X̂ = F·M_b), from the
  // parameters and labels in `a`.
  void (*embed_norm_factors)(void* h, const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, double eps,
                             T* y, uint16_t* y16, T* mean, T* rstd) = nullptr;
  void (*embed_factor_matrix)(void* h, const EmbedDims& d, const EmbedArgs<T>& a, T* m) = nullptr;
};

/// A table bound to its backend's handle: kernels.gemm(...) calls table.gemm(handle, ...).
template <class T>
class Kernels {
 public:
  Kernels(const KernelTable<T>& table, void* handle) : table_(&table), handle_(handle) {}
#define PCV_FORWARD_OP(op)                                  \
  template <class... A>                                     \
  void op(A&&... a) const {                                 \
    table_->op(handle_, std::forward<A>(a)...);             \
  }
  PCV_KERNEL_OPS(PCV_FORWARD_OP)
  PCV_FORWARD_OP(store_bf16)
  PCV_FORWARD_OP(load_bf16)
  PCV_FORWARD_OP(gemm_stored_bf16)
  PCV_FORWARD_OP(scale_columns)
  PCV_FORWARD_OP(column_dots)
  PCV_FORWARD_OP(attention_backward_key_sums)
  PCV_FORWARD_OP(embed_layer_norm_forward)
  PCV_FORWARD_OP(embed_norm_factors)
  PCV_FORWARD_OP(embed_factor_matrix)
#undef PCV_FORWARD_OP
  /// Whether the optional bf16 storage ops are there (KernelTable::store_bf16).
  bool stores_bf16() const { return table_->store_bf16 && table_->load_bf16 && table_->gemm_stored_bf16; }
  /// Whether the optional ops of the folded encoder's layer-norm fold are there
  /// (KernelTable::scale_columns, column_dots, attention_backward_key_sums).
  bool folds_kv_norm() const {
    return table_->scale_columns && table_->column_dots && table_->attention_backward_key_sums;
  }
  /// Whether the optional fused input embedding and layer norm is there
  /// (KernelTable::embed_layer_norm_forward).
  bool embeds_normalised() const { return table_->embed_layer_norm_forward != nullptr; }
  /// Whether the optional factorised input rows are there (KernelTable::embed_norm_factors,
  /// embed_factor_matrix).
  bool embeds_factors() const { return table_->embed_norm_factors && table_->embed_factor_matrix; }
  const KernelTable<T>& table() const { return *table_; }
  void* handle() const { return handle_; }

 private:
  const KernelTable<T>* table_;
  void* handle_;
};

/// Throws perceiver::Error naming every op `table` lacks (a device backend must provide all of
/// them: there is no silent CPU fallback for device memory).
template <class T>
void check_complete(const KernelTable<T>& table, std::string_view backend) {
  std::string missing;
#define PCV_CHECK_OP(op) \
  if (!table.op) missing += std::string(missing.empty() ? "" : ", ") + #op;
  PCV_KERNEL_OPS(PCV_CHECK_OP)
#undef PCV_CHECK_OP
  PCV_CHECK(missing.empty(), "backend '", backend, "' has no kernel for op(s): ", missing);
}

/// Memory owned by a backend, freed by it. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, std::function<void(void*)> free)
      : data_(data), bytes_(bytes), free_(std::move(free)) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(free_, o.free_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (data_ && free_) free_(data_);
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::function<void(void*)> free_;
};

/// Memory a device backend has allocated (Backend::memory_stats).
struct MemoryStats {
  int64_t allocations = 0;  // device and pinned-host allocations made so far (never decreases)
  int64_t bytes_in_use = 0;  // device bytes allocated now
  int64_t peak_bytes = 0;    // the most device bytes allocated at once
};

/// Collectives that a device runs on its own memory, one process (rank) per device: NCCL on
/// CUDA. The communicator (dist/communicator.h) bootstraps them over MPI and drives them with
/// its buckets; without them it stages device buffers through host copies.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  /// Starts the in-place sum of x[0, n) over all ranks, after the backend's work enqueued so
  /// far. Every rank starts the same sums in the same order. Does not block the host.
  virtual void start_sum(float* x, int64_t n) = 0;
  /// True when every started sum has completed; throws perceiver::Error naming a failure.
  virtual bool done() = 0;
  /// Orders the backend's later work after every started sum (without blocking the host).
  virtual void join() = 0;
};

/// A compute device. It owns every tensor: the model's arenas come from allocate(), are zeroed
/// by zero() and filled or read by copies; all math runs through its op table.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  /// One line for logs: the device, its memory, the kernels in use.
  virtual std::string describe() const { return name(); }
  virtual Buffer allocate(size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  /// The contents of [data, data + bytes) of an allocation are no longer needed (they may read as
  /// zero or as before afterwards): a backend may give the memory's pages back until it is written
  /// again (the scratch stack's blocks that it has stepped off). Default: nothing.
  virtual void discard(void* data, size_t bytes) {
    (void)data;
    (void)bytes;
  }
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  /// True when host code may read and write this backend's memory directly (the CPU backend),
  /// so MPI and file IO can skip staging copies.
  virtual bool host_accessible() const { return false; }
  /// The opaque handle every kernel receives.
  virtual void* handle() const { return nullptr; }
  /// Names an allocation (`data` = its start) that outlives a step: the parameters, gradients,
  /// optimizer states and result slots, named by their owners. Op-by-op backends ignore it; a
  /// backend that compiles whole steps (capture, neuron) makes such buffers arguments and
  /// results of its graphs, updated in place, and keeps every other buffer inside the graph.
  virtual void name_buffer(const void* data, std::string_view name) {
    (void)data;
    (void)name;
  }
  /// The arithmetic of its matrix products (BackendOptions::precision).
  virtual Precision precision() const { return Precision::kFp32; }
  /// Whether its streamed attention reads kept scores (AttentionDims::keep_scores) instead of
  /// recomputing them, so that a model that trains gives it the room. Default: no.
  virtual bool keeps_attention_scores() const { return false; }
  /// Whether its streamed attention runs over key ranges: a forward merges into an earlier call's
  /// result (AttentionDims::continues), a call covers keys [key0, key0 + nk) of key_count, and k
  /// and v (dk and dv) may be one buffer. A forward-only pass then never holds K and V whole, and
  /// a one-head cross-attention can fold its K/V projections away (fold_kv). Default: no.
  virtual bool merges_attention_chunks() const { return false; }
  /// Rows of a long input that a layer handles at once where it lets the backend choose (the
  /// encoder cross-attention's LN_kv and K/V projections, AttentionBlockConfig::kv_row_chunk).
  /// 0: the layer's own size, chosen for a CPU's caches and memory. A GPU asks for more rows, so
  /// that each product fills the device and a step makes fewer launches.
  virtual int64_t preferred_row_chunk() const { return 0; }
  /// The float32 op table (complete: checked when the backend is made).
  virtual const KernelTable<float>& kernels_f32() const = 0;
  /// float64 ops exist on the CPU backend only (gradient checks); others return nullptr.
  virtual const KernelTable<double>* kernels_f64() const { return nullptr; }
  /// Allocation counts and bytes, where the backend keeps them (device backends).
  virtual std::optional<MemoryStats> memory_stats() const { return std::nullopt; }

  /// Device collectives (DeviceCollectives): the size of the id rank 0 makes with
  /// make_collectives_id and every rank passes to join_collectives; 0 when the device has none.
  virtual size_t collectives_id_bytes() const { return 0; }
  virtual void make_collectives_id(void* id) const { PCV_FAIL("backend '", name(), "' has no device collectives"); }
  /// Joins the collectives of `world` ranks (blocks until all have joined).
  virtual std::unique_ptr<DeviceCollectives> join_collectives(const void* id, int rank, int world) {
    PCV_FAIL("backend '", name(), "' has no device collectives");
  }

  /// The op table of T bound to this backend's handle (float64 throws on backends without it).
  template <class T>
  Kernels<T> kernels() const {
    if constexpr (std::is_same_v<T, float>) {
      return Kernels<float>(kernels_f32(), handle());
    } else {
      static_assert(std::is_same_v<T, double>, "kernels exist for float and double");
      const KernelTable<double>* t = kernels_f64();
      PCV_CHECK(t != nullptr, "backend '", name(), "' has no float64 kernels; HINT: float64 ",
                "(gradient checks) runs on the cpu backend");
      return Kernels<double>(*t, handle());
    }
  }
};

/// "fp32" or "bf16" (throws naming the value otherwise).
Precision parse_precision(std::string_view name);
const char* precision_name(Precision p);

/// How to make a backend.
struct BackendOptions {
  Precision precision = Precision::kFp32;
  int device_index = -1;  // GPU ordinal; -1: the backend chooses (e.g. the MPI local rank)
};

/// Names of the backends compiled into this build ("cpu" and "guarded" always).
std::vector<std::string> available_backends();

/// Creates a backend by device name ("cpu", "guarded", "cuda", "neuron"). Throws
/// perceiver::Error naming the device, with a HINT, when it is unknown, was not built in, or
/// its device cannot be used here.
std::unique_ptr<Backend> make_backend(std::string_view device, const BackendOptions& options = {});

/// Throws perceiver::Error when `device` cannot run `program`'s ops one by one: neuron runs only
/// the compiled training steps that perceiver-export wrote (perceiver-train), not evaluation or
/// benchmark passes.
void require_op_by_op_device(std::string_view device, std::string_view program);

/// The process-wide CPU backend (the reference; cheap to share, holds no device state).
Backend& cpu_backend();

}  // namespace perceiver
