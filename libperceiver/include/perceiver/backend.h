// The compute seam (DESIGN.md #4). Layers call ops through a KernelTable; a backend fills the
// table. The CPU backend (Eigen + OpenBLAS + OpenMP) is always built and is the reference that
// every other backend is tested against. See libperceiver/src/backend/README.md for how a CUDA
// or Neuron backend plugs in.
//
// Conventions for every kernel:
//   - row-major, contiguous unless a leading dimension is passed;
//   - backward kernels ACCUMULATE (+=) into parameter and input gradients, so fan-out needs no
//     extra adds (the CPU reference; a faster backend documents where it writes with =);
//   - results are bitwise identical for any thread count (fixed work partitions, ordered sums).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "perceiver/activation.h"
#include "perceiver/error.h"

namespace perceiver {

enum class Transpose { kNo, kYes };

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
  /// Elements of the saved softmax state: P when materialised, log-sum-exp rows when streamed.
  int64_t saved_elems() const { return streamed() ? batch * heads * nq : batch * heads * nq * nk; }
};

/// The op table. One forward and one backward slot per op, with the CPU signatures.
template <class T>
struct KernelTable {
  // C[m,n] = alpha·op(A)·op(B) + beta·C with leading dimensions (row-major).
  void (*gemm)(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
               int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) = nullptr;
  // The same for `batch` independent problems whose operands start `stride_*` elements apart.
  void (*gemm_batched)(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha,
                       const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                       int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c,
                       int64_t batch) = nullptr;

  // Layer norm over the last axis (biased variance). Saves mean and rstd per row.
  void (*layer_norm_forward)(int64_t rows, int64_t cols, const T* x, const T* gamma,
                             const T* beta, double eps, T* y, T* mean, T* rstd) = nullptr;
  void (*layer_norm_backward)(int64_t rows, int64_t cols, const T* x, const T* gamma,
                              const T* mean, const T* rstd, const T* dy, T* dx, T* dgamma,
                              T* dbeta) = nullptr;

  // Row softmax: y = softmax(x) per row; backward dx += y ⊙ (dy − rowsum(dy ⊙ y)).
  void (*softmax_forward)(int64_t rows, int64_t cols, const T* x, T* y) = nullptr;
  void (*softmax_backward)(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) = nullptr;

  void (*gelu_forward)(GeluKind kind, int64_t n, const T* x, T* y) = nullptr;
  void (*gelu_backward)(GeluKind kind, int64_t n, const T* x, const T* dy, T* dx) = nullptr;

  // y[r,:] += bias; backward dbias += Σ_r dy[r,:].
  void (*bias_forward)(int64_t rows, int64_t cols, const T* bias, T* y) = nullptr;
  void (*bias_backward)(int64_t rows, int64_t cols, const T* dy, T* dbias) = nullptr;

  // Elementwise: y = a + b (residual), y += alpha·x, x *= alpha, x = value.
  void (*add)(int64_t n, const T* a, const T* b, T* y) = nullptr;
  void (*axpy)(int64_t n, T alpha, const T* x, T* y) = nullptr;
  void (*scale)(int64_t n, T alpha, T* x) = nullptr;
  void (*fill)(int64_t n, T value, T* x) = nullptr;
  // Reductions (returned in double; fixed summation order).
  double (*sum)(int64_t n, const T* x) = nullptr;
  double (*sum_squares)(int64_t n, const T* x) = nullptr;

  // Losses, mean over n elements (or rows). Backward: dpred += weight · d(mean)/dpred.
  double (*l1_forward)(int64_t n, const T* pred, const T* target) = nullptr;
  void (*l1_backward)(int64_t n, const T* pred, const T* target, double weight, T* dpred) = nullptr;
  double (*mse_forward)(int64_t n, const T* pred, const T* target) = nullptr;
  void (*mse_backward)(int64_t n, const T* pred, const T* target, double weight, T* dpred) = nullptr;
  double (*softmax_ce_forward)(int64_t rows, int64_t cols, const T* logits,
                               const int64_t* labels) = nullptr;
  void (*softmax_ce_backward)(int64_t rows, int64_t cols, const T* logits, const int64_t* labels,
                              double weight, T* dlogits) = nullptr;

  // Fused multi-head attention core O = softmax(Q·Kᵀ·scale)·V (no projections), with optional
  // attention dropout on the probabilities (AttentionDims::dropout_p).
  // `saved` holds P (materialised) or per-row log-sum-exp (streamed); see AttentionDims.
  void (*attention_forward)(const AttentionDims& d, const T* q, const T* k, const T* v, T* o,
                            T* saved) = nullptr;
  // Needs O from the forward (streamed mode uses rowsum(dO ⊙ O)). dq, dk, dv accumulate.
  void (*attention_backward)(const AttentionDims& d, const T* q, const T* k, const T* v,
                             const T* o, const T* saved, const T* dout, T* dq, T* dk,
                             T* dv) = nullptr;
};

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

/// A compute device. Layers never call a backend's methods directly except through
/// kernels<T>(); memory and copies are for the model's arenas and the data loader.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Buffer allocate(size_t bytes) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  /// The float32 op table; entries a backend lacks were filled with CPU ones at registration.
  virtual const KernelTable<float>& kernels_f32() const = 0;
  /// float64 ops exist on the CPU backend only (gradient checks); others return nullptr.
  virtual const KernelTable<double>* kernels_f64() const { return nullptr; }

  /// kernels<float>() or kernels<double>() (the latter throws on backends without float64).
  template <class T>
  const KernelTable<T>& kernels() const {
    if constexpr (std::is_same_v<T, float>) {
      return kernels_f32();
    } else {
      static_assert(std::is_same_v<T, double>, "kernels exist for float and double");
      const KernelTable<double>* t = kernels_f64();
      PCV_CHECK(t != nullptr, "backend '", name(), "' has no float64 kernels; HINT: float64 ",
                "(gradient checks) runs on the cpu backend");
      return *t;
    }
  }
};

/// Names of the backends compiled into this build ("cpu" always).
std::vector<std::string> available_backends();

/// Creates a backend by device name: "cpu", "cuda", "neuron". Throws perceiver::Error naming
/// the device, with a HINT, when it is unknown or was not built in.
std::unique_ptr<Backend> make_backend(std::string_view device);

/// The process-wide CPU backend (the reference; cheap to share, holds no device state).
Backend& cpu_backend();

}  // namespace perceiver
