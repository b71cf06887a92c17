// Lowering a captured Graph to one StableHLO module (func @main), memory → SSA:
//  - every buffer is a flat tensor<N x elem>; its value before the region is an argument when
//    the region reads bytes it has not written yet (state, constants), else zeros;
//  - reads slice the current version, writes make a new one (dynamic_update_slice);
//  - host writes in the region are arguments of their own (the step's inputs), host reads are
//    results of their own (what the host reads back), and every buffer the region writes that
//    is named state or was read before written is a result aliased to its argument (in place).
// Host values that change every step (the learning rate, the optimizer's step count) are lifted
// to scalar arguments, so that one compiled module serves every step.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/capture/graph.h"

namespace perceiver::capture {

struct ModuleArg {
  enum class Kind { kState, kResident, kInput, kScalar };
  Kind kind = Kind::kResident;
  std::string name;      // MLIR name without '%'
  int32_t buffer = -1;   // kState, kResident, kInput: the buffer
  size_t byte_offset = 0;  // kInput: where the host wrote it
  Elem elem = Elem::kF32;
  int64_t elems = 0;
  int node = -1;         // kInput: the host-write node (its bytes are the input)
  double value = 0;      // kScalar: this region's value
  int alias_result = -1;  // results[i] updates this argument in place
  bool host_written = false;  // kState, kResident: the host rewrote it since the last region
};

struct ModuleResult {
  enum class Kind { kState, kHostRead };
  Kind kind = Kind::kState;
  std::string name;
  int32_t buffer = -1;
  size_t byte_offset = 0;  // kHostRead: the range the host read
  Elem elem = Elem::kF32;
  int64_t elems = 0;
  int alias_arg = -1;
};

struct Module {
  std::string name;
  std::string text;      // the StableHLO module
  std::string hash;      // 16 hex digits of FNV-1a over the text
  std::vector<ModuleArg> args;
  std::vector<ModuleResult> results;
  const ModuleArg* arg(const std::string& name) const;
};

/// What the op lowerings use: the writer and the buffers' current values.
class Lowering {
 public:
  explicit Lowering(const Graph& g);
  HloWriter w;

  /// A strided view of a buffer: dims with element strides (innermost stride 1); empty strides
  /// mean contiguous.
  Value read(Ref r, const Dims& dims, Dims strides = {});
  void write(Ref r, const Dims& dims, const Value& v, Dims strides = {});
  /// A host value lifted to a scalar f64 argument (same name in every region: same module).
  Value scalar(const std::string& name, double value);
  Elem elem(Ref r) const;
  /// Elements of the buffer `r` points into.
  int64_t elems(Ref r) const;

  Module finish(const std::string& name);
  void host_write(int node_index, const Node& n);
  void zero(const Node& n);
  void host_read(const Node& n);

 private:
  struct State;
  State& state(int32_t buffer);
  Value box(State& s, int64_t offset, const Dims& dims, const Dims& strides, Dims& box_dims, bool mark_read);
  const Graph& g_;
  std::map<int32_t, State*> states_;
  std::vector<std::unique_ptr<State>> owned_;
  std::vector<ModuleArg> args_;
  std::vector<ModuleResult> results_;
  std::vector<Value> result_values_;
  std::map<std::string, int> scalars_;
};

/// The module of a captured region.
Module lower(const Graph& g);

}  // namespace perceiver::capture
