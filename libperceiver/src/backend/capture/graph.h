// The graph IR of the capture backend: one captured region (a training step, or part of one)
// is the ordered list of what happened to the backend's memory — table ops, host writes,
// zeroing, host reads — over buffers that stand for its allocations. Pointers are resolved to
// (buffer, element offset) when an op is recorded, because memory is freed and reused later in
// the region; the math of each op is kept as a lowering closure over those references.
//
// Memory → SSA (lowering.h): each buffer is one flat tensor value; every write makes a new
// version (a dynamic_update_slice of the written range), every read is a static slice of the
// current version. XLA folds the slices and updates away.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/capture/stablehlo.h"

namespace perceiver::capture {

/// A place in a buffer: the buffer's id and an offset in elements of its element type.
struct Ref {
  int32_t buffer = -1;
  int64_t offset = 0;
};

/// One allocation of the backend. Its element type is fixed by the first op that touches it.
struct BufferInfo {
  int32_t id = -1;
  size_t bytes = 0;
  bool typed = false;
  Elem elem = Elem::kF32;
  std::string name;        // given by its owner (Backend::name_buffer): state that outlives a step
  int64_t elems() const { return typed ? int64_t(bytes / elem_bytes(elem)) : 0; }
};

class Lowering;

struct Node {
  enum class Kind { kOp, kHostWrite, kZero, kHostRead };
  Kind kind = Kind::kOp;
  std::string op;                          // table op name (kOp)
  int32_t buffer = -1;                     // kHostWrite, kZero, kHostRead: the byte range
  size_t byte_offset = 0, bytes = 0;
  std::vector<uint8_t> data;               // kHostWrite: the bytes written (the step's input)
  std::function<void(Lowering&)> lower;    // kOp: the op in StableHLO
  std::vector<int32_t> touches;            // kOp: the buffers it reads or writes (for the manifest)
};

/// A captured region, self-contained: the buffers it names and its nodes in program order.
struct Graph {
  std::string name;
  std::map<int32_t, BufferInfo> buffers;
  std::vector<Node> nodes;
  /// The bytes at the start of the region of named or never op-written buffers that the host
  /// wrote or zeroed during it (copy on write; the recorder's memory has the later bytes).
  std::map<int32_t, std::vector<uint8_t>> entry_copies;
  /// Buffers the host wrote or zeroed outside any region since the previous region ended (the
  /// step's batch, points and masks when regions open at the first op): a runner refreshes them.
  std::vector<int32_t> host_written;
  size_t op_count() const;
};

}  // namespace perceiver::capture
