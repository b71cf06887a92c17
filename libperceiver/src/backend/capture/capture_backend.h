// The "capture" backend: records the op stream of a training step instead of executing it
// (graph.h), so that the step can be lowered to StableHLO (lowering.h) and compiled ahead of
// time by XLA (jaxlib on the CPU in the tests; neuronx-cc for Trainium, deploy/neuron/).
//
// Memory is plain host memory owned by the recorder (anonymous mappings that cost nothing until
// touched), so capture runs anywhere. Host copies really copy (the recorder keeps the initial
// parameters, the position tables and the optimizer's chunk list), but no op computes anything:
// what the host reads back inside a region is whatever the memory held.
//
// A region is begin() ... end(): host copies inside it are graph inputs and outputs. With
// auto_regions (perceiver-export, the neuron driver) the first op after end() opens the next
// region, so the host's uploads before it (the batch, zeroed gradients, a loaded checkpoint)
// are plain writes of resident buffers, listed in Graph::host_written; without it ops outside
// a region are refused. Attention dropout is refused: its Philox masks have no XLA lowering here.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backend/capture/graph.h"
#include "perceiver/backend.h"

namespace perceiver::capture {

class Recorder;

class CaptureBackend : public Backend {
 public:
  CaptureBackend();
  ~CaptureBackend() override;
  std::string name() const override { return "capture"; }
  std::string describe() const override;
  Buffer allocate(size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}
  void* handle() const override;
  void name_buffer(const void* data, std::string_view name) override;
  const KernelTable<float>& kernels_f32() const override;

  /// Starts recording a region named `name` (refused while one is open).
  void begin(const std::string& name);
  bool recording() const;
  /// Ends the region and hands over its graph.
  Graph end();
  /// The bytes of `buffer` at the start of `g` (for arguments the region reads before writing).
  std::vector<uint8_t> entry_bytes(const Graph& g, int32_t buffer) const;
  /// The buffer at `p` (throws when p is not this backend's memory).
  int32_t buffer_of(const void* p) const;
  /// Open a region on the first op instead of refusing ops outside one.
  void set_auto_regions(bool on);

 protected:
  Recorder& recorder() const { return *rec_; }

 private:
  std::unique_ptr<Recorder> rec_;
};

/// The recorder behind the handle that every captured op receives.
class Recorder {
 public:
  Recorder();
  ~Recorder();

  int32_t add_buffer(void* base, size_t bytes);
  void remove_buffer(void* base);
  void set_name(const void* p, std::string_view name);
  /// The buffer containing [p, p + bytes) and the byte offset of p in it.
  std::pair<int32_t, size_t> locate(const void* p, size_t bytes, const char* what) const;
  /// A typed reference: fixes or checks the buffer's element type.
  Ref ref(const void* p, Elem e, const char* op);
  const BufferInfo& info(int32_t id) const;

  void begin(const std::string& name);
  Graph end();
  bool recording() const { return recording_; }
  void set_auto_regions(bool on) { auto_regions_ = on; }
  /// Appends an op (opens a region in auto mode, refuses otherwise when none is open).
  void op(const char* name, std::function<void(Lowering&)> lower, std::vector<int32_t> touches);
  void host_write(void* dst, const void* src, size_t bytes);
  void host_zero(void* dst, size_t bytes);
  void host_read(const void* src, size_t bytes);
  std::vector<uint8_t> entry_bytes(const Graph& g, int32_t id) const;
  /// Called with a buffer's id when it is freed (a device backend frees its twin).
  std::function<void(int32_t)> on_free;
  /// Whether an op ever wrote the buffer (then the host memory no longer holds its value).
  bool op_written(int32_t id) const { return op_written_.count(id) != 0; }
  /// The host memory of a live buffer.
  uint8_t* base(int32_t id) const { return reinterpret_cast<uint8_t*>(bases_.at(id)); }

 private:
  struct Alloc {
    int32_t id;
    size_t bytes;
  };
  void copy_on_write(int32_t id);
  void mark_dirty(int32_t id);
  void open_region_for(const char* op);
  std::map<uintptr_t, Alloc> allocs_;         // base address → allocation
  std::map<int32_t, BufferInfo> infos_;       // live buffers (and the region's dead ones until end())
  std::map<int32_t, uintptr_t> bases_;
  std::map<int32_t, bool> op_written_;        // an op wrote it (after that its bytes here are stale)
  std::vector<int32_t> host_dirty_;           // written by the host outside a region since the last one
  int32_t next_id_ = 0;
  bool recording_ = false, auto_regions_ = false;
  Graph graph_;
};

}  // namespace perceiver::capture
