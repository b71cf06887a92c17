// bf16 operands in a pass's scratch, for a backend whose products are bf16 and that stores bf16
// (Kernels::stores_bf16): a tensor that several products read is rounded once into scratch and
// multiplied through gemm_stored_bf16, which gives the bits gemm would (it rounds the same
// values), instead of being rounded again by every product.
#pragma once

#include <cstdint>

#include "core/context.h"

namespace perceiver {

/// Scratch for `count` bf16 values, live until the enclosing ScratchScope ends.
template <class T>
uint16_t* bf16_scratch(int64_t count, Context<T>& ctx) {
  return reinterpret_cast<uint16_t*>(ctx.scratch.take_for_write(Shape{(count + 1) / 2}).data);
}

/// x [rows, cols] rounded to bf16 into scratch (packed rows).
template <class T>
const uint16_t* rounded_into_scratch(int64_t rows, int64_t cols, const T* x, Context<T>& ctx) {
  uint16_t* x16 = bf16_scratch(rows * cols, ctx);
  ctx.k.store_bf16(rows, cols, x, cols, x16, cols);
  return x16;
}

}  // namespace perceiver
