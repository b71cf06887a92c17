// Multi-head attention core on CPU: O = softmax(scale·Q·Kᵀ)·V per (batch, head) pair.
//
// Two forms with the same results up to float rounding (DESIGN.md #5):
//  - materialised: keeps P [B,H,Nq,Nk] for the backward pass;
//  - streamed: walks the key axis in chunks with an online softmax (Milakov & Gimelshein 2018;
//    FlashAttention, Dao et al. 2022), keeps only the row log-sum-exp [B,H,Nq], and recomputes P
//    chunk by chunk in the backward pass. The encoder's 784×52097 P (163 MB per example and head)
//    is never built.
// Work splits (pairs, query blocks, key-chunk groups; for calls with few of those, forward key
// groups and backward query splits) depend on shapes only, never on threads or the batch size.
// With bf16 products the streamed kernel can take K and V already in bf16 (AttentionDims::kv_bf16):
// it reads their chunks as stored instead of rounding them for every query block, and writes dK,
// dV over them rounded to bf16.
//
// Attention dropout (AttentionDims::dropout_p > 0, train mode): O = (P ⊙ M/(1−p))·V with P the
// undropped softmax (its normaliser and the saved state ignore the mask). Backward:
//   dV = (P ⊙ M/(1−p))ᵀ·dO,  dP = (dO·Vᵀ) ⊙ M/(1−p),  dS = P ⊙ (dP − rowsum(dP ⊙ P)),
// and rowsum(dP ⊙ P) = Σ_j (P⊙M/(1−p))_j·(dO·v_j) = dO·O still, so the streamed backward's
// delta is unchanged. The mask is recomputed from Philox wherever it is needed (never stored).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_amx_gemm.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_bf16_round.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/cpu_sgemm.h"
#include "backend/cpu/cpu_workspace.h"
#include "core/rng.h"
#include "perceiver/error.h"

namespace perceiver::cpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows [0, total) in `count` blocks. Where blocks are long enough their boundaries fall on
// multiples of 32 and the last block takes the rest: bf16 products pad their rows to pairs of
// 16-row tiles, so 784 latents in 4 blocks are 192, 192, 192, 208 (800 rows padded) rather than
// 4 × 196 (896). Shape-only, like every split here, so results do not depend on the thread count.
struct RowBlocks {
  int64_t total, count;
  int64_t begin(int64_t i) const {
    if (i >= count) return total;
    const int64_t even = i * total / count;
    return total / count >= 64 ? even / 32 * 32 : even;  // 64: no block ends up empty or short
  }
  int64_t rows(int64_t i) const { return begin(i + 1) - begin(i); }
  int64_t largest() const {
    int64_t most = 0;
    for (int64_t i = 0; i < count; ++i) most = std::max(most, rows(i));
    return most;
  }
};

// Query blocks of the streamed passes. Larger blocks re-read each key chunk and its gradient
// accumulators fewer times; blocks of near-equal size keep the threads balanced. Forward: about
// 200 rows, since its tasks are the blocks (64-row blocks measured 15% slower at kinetics700).
// Backward: about 400 within each query split (its tasks are key groups): the encoder's backward
// went from 1425 to 1386 ms (bench_ops attn_enc_bwd_kc512, 2 threads, repeated), and 784-row
// blocks were no faster. With bf16 products on AMX, 32-row boundaries took the encoder's folded
// calls from 10.4 to 9.4-9.6 ms (backward) and 5.2 to 4.9 ms (forward) a 2048-key range. Backward
// with bf16 products and narrow heads (dqk + dv ≤ 256: the latent self-attention's 64 + 64) about
// 200: there a key chunk is small to read again and a block's scores are most of what it touches
// (392 rows × 512 keys of P, dS and their bf16 copies, 2 MB, are an L2's worth); the latent call
// took 5.3-6.0 against 5.2-7.2 ms in bench_ops (attn_latent_bwd_kc512, AMX, 2 threads, alternating
// runs) and 6.86-6.88 against 7.38-7.76 ms in the kinetics700 step (PERCEIVER_CPU_PROFILE); 128
// rows were no faster, and the encoder's wide key-sums call took 2-7% longer with 200.
RowBlocks forward_blocks(int64_t nq) { return {nq, std::max<int64_t>(1, ceil_div(nq, 200))}; }
template <bool kBf16>
RowBlocks backward_blocks(const AttentionDims& d, int64_t rows) {
  const int64_t target = kBf16 && d.dqk + d.dv <= 256 ? 200 : 400;
  return {rows, std::max<int64_t>(1, ceil_div(rows, target))};
}
constexpr int64_t kKeyGroups = 8;     // streamed backward: key chunks are split into this many groups
constexpr int64_t kTasksPerThread = 4;  // streamed: tasks per thread in a wave of pairs
// A streamed call whose work per batch item makes fewer tasks than this (heads × query blocks in
// the forward, heads × key groups in the backward) splits further: the forward its keys into groups,
// the backward its query rows. The encoder's folded calls (one head, 2048 keys) have 4 of each,
// which would leave 12 threads of a 16-core node idle at batch 1. A count per batch item, never of
// threads or pairs, so results depend on neither the thread count nor the batch size.
constexpr int64_t kTasksPerItem = 16;
constexpr int64_t kMinSplitRows = 128;  // streamed backward: query rows of a split, at least

int64_t key_chunks(const AttentionDims& d) { return (d.nk + d.kv_chunk - 1) / d.kv_chunk; }

// Streamed forward: groups of key chunks, each its own online softmax over the query block, merged
// in group order (1: the keys in one pass).
int64_t forward_key_groups(const AttentionDims& d) {
  return std::clamp<int64_t>(ceil_div(kTasksPerItem, d.heads * forward_blocks(d.nq).count), 1,
                             std::min(key_chunks(d), kKeyGroups));
}
// Streamed backward: key groups, each a task owning its chunks' dK and dV.
int64_t backward_key_groups(const AttentionDims& d) { return std::min(kKeyGroups, key_chunks(d)); }
// Streamed backward: query splits per key group. A split after the first adds its dK, dV into
// partials (one chunk's gradient then has several owners), so only calls whose keys are few enough
// for every chunk to be its own group split, and never where the gradients overwrite K and V.
int64_t backward_query_splits(const AttentionDims& d) {
  if (d.kv_grad_in_place || key_chunks(d) > kKeyGroups) return 1;
  const int64_t most = std::max<int64_t>(1, d.nq / kMinSplitRows);
  return std::clamp<int64_t>(ceil_div(kTasksPerItem, d.heads * backward_key_groups(d)), 1, most);
}
RowBlocks backward_splits(const AttentionDims& d) { return {d.nq, backward_query_splits(d)}; }
// Rows of the streamed backward's largest query block, in any split: its block buffers' height.
template <bool kBf16>
int64_t backward_block_rows(const AttentionDims& d) {
  const RowBlocks splits = backward_splits(d);
  int64_t most = 0;
  for (int64_t sp = 0; sp < splits.count; ++sp)
    most = std::max(most, backward_blocks<kBf16>(d, splits.rows(sp)).largest());
  return most;
}
// Pairs per wave of a streamed pass: enough for kTasksPerThread tasks per thread. The wave follows
// the thread count, the tasks (and so every result) the shapes only.
int64_t pairs_per_wave(int64_t tasks_per_pair, int64_t pairs) {
  return std::clamp<int64_t>(ceil_div(kTasksPerThread * omp_get_max_threads(), tasks_per_pair), 1, pairs);
}
// The partial of group or split `i` (≥ 1) of a wave's pair `wp`, in a wave's partials of `count`
// groups or splits per pair (count − 1 partials each, `size` values apiece).
template <class T>
T* split_part(T* parts, int64_t wp, int64_t i, int64_t count, int64_t size) {
  return parts + (wp * (count - 1) + i - 1) * size;
}

// One product of a task on the calling thread: float32 ones on our kernel where it runs the
// attention's products (cpu_sgemm.h: their operands are in cache), else gemm_serial's.
template <class T>
void task_product(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    static const OwnGemm* own = own_attention_gemm();
    if (own) return own->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  gemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The products of one attention call: float32, or bf16 operands with float32 accumulation
// (--precision bf16, cpu_bf16.h). Everything between the products stays in T.
template <class T, bool kBf16>
struct Products {
  static void serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                     const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
    if constexpr (kBf16) gemm_bf16_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else task_product(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  static void tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                    const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
    if constexpr (kBf16) gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
};

// A matrix operand of the streamed products: its values (row-major, leading dimension ld) and, with
// bf16 products, the same values rounded to bf16 (packed) by operand(). An operand that feeds
// several products (Q, dO, a key chunk, dS) is rounded once, not once per product. A key or value
// chunk may also come packed for our AMX kernel as the B of an NT product (op(B) = Xᵀ) and of an
// NN one (op(B) = X), once for the call (pack_kv).
template <class T, bool kBf16>
struct Operand {
  const T* x;
  int64_t ld;
  const uint16_t* x16;  // kBf16 only
  int64_t ld16;
  AmxPackedB as_nt{}, as_nn{};
  Operand from_row(int64_t r) const { return {x + r * ld, ld, kBf16 ? x16 + r * ld16 : nullptr, ld16}; }
};

// rows × cols of x as an operand; with bf16 products rounded into `buf` (rows·cols values).
template <class T, bool kBf16>
Operand<T, kBf16> operand(const T* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* buf) {
  if constexpr (kBf16) {
    round_to_bf16(rows, cols, x, ld, buf);
    return {x, ld, buf, cols};
  } else {
    return {x, ld, nullptr, 0};
  }
}

// Products<T, kBf16>::serial on operands (already rounded where the products are bf16).
template <class T, bool kBf16>
void product(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const Operand<T, kBf16>& a,
             const Operand<T, kBf16>& b, T beta, T* c, int64_t ldc) {
  if constexpr (kBf16) {
    const AmxPackedB& packed = tb == Transpose::kYes ? b.as_nt : b.as_nn;
    if (packed.tiles) return amx_gemm_bf16_packed_b(ta, m, n, k, alpha, a.x16, a.ld16, packed, beta, c, ldc);
    gemm_bf16_rounded(ta, tb, m, n, k, alpha, a.x16, a.ld16, b.x16, b.ld16, beta, c, ldc);
  } else {
    task_product(ta, tb, m, n, k, alpha, a.x, a.ld, b.x, b.ld, beta, c, ldc);
  }
}

// bf16 values to set aside for `count` rounded operand values (none without bf16 products).
template <bool kBf16>
constexpr size_t rounded_size(int64_t count) {
  return kBf16 ? size_t(count) : 0;
}

// The room `count` rounded values after p, with bf16 products; null without them (p is null then:
// no room was set aside, and stepping a null pointer is undefined).
template <bool kBf16>
uint16_t* rounded_after(uint16_t* p, int64_t count) {
  return kBf16 ? p + count : nullptr;
}

// Pointers to one (batch, head) pair's slices; leading dimensions are the full channel widths.
// K and V in bf16 (k16, v16, rows ldk16 and ldv16 apart): as stored with AttentionDims::kv_bf16
// (k and v are null then), or rounded for the call (round_qkv); else null.
template <class T>
struct Pair {
  const T *q, *k, *v;
  int64_t ldq, ldk, ldv;
  const uint16_t *k16 = nullptr, *v16 = nullptr;
  int64_t ldk16 = 0, ldv16 = 0;
  AmxPackedB k_nt{}, k_nn{}, v_nt{}, v_nn{};  // packed by pack_kv where it did
};

// Where one pair's dK and dV go: float rows, or (kv_bf16) bf16 rows over the stored K and V; float
// rows ldk and ldv apart (the pair's K and V rows, or a partial's).
template <class T>
struct KvGrads {
  T *dk, *dv;
  uint16_t *dk16, *dv16;
  int64_t ldk = 0, ldv = 0;
};

// Offsets of pair (b, h)'s first K and V values in [B,Nk,H·dqk] and [B,Nk,H·dv], counted in
// stored values (T, or bf16 with kv_bf16): for K and V and for their gradients.
struct KvOffsets {
  int64_t k, v;
};
KvOffsets kv_offsets(const AttentionDims& d, int64_t b, int64_t h) {
  return {b * d.nk * d.heads * d.dqk + h * d.dqk, b * d.nk * d.heads * d.dv + h * d.dv};
}

template <class T>
Pair<T> pair_slices(const AttentionDims& d, const T* q, const T* k, const T* v, int64_t b, int64_t h) {
  const int64_t ldq = d.heads * d.dqk, ldv = d.heads * d.dv;
  const T* qs = q + b * d.nq * ldq + h * d.dqk;
  const KvOffsets o = kv_offsets(d, b, h);
  if (d.kv_bf16)
    return {qs, nullptr, nullptr, ldq, ldq, ldv, reinterpret_cast<const uint16_t*>(k) + o.k,
            reinterpret_cast<const uint16_t*>(v) + o.v, ldq, ldv};
  return {qs, k + o.k, v + o.v, ldq, ldq, ldv};
}

template <class T>
KvGrads<T> kv_grads(const AttentionDims& d, T* dk, T* dv, int64_t b, int64_t h) {
  const KvOffsets o = kv_offsets(d, b, h);
  if (d.kv_bf16)
    return {nullptr, nullptr, reinterpret_cast<uint16_t*>(dk) + o.k, reinterpret_cast<uint16_t*>(dv) + o.v};
  return {dk + o.k, dv + o.v, nullptr, nullptr, d.heads * d.dqk, d.heads * d.dv};
}

// Rows [r0, r0+n) of a pair's K or V (x, rows ld apart; or x16, rows ld16 apart, where in bf16
// already) as an operand: rounded into `buf`, read as it is where its rows are packed, else
// copied into `buf` packed. The products never see strided bf16 rows: with AMX, oneDNN's results
// for strided and packed operands differ in the last bits (and strided ones run slower).
template <class T, bool kBf16>
Operand<T, kBf16> kv_operand_rows(const T* x, int64_t ld, const uint16_t* x16, int64_t ld16, int64_t r0, int64_t n,
                                  int64_t cols, uint16_t* buf) {
  if constexpr (kBf16) {
    if (x16 && ld16 == cols) return {nullptr, ld, x16 + r0 * ld16, ld16};
    if (x16) {
      for (int64_t r = 0; r < n; ++r) std::copy_n(x16 + (r0 + r) * ld16, cols, buf + r * cols);
      return {nullptr, ld, buf, cols};
    }
  }
  return operand<T, kBf16>(x + r0 * ld, ld, n, cols, buf);
}
// The same for the products that read it as an NT product's B (nt) and as an NN one's (nn; null
// where none does), with its tiles where pack_kv packed the pair's whole K or V: then only the
// products whose tiles were not packed read its rows, which are not made at all if none.
template <class T, bool kBf16>
Operand<T, kBf16> kv_operand(const T* x, int64_t ld, const uint16_t* x16, int64_t ld16, const AmxPackedB* nt,
                             const AmxPackedB* nn, int64_t r0, int64_t n, int64_t cols, uint16_t* buf) {
  const bool rows = (nt && !nt->tiles) || (nn && !nn->tiles);
  Operand<T, kBf16> op{nullptr, ld, nullptr, 0};
  if (rows) op = kv_operand_rows<T, kBf16>(x, ld, x16, ld16, r0, n, cols, buf);
  if (nt && nt->tiles) op.as_nt = nt->sub(0, r0);
  if (nn && nn->tiles) op.as_nn = nn->sub(r0, 0);
  return op;
}

// With bf16 products: Q, K and V of the whole call rounded to bf16 once, each pair's
// rows packed ([B·H, N, d]: oneDNN's bf16 products run far slower on operands with strided
// rows), before the tasks that read them. Every query block used to round each key chunk again,
// and each key group its chunks once per query split: the encoder's folded call rounded its
// 2048 × 704 keys 16 times over, and again as values. Q, K and V given in bf16 (q_bf16, kv_bf16)
// are read as they are (Q copied packed per pair where it has several heads), K and V that are
// one buffer (the folded keys = values) are rounded once, and K, V larger than kMaxRoundedKvBytes
// are still rounded a chunk at a time.
struct RoundedQkv {
  const uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr;
};
constexpr int64_t kMaxRoundedKvBytes = int64_t(64) << 20;

// x [B, N, H·width] into `out` [B·H, N, width], over the pool: float values rounded to bf16, bf16
// ones (uint16_t) copied. Row by row of x, each row's heads in turn: reading x in order, not a
// head's column slice at a time, rounds the latent layers' 784 x 512 twice as fast (0.24 against
// 0.46 ns a value on one Sapphire Rapids core).
template <class In>
void round_pairs(const AttentionDims& d, int64_t n, int64_t width, const In* x, uint16_t* out) {
  const int64_t ld = d.heads * width;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.batch * n; ++t) {
    const int64_t b = t / n, r = t % n;
    for (int64_t h = 0; h < d.heads; ++h) {
      const In* row = x + t * ld + h * width;
      uint16_t* to = out + ((b * d.heads + h) * n + r) * width;
      if constexpr (std::is_same_v<In, uint16_t>) std::copy_n(row, width, to);
      else vector_kernels<float>().to_bf16(width, row, to);
    }
  }
}

template <class T, bool kBf16>
RoundedQkv round_qkv(const AttentionDims& d, const T* q, const T* k, const T* v) {
  RoundedQkv r;
  if constexpr (kBf16) {
    const int64_t pairs = d.batch * d.heads;
    const bool q_as_given = d.q_bf16 && d.heads == 1;  // [B, Nq, dqk] is [B·H, Nq, dqk] already
    const int64_t q_size = q_as_given ? 0 : pairs * d.nq * d.dqk;
    const bool same_kv = k == v && d.dqk == d.dv;
    const int64_t kv_size = pairs * d.nk * (same_kv ? d.dqk : d.dqk + d.dv);
    const bool kv = !d.kv_bf16 && kv_size * 2 <= kMaxRoundedKvBytes;
    uint16_t* buf = scratch<uint16_t>(Slot::kAttnRoundedQkv, size_t(q_size + (kv ? kv_size : 0)));
    const auto* given = reinterpret_cast<const uint16_t*>(q);
    r.q16 = q_as_given ? given : buf;
    if (!d.q_bf16) round_pairs(d, d.nq, d.dqk, q, buf);
    else if (!q_as_given) round_pairs(d, d.nq, d.dqk, given, buf);  // several heads: packed per pair
    if (kv) {
      uint16_t* k16 = buf + q_size;
      uint16_t* v16 = same_kv ? k16 : k16 + pairs * d.nk * d.dqk;
      round_pairs(d, d.nk, d.dqk, k, k16);
      if (!same_kv) round_pairs(d, d.nk, d.dv, v, v16);
      r.k16 = k16;
      r.v16 = v16;
    }
  }
  return r;
}

// pair_slices, reading K and V from their rounded copies where round_qkv made them.
template <class T>
Pair<T> pair_slices(const AttentionDims& d, const T* q, const T* k, const T* v, const RoundedQkv& r, int64_t b,
                    int64_t h) {
  Pair<T> s = pair_slices(d, q, k, v, b, h);
  if (r.k16) {
    const int64_t pr = b * d.heads + h;
    s.k16 = r.k16 + pr * d.nk * d.dqk;
    s.v16 = r.v16 + pr * d.nk * d.dv;
    s.ldk16 = d.dqk;
    s.ldv16 = d.dv;
  }
  return s;
}

// The dropout mask of one (batch, head) pair: factors 1/(1−p) (kept) or 0 (dropped). Element
// (i, j) is kept iff word j%4 of philox4x32_10({j/4, i, (example0 + b)·H + h, stream}, key) is
// at least floor(p·2³²): a pure function of the key and the position.
template <class T>
class DropoutMask {
 public:
  DropoutMask(const AttentionDims& d, int64_t b, int64_t h)
      : key_{uint32_t(d.dropout_key), uint32_t(d.dropout_key >> 32)},
        pair_(uint32_t((d.dropout_example0 + b) * d.heads + h)),
        stream_(d.dropout_stream),
        threshold_(uint32_t(std::min(std::ldexp(d.dropout_p, 32), 4294967295.0))),
        keep_scale_(T(1.0 / (1.0 - d.dropout_p))) {}
  // f[c] for keys j0 .. j0+n−1 of query row i.
  void row(int64_t i, int64_t j0, int64_t n, T* f) const {
    const int64_t end = j0 + n;
    for (int64_t j = j0; j < end;) {
      const std::array<uint32_t, 4> w = philox4x32_10({uint32_t(j >> 2), uint32_t(i), pair_, stream_}, key_);
      for (int64_t word = j & 3; word < 4 && j < end; ++word, ++j) f[j - j0] = w[word] >= threshold_ ? keep_scale_ : T(0);
    }
  }
  // rows × n factors for query rows i0.. and keys j0.., row-major.
  void block(int64_t i0, int64_t rows, int64_t j0, int64_t n, T* f, bool parallel) const {
    detail::parallel_for(rows, parallel, [&](int64_t r) { row(i0 + r, j0, n, f + r * n); });
  }

 private:
  std::array<uint32_t, 2> key_;
  uint32_t pair_, stream_, threshold_;
  T keep_scale_;
};

// dS = P ⊙ (dP − rowsum(dP ⊙ P)) · scale, in place in dp.
template <class T>
void softmax_grad_rows(int64_t rows, int64_t cols, const T* p, T* dp, T scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* pr = p + r * cols;
    T* g = dp + r * cols;
    // Summed in double: over long rows (Nk ≈ 52k) a float sum leaves visible noise on
    // gradients that are exactly zero in theory (the key bias).
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += double(g[c]) * double(pr[c]);
    for (int64_t c = 0; c < cols; ++c) g[c] = pr[c] * (g[c] - T(dot)) * scale;
  }
}

// ---- materialised ----------------------------------------------------------------------------

// From this many (batch, head) pairs on, each pair is one task with whole single-threaded
// products; a single pair is tiled instead. Whole products are over 2x faster than tiles for these
// sizes (oneDNN's brgemm takes whole operands, OpenBLAS the strided tiles), so two pairs on two
// threads beat tiling each: the (four-layer) demo model's step at batch 2 went from 29 to 52
// clips/s (it was 4 before). A count of pairs, never of threads, so results do not depend on the
// thread count.
constexpr int64_t kMinParallelPairs = 2;

// f(pr) for every pair: one pair per task when `parallel`, else in order on the calling thread.
// Not `omp parallel for if (parallel)`: a region whose if clause is false is still a (one-thread)
// parallel region, and the tiled products inside it then open nested teams, which libgomp staffs
// with a newly created thread every time while its pool's idle thread spins.
template <class F>
void for_each_pair(int64_t pairs, bool parallel, F f) {
  if (!parallel) {
    for (int64_t pr = 0; pr < pairs; ++pr) f(pr);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t pr = 0; pr < pairs; ++pr) f(pr);
}

// With our AMX kernel (amx_products): each pair's K and V packed once for the call as the
// B operands of the products that read them (Q·Kᵀ and dS·K; P·V and dO·Vᵀ), which otherwise pack
// a key chunk for every query block. Only where chunks start and end on whole tiles (kv_chunk a
// multiple of 32; the last one ends at the keys' end), K and V are in bf16 for the call, and the
// tiles take at most kMaxKvTilesBytes. The products' bits are those of packing per product.
struct KvForms {
  bool k_nt, k_nn, v_nt, v_nn;  // which a pass reads: K or V as the B of NT or NN products
};
constexpr int64_t kMaxKvTilesBytes = int64_t(64) << 20;

struct KvTiles {
  AmxPackedB k_nt, k_nn, v_nt, v_nn;  // pair 0's; none packed: tiles are null
  int64_t per_pair = 0;               // bf16 values between two pairs' tiles
};

template <class T, bool kBf16>
KvTiles pack_kv(const AttentionDims& d, const T* q, const T* k, const T* v, const RoundedQkv& r, KvForms f) {
  KvTiles t;
  if constexpr (kBf16) {
    if (!amx_products() || d.kv_chunk % 32 != 0 || (!r.k16 && !d.kv_bf16)) return t;
    // Keys that are also the values (the folded encoder call): one set of tiles serves both.
    const bool same_kv = k == v && d.dqk == d.dv;
    const KvForms need{f.k_nt || (same_kv && f.v_nt), f.k_nn || (same_kv && f.v_nn), f.v_nt && !same_kv,
                       f.v_nn && !same_kv};
    // Each pair's tiles: the forms it needs, one after the other (k_nt, k_nn, v_nt, v_nn).
    const int64_t sizes[4] = {need.k_nt ? amx_packed_b_size(d.dqk, d.nk) : 0,
                              need.k_nn ? amx_packed_b_size(d.nk, d.dqk) : 0,
                              need.v_nt ? amx_packed_b_size(d.dv, d.nk) : 0,
                              need.v_nn ? amx_packed_b_size(d.nk, d.dv) : 0};
    const int64_t offset[4] = {0, sizes[0], sizes[0] + sizes[1], sizes[0] + sizes[1] + sizes[2]};
    const int64_t per_pair = offset[3] + sizes[3], pairs = d.batch * d.heads;
    if (per_pair == 0 || pairs * per_pair * 2 > kMaxKvTilesBytes) return t;
    uint16_t* base = scratch<uint16_t>(Slot::kAttnKvTiles, size_t(pairs * per_pair));
    const auto pack_pair = [&](int64_t pr, bool parallel) {
      const Pair<T> s = pair_slices(d, q, k, v, r, pr / d.heads, pr % d.heads);
      uint16_t* out = base + pr * per_pair;
      if (need.k_nt) (void)amx_pack_b(Transpose::kYes, d.dqk, d.nk, s.k16, s.ldk16, out + offset[0], parallel);
      if (need.k_nn) (void)amx_pack_b(Transpose::kNo, d.nk, d.dqk, s.k16, s.ldk16, out + offset[1], parallel);
      if (need.v_nt) (void)amx_pack_b(Transpose::kYes, d.dv, d.nk, s.v16, s.ldv16, out + offset[2], parallel);
      if (need.v_nn) (void)amx_pack_b(Transpose::kNo, d.nk, d.dv, s.v16, s.ldv16, out + offset[3], parallel);
    };
    // Several pairs a task each; a single pair's forms each over the pool.
    for_each_pair(pairs, pairs > 1, [&](int64_t pr) { pack_pair(pr, pairs == 1); });
    const auto form = [&](bool packed, int i, int64_t depth) {
      return packed ? AmxPackedB::at(base + offset[i], depth) : AmxPackedB{};
    };
    t.k_nt = form(need.k_nt, 0, d.dqk);
    t.k_nn = form(need.k_nn, 1, d.nk);
    t.v_nt = same_kv ? t.k_nt : form(need.v_nt, 2, d.dv);
    t.v_nn = same_kv ? t.k_nn : form(need.v_nn, 3, d.nk);
    t.per_pair = per_pair;
  }
  return t;
}

// Pair pr's tiles, where pack_kv made them.
template <class T>
void attach_tiles(const KvTiles& t, int64_t pr, Pair<T>& s) {
  const auto at = [&](const AmxPackedB& x) {
    return x.tiles ? AmxPackedB{x.tiles + pr * t.per_pair, x.column_stride} : AmxPackedB{};
  };
  s.k_nt = at(t.k_nt);
  s.k_nn = at(t.k_nn);
  s.v_nt = at(t.v_nt);
  s.v_nn = at(t.v_nn);
}

template <class T, bool kBf16>
void materialised_forward_pair(const AttentionDims& d, const Pair<T>& s, int64_t b, int64_t h, T* p, T* o,
                               int64_t ldo, bool serial, T* work) {
  auto mm = serial ? Products<T, kBf16>::serial : Products<T, kBf16>::tiled;
  mm(Transpose::kNo, Transpose::kYes, d.nq, d.nk, d.dqk, T(d.scale), s.q, s.ldq, s.k, s.ldk, T(0), p, d.nk);
  softmax_forward(d.nq, d.nk, p, p);  // inside a parallel loop over pairs its own loop runs serially
  if (!d.dropout()) {
    mm(Transpose::kNo, Transpose::kNo, d.nq, d.dv, d.nk, T(1), p, d.nk, s.v, s.ldv, T(0), o, ldo);
    return;
  }
  T* pd = work;  // P ⊙ M/(1−p); P itself stays saved
  DropoutMask<T>(d, b, h).block(0, d.nq, 0, d.nk, pd, !serial);
  for (int64_t e = 0; e < d.nq * d.nk; ++e) pd[e] *= p[e];
  mm(Transpose::kNo, Transpose::kNo, d.nq, d.dv, d.nk, T(1), pd, d.nk, s.v, s.ldv, T(0), o, ldo);
}

template <class T, bool kBf16>
void materialised_backward_pair(const AttentionDims& d, const Pair<T>& s, int64_t b, int64_t h, const T* p,
                                const T* dout, int64_t ldo, T* dq, T* dk, T* dv, bool serial, T* work) {
  auto mm = serial ? Products<T, kBf16>::serial : Products<T, kBf16>::tiled;
  T* ds = work;  // then, with dropout, the mask factors and P ⊙ them
  if (!d.dropout()) {
    mm(Transpose::kYes, Transpose::kNo, d.nk, d.dv, d.nq, T(1), p, d.nk, dout, ldo, T(1), dv, s.ldv);
    mm(Transpose::kNo, Transpose::kYes, d.nq, d.nk, d.dv, T(1), dout, ldo, s.v, s.ldv, T(0), ds, d.nk);
  } else {
    T* f = work + d.nq * d.nk;
    T* pd = f + d.nq * d.nk;
    DropoutMask<T>(d, b, h).block(0, d.nq, 0, d.nk, f, !serial);
    for (int64_t e = 0; e < d.nq * d.nk; ++e) pd[e] = p[e] * f[e];
    mm(Transpose::kYes, Transpose::kNo, d.nk, d.dv, d.nq, T(1), pd, d.nk, dout, ldo, T(1), dv, s.ldv);
    mm(Transpose::kNo, Transpose::kYes, d.nq, d.nk, d.dv, T(1), dout, ldo, s.v, s.ldv, T(0), ds, d.nk);
    for (int64_t e = 0; e < d.nq * d.nk; ++e) ds[e] *= f[e];  // dP = (dO·Vᵀ) ⊙ M/(1−p)
  }
  softmax_grad_rows(d.nq, d.nk, p, ds, T(d.scale));
  mm(Transpose::kNo, Transpose::kNo, d.nq, d.dqk, d.nk, T(1), ds, d.nk, s.k, s.ldk, T(1), dq, s.ldq);
  mm(Transpose::kYes, Transpose::kNo, d.nk, d.dqk, d.nq, T(1), ds, d.nk, s.q, s.ldq, T(1), dk, s.ldk);
}

// ---- streamed -------------------------------------------------------------------------------

// One block of query rows against keys [k_begin, k_end), online softmax. Writes O rows and their
// lse, and the scaled scores into the pair's `scores` [Nq, Nk] where kept (AttentionDims::keep_scores;
// else null). With `resume` it starts from the O rows and lse already there instead of nothing
// (AttentionDims::continues). `q`: the pair's Q rows from row0 on (rounded already, with bf16
// products); `r16`: room for the block's other rounded operands (forward_rounded_size).
template <class T, bool kBf16>
void streamed_forward_block(const AttentionDims& d, const Pair<T>& s, int64_t b, int64_t h, const Operand<T, kBf16>& q,
                            int64_t row0, int64_t rows, int64_t k_begin, int64_t k_end, bool resume, T* o,
                            int64_t ldo, T* lse, T* scores, T* work, uint16_t* r16) {
  const int64_t kc = d.kv_chunk;
  T* p = work;               // rows × kc scores, then probabilities
  T* acc = p + rows * kc;    // rows × dv output sums
  T* m = acc + rows * d.dv;  // rows: running maxima
  T* l = m + rows;           // rows: running sums
  T* f = l + rows;           // kc: dropout factors
  uint16_t* k16 = r16;                                      // a key chunk, the probabilities,
  uint16_t* p16 = rounded_after<kBf16>(k16, kc * d.dqk);     // a value chunk (where K and V are
  uint16_t* v16 = rounded_after<kBf16>(p16, rows * kc);      // not rounded already)
  const int64_t qk_cols = d.qk_columns(), v_cols = d.v_columns();  // the products' columns
  if (resume) {  // from the earlier keys' result: running maximum lse, sum 1, output o
    for (int64_t r = 0; r < rows; ++r) std::copy_n(o + (row0 + r) * ldo, d.dv, acc + r * d.dv);
    std::copy_n(lse + row0, rows, m);
    std::fill_n(l, rows, T(1));
  } else {  // acc is written by the first chunk's product (beta 0), not zeroed and rescaled first
    if (k_begin >= k_end) std::fill_n(acc, rows * d.dv, T(0));
    if (v_cols < d.dv)  // no product writes past v_cols (AttentionDims::key_columns)
      for (int64_t r = 0; r < rows; ++r) std::fill(acc + r * d.dv + v_cols, acc + (r + 1) * d.dv, T(0));
    std::fill_n(m, rows, -std::numeric_limits<T>::infinity());
    std::fill_n(l, rows, T(0));
  }
  const DropoutMask<T> mask(d, b, h);
  const VectorKernels<T>& vk = vector_kernels<T>();
  for (int64_t c0 = k_begin; c0 < k_end; c0 += kc) {
    const int64_t n = std::min(kc, k_end - c0);
    const auto kk = kv_operand<T, kBf16>(s.k, s.ldk, s.k16, s.ldk16, &s.k_nt, nullptr, c0, n, d.dqk, k16);
    product(Transpose::kNo, Transpose::kYes, rows, n, qk_cols, T(d.scale), q, kk, T(0), p, n);
    const bool fused = kBf16 && !d.dropout();  // P rounded as it is made
    for (int64_t r = 0; r < rows; ++r) {
      T* pr = p + r * n;
      if (scores) std::copy_n(pr, n, scores + (row0 + r) * d.keys_total() + c0);
      const T m_new = std::max(m[r], vk.max(n, pr));
      const T corr = std::exp(m[r] - m_new);  // exp(-inf) = 0 on the first chunk
      const T sum = fused ? vk.exp_shifted_bf16(n, pr, m_new, pr, p16 + r * n) : vk.exp_shifted(n, m_new, pr);
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
      // Past the first chunks the running maximum rarely moves (on resuming it is the lse, above
      // every score so far), and x·1 is x: the rows' rescaling is skipped then.
      if (corr != T(1) && (resume || c0 != k_begin))
        for (int64_t j = 0; j < d.dv; ++j) acc[r * d.dv + j] *= corr;
      if (d.dropout()) {  // l above is the undropped normaliser; only the V sum sees the mask
        mask.row(row0 + r, c0, n, f);
        for (int64_t c = 0; c < n; ++c) pr[c] *= f[c];
      }
    }
    const Operand<T, kBf16> pp = fused ? Operand<T, kBf16>{p, n, p16, n} : operand<T, kBf16>(p, n, rows, n, p16);
    const T beta = resume || c0 != k_begin ? T(1) : T(0);
    product(Transpose::kNo, Transpose::kNo, rows, v_cols, n, T(1), pp,
            kv_operand<T, kBf16>(s.v, s.ldv, s.v16, s.ldv16, nullptr, &s.v_nn, c0, n, d.dv, v16), beta, acc, d.dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / l[r];
    for (int64_t j = 0; j < d.dv; ++j) o[(row0 + r) * ldo + j] = acc[r * d.dv + j] * inv;
    lse[row0 + r] = m[r] + std::log(l[r]);
  }
}
template <bool kBf16>
size_t forward_rounded_size(const AttentionDims& d, int64_t rows) {
  return rounded_size<kBf16>(d.kv_chunk * d.dqk + rows * d.kv_chunk + d.kv_chunk * d.dv);
}

// A finished key chunk's dK and dV (dk, dv: [n, dqk], [n, dv]) over its K and V rows, which no
// one needs any more (AttentionDims::kv_grad_in_place); rounded to bf16 where K and V are so.
template <class T>
void kv_grads_in_place(const AttentionDims& d, const Pair<T>& s, const T* dk, const T* dv, int64_t k0, int64_t n,
                       const KvGrads<T>& out) {
  if constexpr (std::is_same_v<T, float>) {
    if (d.kv_bf16) {
      for (int64_t j = 0; j < n; ++j) {
        vector_kernels<float>().to_bf16(d.dqk, dk + j * d.dqk, out.dk16 + (k0 + j) * s.ldk);
        vector_kernels<float>().to_bf16(d.dv, dv + j * d.dv, out.dv16 + (k0 + j) * s.ldv);
      }
      return;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    std::copy_n(dk + j * d.dqk, d.dqk, out.dk + (k0 + j) * s.ldk);
    std::copy_n(dv + j * d.dv, d.dv, out.dv + (k0 + j) * s.ldv);
  }
}

// attention_backward_key_sums (keys that are their own values, whose gradient dX = dK + dV is
// wanted only reduced): in place of a task's dK, dV its weighted sums, for its query rows over its
// chunks' keys, of dS and P by key group (q_part: this key group's partial [Nq, 2·groups], rows
// r·2·groups + g and + groups + g), and its chunks' keys' terms of dX_j·x_j over its query rows
// (k_part: this query split's partial [Nk]). group and scale: the item's keys' groups and weights
// from the call's first key. Σ_j w_j·dX_j then needs only q_sumsᵀ·[Q; dO], so dSᵀ·Q and Pᵀ·dO
// (two of the backward's five products) are never formed.
template <class T>
struct KeySums {
  const uint8_t* group;
  const T* scale;
  int64_t groups;
  T* q_part;
  T* k_part;
  int64_t* runs;  // the thread's room for a chunk's runs: 3 values each (first key, end, group)
};

// The runs of consecutive keys in one group among keys [k0, k0 + n) into `runs`; returns their count.
template <class T>
int64_t key_runs(const KeySums<T>& ks, int64_t k0, int64_t n, int64_t* runs) {
  int64_t count = 0;
  for (int64_t j = 0; j < n;) {
    const uint8_t g = ks.group[k0 + j];
    int64_t end = j + 1;
    while (end < n && ks.group[k0 + end] == g) ++end;
    if (g < ks.groups) {
      runs[3 * count] = j, runs[3 * count + 1] = end, runs[3 * count + 2] = g;
      ++count;
    }
    j = end;
  }
  return count;
}

// One block's share of the key sums, a row at a time (VectorKernels::key_sums_row): from its rows
// of scaled scores sc (ld apart) and of dP in ds, the rows' dS (over ds, and rounded into ds16
// where not null) and their terms of the key and group sums. p: room for rows × n probabilities.
template <class T>
void add_key_sums(const AttentionDims& d, const KeySums<T>& ks, const int64_t* runs, int64_t run_count,
                  const T* lse, const T* delta, int64_t r0, int64_t rows, int64_t k0, int64_t n, const T* sc,
                  int64_t ld, T* ds, uint16_t* ds16, T* p) {
  const VectorKernels<T>& vk = vector_kernels<T>();
  for (int64_t r = 0; r < rows; ++r) {
    const KeySumsRow<T> row{.n = n,
                            .s = sc + r * ld,
                            .lse = lse[r0 + r],
                            .delta = delta[r0 + r],
                            .scale = T(d.scale),
                            .inv_scale = T(1 / d.scale),
                            .ds = ds + r * n,
                            .ds16 = ds16 ? ds16 + r * n : nullptr,
                            .p = p + r * n,
                            .ks = ks.k_part + k0,
                            .w = ks.scale + k0,
                            .runs = runs,
                            .run_count = run_count,
                            .sums = ks.q_part + (r0 + r) * 2 * ks.groups,
                            .groups = ks.groups};
    vk.key_sums_row(row);
  }
}

// The chunks [c_begin, c_end) of one pair against the query rows [r_begin, r_end), in blocks: the
// rows' share of those chunks' dK, dV (added into `out`, owned by this task; written over its
// rows of those chunks instead where `out_fresh`, a partial) and of this group's partial dQ (its
// rows written over by the first chunk: the partials are never zeroed, which cost the encoder's
// folded call 26 MB of memset). q and go: the pair's Q and dO (rounded once for every task, with
// bf16 products); `scores`: the pair's saved scores [Nq, Nk] (keep_scores), else null and
// recomputed; `r16`: room for its other rounded operands (backward_rounded_size). With `ks`
// (attention_backward_key_sums) the key sums replace dK and dV, and `out` is not used.
template <class T, bool kBf16>
void streamed_backward_group(const AttentionDims& d, const Pair<T>& s, int64_t b, int64_t h, const T* lse,
                             const T* scores, const T* delta, const Operand<T, kBf16>& q_all,
                             const Operand<T, kBf16>& go_all, int64_t c_begin, int64_t c_end, int64_t r_begin,
                             int64_t r_end, T* dq_part, const KvGrads<T>& out, bool out_fresh, T* work,
                             uint16_t* r16, const KeySums<T>* ks) {
  const int64_t kc = d.kv_chunk;
  const int64_t qb = backward_block_rows<kBf16>(d);
  T* p = work;          // qb × kc probabilities
  T* ds = p + qb * kc;  // qb × kc score gradients
  T* f = ds + qb * kc;  // qb × kc dropout factors
  uint16_t* k16 = r16;  // a key chunk, its value chunk (where not rounded already), then P (for dV)
  uint16_t* v16 = rounded_after<kBf16>(k16, kc * d.dqk);  // and dS in turn
  uint16_t* p16 = rounded_after<kBf16>(v16, kc * d.dv);
  const bool fused = kBf16 && !d.dropout();  // P and dS rounded as they are made
  const int64_t qk_cols = d.qk_columns(), v_cols = d.v_columns();  // the products' (fewer: key sums only)
  const DropoutMask<T> mask(d, b, h);
  const VectorKernels<T>& vk = vector_kernels<T>();
  // In place: this chunk's gradients go to buffers and overwrite K and V once the chunk is done.
  T* dk_chunk = f + (d.dropout() ? qb * kc : 0);
  T* dv_chunk = dk_chunk + (d.kv_grad_in_place ? kc * d.dqk : 0);
  // Key sums read the scores after P is made: P (where their kernel stores it) goes to the (unused)
  // dropout factors' room then.
  T* pb = ks && !scores ? f : p;
  if (ks) std::fill_n(ks->q_part + r_begin * 2 * ks->groups, (r_end - r_begin) * 2 * ks->groups, T(0));
  for (int64_t c = c_begin; c < c_end; ++c) {
    const int64_t k0 = c * kc, n = std::min(kc, d.nk - k0);
    const int64_t run_count = ks ? key_runs(*ks, k0, n, ks->runs) : 0;
    if (ks) std::fill_n(ks->k_part + k0, n, T(0));
    const auto kk = kv_operand<T, kBf16>(s.k, s.ldk, s.k16, s.ldk16, scores ? nullptr : &s.k_nt, &s.k_nn, k0, n,
                                         d.dqk, k16);
    const auto vv = kv_operand<T, kBf16>(s.v, s.ldv, s.v16, s.ldv16, &s.v_nt, nullptr, k0, n, d.dv, v16);
    T* dk_out = d.kv_grad_in_place || ks ? dk_chunk : out.dk + k0 * out.ldk;
    T* dv_out = d.kv_grad_in_place || ks ? dv_chunk : out.dv + k0 * out.ldv;
    const int64_t ldk_out = d.kv_grad_in_place ? d.dqk : out.ldk, ldv_out = d.kv_grad_in_place ? d.dv : out.ldv;
    const RowBlocks blocks = backward_blocks<kBf16>(d, r_end - r_begin);
    for (int64_t i = 0; i < blocks.count; ++i) {
      const int64_t r0 = r_begin + blocks.begin(i), rows = blocks.rows(i);
      // The first products into a fresh dK, dV (where dK and dV are one buffer, dV's) and into dQ
      // write over it.
      const bool kv_first = (out_fresh || d.kv_grad_in_place) && i == 0;
      const T beta_dv = kv_first ? T(0) : T(1), beta_dk = kv_first && dk_out != dv_out ? T(0) : T(1);
      const T beta_dq = c == c_begin ? T(0) : T(1);
      const Operand<T, kBf16> q = q_all.from_row(r0), go = go_all.from_row(r0);
      // P = exp(S − lse), from the forward's scores where kept
      const T* sc = scores ? scores + r0 * d.keys_total() + k0 : p;
      const int64_t ld = scores ? d.keys_total() : n;
      if (!scores) product(Transpose::kNo, Transpose::kYes, rows, n, qk_cols, T(d.scale), q, kk, T(0), p, n);
      for (int64_t r = 0; r < rows && !ks; ++r) {  // key sums make P in their own pass, below
        if (fused) vk.exp_shifted_bf16(n, sc + r * ld, lse[r0 + r], p + r * n, p16 + r * n);
        else vk.exp_shifted_to(n, sc + r * ld, lse[r0 + r], p + r * n);
      }
      if (ks) {  // no dV, dK: dP, then P, dS and their sums in one pass
        product(Transpose::kNo, Transpose::kYes, rows, n, v_cols, T(1), go, vv, T(0), ds, n);
        add_key_sums(d, *ks, ks->runs, run_count, lse, delta, r0, rows, k0, n, sc, ld, ds, fused ? p16 : nullptr,
                     pb);
      } else if (!d.dropout()) {
        const auto pp = fused ? Operand<T, kBf16>{p, n, p16, n} : operand<T, kBf16>(p, n, rows, n, p16);
        product(Transpose::kYes, Transpose::kNo, n, d.dv, rows, T(1), pp, go, beta_dv, dv_out, ldv_out);
        product(Transpose::kNo, Transpose::kYes, rows, n, d.dv, T(1), go, vv, T(0), ds, n);
        for (int64_t r = 0; r < rows; ++r)
          vk.score_grad(n, p + r * n, delta[r0 + r], T(d.scale), ds + r * n, fused ? p16 + r * n : nullptr);
      } else {
        mask.block(r0, rows, k0, n, f, false);
        for (int64_t e = 0; e < rows * n; ++e) ds[e] = p[e] * f[e];  // P ⊙ M/(1−p), for dV
        product(Transpose::kYes, Transpose::kNo, n, d.dv, rows, T(1), operand<T, kBf16>(ds, n, rows, n, p16), go,
                beta_dv, dv_out, ldv_out);
        product(Transpose::kNo, Transpose::kYes, rows, n, d.dv, T(1), go, vv, T(0), ds, n);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j)
            ds[r * n + j] = p[r * n + j] * (ds[r * n + j] * f[r * n + j] - delta[r0 + r]) * T(d.scale);
      }
      const auto dsc = fused ? Operand<T, kBf16>{ds, n, p16, n} : operand<T, kBf16>(ds, n, rows, n, p16);
      if (!ks) product(Transpose::kYes, Transpose::kNo, n, d.dqk, rows, T(1), dsc, q, beta_dk, dk_out, ldk_out);
      product(Transpose::kNo, Transpose::kNo, rows, qk_cols, n, T(1), dsc, kk, beta_dq, dq_part + r0 * d.dqk, d.dqk);
    }
    if (d.kv_grad_in_place && !ks) kv_grads_in_place(d, s, dk_chunk, dv_chunk, k0, n, out);
  }
}
template <bool kBf16>
size_t backward_rounded_size(const AttentionDims& d) {
  return rounded_size<kBf16>(d.kv_chunk * (d.dqk + d.dv) + backward_block_rows<kBf16>(d) * d.kv_chunk);
}

// Pair pr's kept scores [Nq, keys_total], after the lse rows in the saved state (keep_scores), else
// null; from this call's first key (AttentionDims::key0), rows keys_total() apart.
template <class T>
T* kept_scores(const AttentionDims& d, T* saved, int64_t pr) {
  return d.keep_scores ? saved + d.batch * d.heads * d.nq + pr * d.nq * d.keys_total() + d.key0 : nullptr;
}

// Merges key groups 1.. of a wave's pairs into group 0's O rows and lse (o, lse), in group order.
// Each group's rows are normalised over its own keys, lse their log-normaliser; parts holds, per
// pair, groups − 1 blocks of [Nq, dv] O rows followed by their Nq lse values.
template <class T>
void merge_key_groups(const AttentionDims& d, int64_t p0, int64_t np, int64_t groups, const T* parts, T* o, T* lse) {
  const int64_t ldo = d.heads * d.dv, part_size = d.nq * (d.dv + 1);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < np * d.nq; ++t) {
    const int64_t pr = p0 + t / d.nq, r = t % d.nq, b = pr / d.heads, h = pr % d.heads;
    T* out = o + (b * d.nq + r) * ldo + h * d.dv;
    T& l0 = lse[pr * d.nq + r];
    T lg[kKeyGroups], w[kKeyGroups], sum = 0;  // each group's lse of the row, then its weight
    lg[0] = l0;
    for (int64_t g = 1; g < groups; ++g) lg[g] = split_part(parts, pr - p0, g, groups, part_size)[d.nq * d.dv + r];
    const T m = *std::max_element(lg, lg + groups);
    for (int64_t g = 0; g < groups; ++g) {
      w[g] = std::exp(lg[g] - m);
      sum += w[g];
    }
    for (int64_t j = 0; j < d.dv; ++j) out[j] *= w[0] / sum;
    for (int64_t g = 1; g < groups; ++g) {
      const T* og = split_part(parts, pr - p0, g, groups, part_size) + r * d.dv;
      const T wg = w[g] / sum;
      for (int64_t j = 0; j < d.dv; ++j) out[j] += wg * og[j];
    }
    l0 = m + std::log(sum);
  }
}

// Tasks are (pair, key group, query block). Group 0 writes o and lse (resuming from them with
// AttentionDims::continues); later groups write partials, merged at the end of each wave of pairs.
template <class T, bool kBf16>
void streamed_forward(const AttentionDims& d, const T* q, const T* k, const T* v, T* o, T* lse) {
  const RowBlocks row_blocks = forward_blocks(d.nq);
  const int64_t qb = row_blocks.largest(), kc = d.kv_chunk, chunks = key_chunks(d);
  const int64_t pairs = d.batch * d.heads, blocks = row_blocks.count, groups = forward_key_groups(d);
  const int64_t ldo = d.heads * d.dv, per_pair = groups * blocks, part_size = d.nq * (d.dv + 1);
  const ThreadSlices<T> work(Slot::kAttnBlocks, size_t(qb * d.kv_chunk + qb * d.dv + 2 * qb + d.kv_chunk));
  const ThreadSlices<uint16_t> r16(Slot::kAttnRounded, forward_rounded_size<kBf16>(d, qb));
  const RoundedQkv rounded = round_qkv<T, kBf16>(d, q, k, v);
  const KvTiles tiles = pack_kv<T, kBf16>(d, q, k, v, rounded, {true, false, false, true});
  const int64_t wave = groups == 1 ? pairs : pairs_per_wave(per_pair, pairs);  // one wave where nothing merges
  T* parts = scratch<T>(Slot::kAttnSplitParts, size_t(wave * (groups - 1) * part_size));
  for (int64_t p0 = 0; p0 < pairs; p0 += wave) {
    const int64_t np = std::min(wave, pairs - p0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < np * per_pair; ++t) {
      const int64_t pr = p0 + t / per_pair, g = t % per_pair / blocks, b = pr / d.heads, h = pr % d.heads;
      const int64_t row0 = row_blocks.begin(t % blocks), rows = row_blocks.rows(t % blocks);
      const int64_t k_begin = g * chunks / groups * kc, k_end = std::min(d.nk, (g + 1) * chunks / groups * kc);
      T* part = g == 0 ? nullptr : split_part(parts, pr - p0, g, groups, part_size);
      T* og = g == 0 ? o + b * d.nq * ldo + h * d.dv : part;
      T* lg = g == 0 ? lse + pr * d.nq : part + d.nq * d.dv;
      Pair<T> s = pair_slices(d, q, k, v, rounded, b, h);
      attach_tiles(tiles, pr, s);
      const Operand<T, kBf16> qq{s.q + row0 * s.ldq, s.ldq, kBf16 ? rounded.q16 + (pr * d.nq + row0) * d.dqk : nullptr,
                                 d.dqk};
      streamed_forward_block<T, kBf16>(d, s, b, h, qq, row0, rows, k_begin, k_end, g == 0 && d.continues, og,
                                       g == 0 ? ldo : d.dv, lg, kept_scores(d, lse, pr), work.mine(), r16.mine());
    }
    if (groups > 1) merge_key_groups(d, p0, np, groups, parts, o, lse);
  }
}

// Adds the dK, dV partials of query splits 1.. of a wave's pairs to their rows of dk and dv, in
// split order. parts holds, per pair, splits − 1 blocks of [Nk, dqk] dK rows then [Nk, dv] dV
// rows (one [Nk, dqk] block where dk and dv are one buffer).
template <class T>
void add_kv_parts(const AttentionDims& d, int64_t p0, int64_t np, int64_t splits, bool same_kv_grads,
                  const T* parts, T* dk, T* dv) {
  const int64_t part_size = d.nk * (same_kv_grads ? d.dqk : d.dqk + d.dv);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < np * d.nk; ++t) {
    const int64_t pr = p0 + t / d.nk, j = t % d.nk, b = pr / d.heads, h = pr % d.heads;
    const KvGrads<T> out = kv_grads(d, dk, dv, b, h);
    for (int64_t sp = 1; sp < splits; ++sp) {
      const T* part = split_part(parts, pr - p0, sp, splits, part_size);
      for (int64_t c = 0; c < d.dqk; ++c) out.dk[j * out.ldk + c] += part[j * d.dqk + c];
      if (same_kv_grads) continue;
      for (int64_t c = 0; c < d.dv; ++c) out.dv[j * out.ldv + c] += part[d.nk * d.dqk + j * d.dv + c];
    }
  }
}

// attention_backward_key_sums' arguments (KernelTable): the keys' groups and weights over
// [B, keys_total], and its outputs.
template <class T>
struct KeySumsCall {
  const uint8_t* group;
  const T* scale;
  int64_t groups;
  T *q_sums, *key_sums;
};

// Adds the key sums of a wave's pairs, from the tasks' partials, to q_sums and key_sums: q parts
// per key group summed in group order, k parts per query split in split order (into split 0's,
// as w_j·dX_j·x_j), then key_sums[g, :] += Σ_j (that)·x_j over the keys in order, a block of
// columns a task. x: the call's keys (= values), one head; bf16 values with kv_bf16.
template <class T>
void finish_key_sums(const AttentionDims& d, const KeySumsCall<T>& call, const T* x, int64_t p0, int64_t np,
                     int64_t groups, int64_t splits, const T* q_parts, T* k_parts) {
  const auto* x16 = reinterpret_cast<const uint16_t*>(x);
  const int64_t width = 2 * call.groups;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < np * d.nq; ++t) {
    const int64_t pr = p0 + t / d.nq, r = t % d.nq;
    T* out = call.q_sums + (pr * d.nq + r) * width;
    for (int64_t g = 0; g < groups; ++g) {
      const T* part = q_parts + (((pr - p0) * groups + g) * d.nq + r) * width;
      for (int64_t e = 0; e < width; ++e) out[e] += part[e];
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < np * d.nk; ++t) {
    const int64_t pr = p0 + t / d.nk, j = t % d.nk;
    T* dot = k_parts + (pr - p0) * splits * d.nk + j;
    for (int64_t sp = 1; sp < splits; ++sp) *dot += dot[sp * d.nk];
    *dot *= call.scale[pr * d.keys_total() + d.key0 + j];
  }
  constexpr int64_t kColumns = 64;  // per task
  const int64_t columns = d.qk_columns(), blocks = ceil_div(columns, kColumns);  // the keys are zero past it
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < np * blocks; ++t) {
    const int64_t pr = p0 + t / blocks, c0 = t % blocks * kColumns, cols = std::min(kColumns, columns - c0);
    const uint8_t* group = call.group + pr * d.keys_total() + d.key0;
    const T* dot = k_parts + (pr - p0) * splits * d.nk;
    T* out = call.key_sums + pr * call.groups * d.dqk + c0;
    for (int64_t j = 0; j < d.nk; ++j) {
      if (group[j] >= call.groups) continue;
      const int64_t xj = (pr * d.nk + j) * d.dqk + c0;
      T* o = out + group[j] * d.dqk;
      if (d.kv_bf16) {
        for (int64_t c = 0; c < cols; ++c) o[c] += dot[j] * T(from_bf16(x16[xj + c]));
      } else {
        for (int64_t c = 0; c < cols; ++c) o[c] += dot[j] * x[xj + c];
      }
    }
  }
}

template <class T, bool kBf16>
void streamed_backward(const AttentionDims& d, const T* q, const T* k, const T* v, const T* o,
                       const T* lse, const T* dout, T* dq, T* dk, T* dv, const KeySumsCall<T>* key_sums = nullptr) {
  const int64_t pairs = d.batch * d.heads, ldo = d.heads * d.dv, ldq = d.heads * d.dqk;
  // delta[pair,row] = Σ_j dO·O over the head's channels (= rowsum(dP ⊙ P)); a row of dO and O at
  // a time, its heads in turn (as round_pairs).
  T* delta = scratch<T>(Slot::kAttnDelta, size_t(pairs * d.nq));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.batch * d.nq; ++t) {
    const int64_t b = t / d.nq, r = t % d.nq;
    for (int64_t h = 0; h < d.heads; ++h) {
      const T *go = dout + t * ldo + h * d.dv, *oo = o + t * ldo + h * d.dv;
      T s = 0;
      for (int64_t j = 0; j < d.dv; ++j) s += go[j] * oo[j];
      delta[(b * d.heads + h) * d.nq + r] = s;
    }
  }
  // With bf16 products: Q, K, V and each pair's dO rounded once, packed per pair.
  const RoundedQkv rounded = round_qkv<T, kBf16>(d, q, k, v);
  const KvTiles tiles = pack_kv<T, kBf16>(d, q, k, v, rounded, {!d.keep_scores, true, true, false});
  uint16_t* o16 = scratch<uint16_t>(Slot::kAttnRoundedDout, rounded_size<kBf16>(pairs * d.nq * d.dv));
  if constexpr (kBf16) round_pairs(d, d.nq, d.dv, dout, o16);
  const RowBlocks split_rows = backward_splits(d);
  const int64_t chunks = key_chunks(d), groups = backward_key_groups(d), splits = split_rows.count;
  const int64_t qb = backward_block_rows<kBf16>(d), kc = d.kv_chunk, per_pair = groups * splits;
  const ThreadSlices<T> work(Slot::kAttnBlocks, size_t(3 * qb * kc + kc * (d.dqk + d.dv)));
  const ThreadSlices<uint16_t> r16(Slot::kAttnRounded, backward_rounded_size<kBf16>(d));
  // Pairs go in waves of enough pairs for kTasksPerThread tasks per thread; a wave's group
  // partials of dQ (and, with query splits, the later splits' dK, dV) live at once and are summed
  // (in group, split order) at its end. The wave follows the thread count, the partition into
  // tasks (and so every result) the shapes only: the partials (the encoder's dQ ones are 8 × 784 ×
  // 704 floats per pair) do not grow with the batch on a small machine.
  const int64_t wave = pairs_per_wave(per_pair, pairs);
  T* dq_part = scratch<T>(Slot::kAttnQueryParts, size_t(wave * groups * d.nq * d.dqk));
  // One buffer where dK and dV are one (the folded K/V projections: keys = values).
  const bool same_kv_grads = dk == dv && d.dqk == d.dv;
  const int64_t kv_part_size = d.nk * (same_kv_grads ? d.dqk : d.dqk + d.dv);
  // With key sums: every split's key dot products, and each key group's query sums.
  T* kv_parts = scratch<T>(Slot::kAttnSplitParts,
                           size_t(key_sums ? wave * splits * d.nk : wave * (splits - 1) * kv_part_size));
  T* q_parts = key_sums ? scratch<T>(Slot::kAttnKeySums, size_t(wave * groups * d.nq * 2 * key_sums->groups))
                        : nullptr;
  const ThreadSlices<int64_t> runs(Slot::kAttnKeyRuns, key_sums ? size_t(3 * kc) : 0);
  for (int64_t p0 = 0; p0 < pairs; p0 += wave) {
    const int64_t np = std::min(wave, pairs - p0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < np * per_pair; ++t) {
      const int64_t pr = p0 + t / per_pair, g = t % per_pair / splits, sp = t % splits;
      const int64_t b = pr / d.heads, h = pr % d.heads;
      Pair<T> s = pair_slices(d, q, k, v, rounded, b, h);
      attach_tiles(tiles, pr, s);
      const Operand<T, kBf16> q_all{s.q, s.ldq, kBf16 ? rounded.q16 + pr * d.nq * d.dqk : nullptr, d.dqk};
      const Operand<T, kBf16> go_all{dout + b * d.nq * ldo + h * d.dv, ldo, kBf16 ? o16 + pr * d.nq * d.dv : nullptr,
                                     d.dv};
      KvGrads<T> out{};
      KeySums<T> ks{};
      if (key_sums) {
        const int64_t key = b * d.keys_total() + d.key0;
        ks = {key_sums->group + key, key_sums->scale + key, key_sums->groups,
              q_parts + ((pr - p0) * groups + g) * d.nq * 2 * key_sums->groups,
              kv_parts + ((pr - p0) * splits + sp) * d.nk, runs.mine()};
      } else if (sp > 0) {
        T* part = split_part(kv_parts, pr - p0, sp, splits, kv_part_size);
        out = {part, same_kv_grads ? part : part + d.nk * d.dqk, nullptr, nullptr, d.dqk, d.dv};
      } else {
        out = kv_grads(d, dk, dv, b, h);
      }
      streamed_backward_group<T, kBf16>(d, s, b, h, lse + pr * d.nq, kept_scores(d, lse, pr), delta + pr * d.nq, q_all,
                                        go_all, g * chunks / groups, (g + 1) * chunks / groups, split_rows.begin(sp),
                                        split_rows.begin(sp + 1), dq_part + ((pr - p0) * groups + g) * d.nq * d.dqk,
                                        out, sp > 0, work.mine(), r16.mine(), key_sums ? &ks : nullptr);
    }
    // Row by row of dQ, each row's heads of the wave in turn.
    const int64_t b0 = p0 / d.heads, b1 = (p0 + np - 1) / d.heads + 1;
#pragma omp parallel for schedule(static)
    for (int64_t t = b0 * d.nq; t < b1 * d.nq; ++t) {
      const int64_t b = t / d.nq, r = t % d.nq;
      for (int64_t pr = std::max(p0, b * d.heads); pr < std::min(p0 + np, (b + 1) * d.heads); ++pr) {
        T* out = dq + t * ldq + (pr - b * d.heads) * d.dqk;
        for (int64_t g = 0; g < groups; ++g) {  // dQ past the products' columns gets nothing
          const T* part = dq_part + (((pr - p0) * groups + g) * d.nq + r) * d.dqk;
          for (int64_t j = 0; j < d.qk_columns(); ++j) out[j] += part[j];
        }
      }
    }
    if (key_sums) finish_key_sums(d, *key_sums, k, p0, np, groups, splits, q_parts, kv_parts);
    else if (splits > 1) add_kv_parts(d, p0, np, splits, same_kv_grads, kv_parts, dk, dv);
  }
}

template <bool kBf16>
void check_bf16_queries(const AttentionDims& d) {
  PCV_CHECK(!d.q_bf16 || (kBf16 && d.streamed()), "attention: bf16 queries (q_bf16) need bf16 products and the "
            "streamed kernel");
}

// AttentionDims::key_columns: where it may be set, and a whole number of 32-column tiles.
void check_key_columns(const AttentionDims& d, bool allowed) {
  PCV_CHECK(d.key_columns == 0 || (allowed && d.streamed() && !d.dropout() && d.dqk == d.dv &&
                                   d.key_columns % 32 == 0 && d.key_columns > 0 && d.key_columns <= d.dqk),
            "attention: key_columns ", d.key_columns, " (of ", d.dqk, ") needs the streamed forward or "
            "attention_backward_key_sums, keys that are their own values, no dropout, and a multiple of 32");
}

void check_key_range(const AttentionDims& d) {
  PCV_CHECK(!d.key_range() || (d.streamed() && !d.dropout() && d.key0 >= 0 && d.key0 + d.nk <= d.keys_total()),
            "attention: a call over keys [", d.key0, ", ", d.key0 + d.nk, ") of ", d.keys_total(),
            " needs the streamed kernel, without dropout, and a range inside the keys");
}

template <class T, bool kBf16>
void attention_forward_impl(const AttentionDims& d, const T* q, const T* k, const T* v, T* o, T* saved) {
  PCV_CHECK(d.dropout_p >= 0 && d.dropout_p < 1, "attention dropout p must be in [0, 1), got ", d.dropout_p);
  PCV_CHECK(!d.kv_bf16 || (kBf16 && d.streamed()), "attention: bf16 K/V (kv_bf16) needs bf16 products and the "
            "streamed kernel");
  check_bf16_queries<kBf16>(d);
  PCV_CHECK(!d.continues || (d.streamed() && !d.dropout()), "attention: a forward that continues an earlier one's "
            "result needs the streamed kernel, without dropout");
  check_key_range(d);
  check_key_columns(d, true);
  if (d.streamed()) return streamed_forward<T, kBf16>(d, q, k, v, o, saved);
  const int64_t pairs = d.batch * d.heads, ldo = d.heads * d.dv;
  const bool parallel_pairs = pairs >= kMinParallelPairs;
  const ThreadSlices<T> work(Slot::kAttnPairs, size_t(d.dropout() ? d.nq * d.nk : 0));
  for_each_pair(pairs, parallel_pairs, [&](int64_t pr) {
    const int64_t b = pr / d.heads, h = pr % d.heads;
    materialised_forward_pair<T, kBf16>(d, pair_slices(d, q, k, v, b, h), b, h, saved + pr * d.nq * d.nk,
                                        o + b * d.nq * ldo + h * d.dv, ldo, parallel_pairs, work.mine());
  });
}

template <class T, bool kBf16>
void attention_backward_impl(const AttentionDims& d, const T* q, const T* k, const T* v, const T* o,
                        const T* saved, const T* dout, T* dq, T* dk, T* dv) {
  PCV_CHECK(!d.kv_grad_in_place || (d.streamed() && dk == k && dv == v),
            "attention: kv_grad_in_place needs the streamed kernel and dk == k, dv == v");
  PCV_CHECK(!d.kv_bf16 || (kBf16 && d.kv_grad_in_place), "attention: bf16 K/V (kv_bf16) needs bf16 products and "
            "kv_grad_in_place");
  check_bf16_queries<kBf16>(d);
  check_key_range(d);
  check_key_columns(d, false);
  if (d.streamed()) return streamed_backward<T, kBf16>(d, q, k, v, o, saved, dout, dq, dk, dv);
  const int64_t pairs = d.batch * d.heads, ldo = d.heads * d.dv, ldq = d.heads * d.dqk;
  const bool parallel_pairs = pairs >= kMinParallelPairs;
  const ThreadSlices<T> work(Slot::kAttnPairs, size_t((d.dropout() ? 3 : 1) * d.nq * d.nk));
  for_each_pair(pairs, parallel_pairs, [&](int64_t pr) {
    const int64_t b = pr / d.heads, h = pr % d.heads;
    const KvGrads<T> out = kv_grads(d, dk, dv, b, h);
    materialised_backward_pair<T, kBf16>(d, pair_slices(d, q, k, v, b, h), b, h, saved + pr * d.nq * d.nk,
                                         dout + b * d.nq * ldo + h * d.dv, ldo, dq + b * d.nq * ldq + h * d.dqk,
                                         out.dk, out.dv, parallel_pairs, work.mine());
  });
}

template <class T, bool kBf16>
void attention_backward_key_sums_impl(const AttentionDims& d, const T* q, const T* x, const T* o, const T* saved,
                                      const T* dout, const uint8_t* key_group, const T* key_scale, int64_t groups,
                                      T* dq, T* q_sums, T* key_sums) {
  PCV_CHECK(d.streamed() && !d.dropout() && d.heads == 1 && d.dqk == d.dv && !d.kv_grad_in_place,
            "attention_backward_key_sums: needs the streamed kernel, one head, keys that are their own values, "
            "no dropout, and K and V not overwritten");
  PCV_CHECK(!d.kv_bf16 || kBf16, "attention_backward_key_sums: bf16 keys (kv_bf16) need bf16 products");
  PCV_CHECK(groups >= 1 && groups < 255, "attention_backward_key_sums: ", groups, " key groups (1 to 254)");
  check_bf16_queries<kBf16>(d);
  check_key_range(d);
  check_key_columns(d, true);
  const KeySumsCall<T> call{key_group, key_scale, groups, q_sums, key_sums};
  streamed_backward<T, kBf16>(d, q, x, x, o, saved, dout, dq, nullptr, nullptr, &call);
}

}  // namespace

template <class T>
void attention_backward_key_sums(const AttentionDims& d, const T* q, const T* x, const T* o, const T* saved,
                                 const T* dout, const uint8_t* key_group, const T* key_scale, int64_t groups, T* dq,
                                 T* q_sums, T* key_sums) {
  attention_backward_key_sums_impl<T, false>(d, q, x, o, saved, dout, key_group, key_scale, groups, dq, q_sums,
                                             key_sums);
}
void attention_backward_key_sums_bf16(const AttentionDims& d, const float* q, const float* x, const float* o,
                                      const float* saved, const float* dout, const uint8_t* key_group,
                                      const float* key_scale, int64_t groups, float* dq, float* q_sums,
                                      float* key_sums) {
  attention_backward_key_sums_impl<float, true>(d, q, x, o, saved, dout, key_group, key_scale, groups, dq, q_sums,
                                                key_sums);
}
template void attention_backward_key_sums<float>(const AttentionDims&, const float*, const float*, const float*,
                                                 const float*, const float*, const uint8_t*, const float*, int64_t,
                                                 float*, float*, float*);
template void attention_backward_key_sums<double>(const AttentionDims&, const double*, const double*, const double*,
                                                  const double*, const double*, const uint8_t*, const double*,
                                                  int64_t, double*, double*, double*);

template <class T>
void attention_forward(const AttentionDims& d, const T* q, const T* k, const T* v, T* o, T* saved) {
  attention_forward_impl<T, false>(d, q, k, v, o, saved);
}
template <class T>
void attention_backward(const AttentionDims& d, const T* q, const T* k, const T* v, const T* o, const T* saved,
                        const T* dout, T* dq, T* dk, T* dv) {
  attention_backward_impl<T, false>(d, q, k, v, o, saved, dout, dq, dk, dv);
}
void attention_forward_bf16(const AttentionDims& d, const float* q, const float* k, const float* v, float* o,
                            float* saved) {
  attention_forward_impl<float, true>(d, q, k, v, o, saved);
}
void attention_backward_bf16(const AttentionDims& d, const float* q, const float* k, const float* v, const float* o,
                             const float* saved, const float* dout, float* dq, float* dk, float* dv) {
  attention_backward_impl<float, true>(d, q, k, v, o, saved, dout, dq, dk, dv);
}

template void attention_forward<float>(const AttentionDims&, const float*, const float*, const float*,
                                       float*, float*);
template void attention_forward<double>(const AttentionDims&, const double*, const double*,
                                        const double*, double*, double*);
template void attention_backward<float>(const AttentionDims&, const float*, const float*, const float*,
                                        const float*, const float*, const float*, float*, float*, float*);
template void attention_backward<double>(const AttentionDims&, const double*, const double*,
                                         const double*, const double*, const double*, const double*,
                                         double*, double*, double*);

}  // namespace perceiver::cpu
