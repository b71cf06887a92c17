// The capture backend's op table and what the op files share: each table slot resolves its
// pointers to buffer references (Recorder::ref) when called, and appends a node whose lowering
// writes the op in StableHLO the way the CPU reference computes it (cpu_*.cpp: the same
// accumulation precision — double where the CPU sums in double — and the same operand order).
#pragma once

#include <cstdint>

#include "backend/capture/capture_backend.h"
#include "backend/capture/lowering.h"

namespace perceiver::capture {

const KernelTable<float>& capture_table();

// Table slots, by file (capture_ops.cpp: the generic ops; capture_model_ops.cpp: the model's and
// the optimizers').
void fill_generic_ops(KernelTable<float>& t);
void fill_model_ops(KernelTable<float>& t);

inline Recorder& recorder_of(void* h) { return *static_cast<Recorder*>(h); }

// Small shorthands over HloWriter for the lowerings.
struct Ops {
  HloWriter& w;
  Value c(double x, Elem e, const Dims& shape = {}) { return w.constant(x, e, shape); }
  Value cf(double x, const Dims& shape) { return w.constant(x, Elem::kF32, shape); }
  Value f64(const Value& v) { return w.convert(v, Elem::kF64); }
  Value f32(const Value& v) { return w.convert(v, Elem::kF32); }
  /// v [rows] broadcast along the last axis of `shape` ([rows, cols]).
  Value per_row(const Value& v, const Dims& shape) { return w.broadcast(v, shape, {0}); }
  /// v [cols] broadcast over the rows of `shape` ([rows, cols]).
  Value per_col(const Value& v, const Dims& shape) { return w.broadcast(v, shape, {1}); }
  /// A scalar value splat to `shape`.
  Value all(const Value& s, const Dims& shape) { return w.splat(s, shape); }
  Value row_sum(const Value& v) { return w.reduce(v, {int64_t(v.shape.size()) - 1}, "add"); }
  Value row_max(const Value& v) { return w.reduce(v, {int64_t(v.shape.size()) - 1}, "maximum"); }
  Value col_sum(const Value& v) { return w.reduce(v, {0}, "add"); }
  Value total(const Value& v) {
    Dims all_dims;
    for (size_t i = 0; i < v.shape.size(); ++i) all_dims.push_back(int64_t(i));
    return w.reduce(v, all_dims, "add");
  }
};

}  // namespace perceiver::capture
