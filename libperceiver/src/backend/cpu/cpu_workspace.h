// Grow-only scratch memory for the CPU kernels' temporaries, one set per thread: the first step
// sizes it, every later step with the same shapes allocates nothing (the allocator's locks and
// page faults stay out of the step). A slot names one temporary of one kernel; temporaries live
// at the same time need different slots. The memory is not zeroed.
//
// Defined in one baseline translation unit: the per-level vector kernels (cpu_isa_*.cpp) call it
// as a plain function, so no level shares template code with another.
#pragma once

#include <omp.h>

#include <cstddef>

#include "perceiver/backend.h"

namespace perceiver::cpu {

enum class Slot {
  kAttnPairs,      // materialised attention: per-thread temporaries of a (batch, head) pair
  kAttnBlocks,     // streamed attention: per-thread temporaries of a query block or key group
  kAttnDelta,      // attention: rowsum(dO ⊙ O)
  kAttnQueryParts, // attention: dQ partials per key group
  kAttnSplitParts, // streamed attention: forward O rows and lse per key group, backward dK and dV
                   // (or the key sums' dot products) per query split (after the first of each)
  kAttnRounded,    // streamed attention, bf16 products: per-thread operands rounded to bf16
  kAttnRoundedDout, // streamed attention backward, bf16 products: dO of every pair rounded
  kAttnRoundedQkv, // streamed attention, bf16 products: the call's Q, K and V rounded
  kAttnKvTiles,    // streamed attention, our AMX kernel: the call's K and V packed into tiles
  kAttnKeySums,    // streamed attention, key sums: per-query weighted sums per key group
  kAttnKeyRuns,    // streamed attention, key sums: per-thread runs of keys in one group
  kGemmSlices,     // K-split GEMM: one partial product per slice
  kSumPartials,    // blocked sums: one partial per block
  kRowPartials,    // blocked column sums: partials per row block
  kRowTotals,      // blocked column sums: the result
  kEmbedPartials,  // embedding backward: partials per row block
  kEmbedRows,      // embedding with its layer norm: per-thread input rows
  kEmbedUnit,      // embedding factors: the layer norm's unit gain and zero shift
  kBf16A,          // bf16 products: A rounded to bf16
  kBf16B,          // bf16 products: B rounded to bf16
  kBf16WidenedA,   // emulated bf16 products: A widened back to float32
  kBf16WidenedB,   // emulated bf16 products: B widened back to float32
  kDnnlScratchpad, // oneDNN matmul: its temporaries
  kAmxA,           // AMX bf16 products: A packed into tiles
  kAmxB,           // AMX bf16 products: B packed into tiles
  kAmxSharedB,     // AMX bf16 products in row tiles: B packed once for all of them
  kOwnGemmA,       // our float32 kernel: a block of A packed into panels
  kOwnGemmB,       // our float32 kernel: a block of B packed into panels
  kOwnGemmSharedB, // our float32 kernel in row tiles: B packed once for all of them
  kCount
};

/// `bytes` of host memory, 64-byte aligned, and its release. Blocks of a megabyte and more are
/// mapped from the kernel and unmapped when freed: through malloc, glibc's sliding mmap threshold
/// serves a freed big block's size from its heap afterwards, which keeps memory resident after it
/// is freed (kinetics700 bf16: 52 MB more in the steady state for a 5 MB larger scratch).
void* allocate_host(size_t bytes);
void free_host(void* p, size_t bytes);
/// allocate_host's block as a Buffer that frees it; fails with a clear error when out of memory.
Buffer host_buffer(size_t bytes);
/// Gives back the whole pages inside [p, p + bytes) of host memory (they read as zero when next
/// touched); the partial pages at the ends are left as they are.
void discard_host(void* p, size_t bytes);

/// At least `bytes` bytes of this thread's memory for `slot`, 64-byte aligned; valid until the
/// same thread asks for the same slot again (or even_out_thread_scratch runs).
void* thread_scratch(Slot slot, size_t bytes);

/// Grows every pool thread's slots to the most any thread asked for inside a parallel region,
/// when that rose (or the pool grew) since the last call; from the host thread with no kernel
/// running. A dynamically scheduled loop (attention pairs, batched products) hands its items to
/// whichever thread is free, so a worker may first meet an item's size in a later step. The
/// backend calls this when the host reads results: a step whose last kernel runs before the read
/// (the trainer's, the allocation tests') leaves every later step with the same shapes nothing to
/// allocate. Sizes asked for outside parallel regions stay the caller's. Untouched pages of the
/// grown blocks are not resident (a megabyte and more are mapped, see allocate_host).
void even_out_thread_scratch();

/// thread_scratch for `count` values of T (not for the per-level kernels: a template would be a
/// symbol the levels share; they call thread_scratch).
template <class T>
T* scratch(Slot slot, size_t count) {
  return static_cast<T*>(thread_scratch(slot, count * sizeof(T)));
}

/// `per_thread` values for each thread of the next parallel region, allocated by the calling
/// thread: the scratch grows with the shapes only, never with which thread happens to run which
/// item (a thread-local buffer per worker would grow the first time a worker gets a big item).
template <class T>
class ThreadSlices {
 public:
  ThreadSlices(Slot slot, size_t per_thread)
      : per_((per_thread + 15) / 16 * 16),  // 64-byte aligned slices
        base_(scratch<T>(slot, per_ * size_t(omp_get_max_threads()))) {}
  /// The calling thread's slice (thread 0's outside a parallel region).
  T* mine() const { return base_ + size_t(omp_get_thread_num()) * per_; }

 private:
  size_t per_;
  T* base_;
};

}  // namespace perceiver::cpu
