// --device neuron: AWS Trainium through libnrt (dlopen'ed; nrt_api.h), running whole compiled
// training steps instead of single ops.
//
// It is the capture backend with a device behind it. Ops are recorded (nothing runs op by op);
// the first op after the host last synchronised opens a graph, and the host's next read (the
// trainer's one download of the step's statistics) or synchronize() closes it: the graph is
// lowered to StableHLO, named by the hash of its text, and the NEFF that neuronx-cc compiled
// from that module (perceiver-export + deploy/neuron/compile-neffs.sh) is loaded once from
// $PERCEIVER_NEFF_DIR/<hash>.neff and executed. Every buffer a graph reads or updates in place
// (parameters, gradients, optimizer states, position tables, the batch) has a device twin that
// lives as long as the buffer: host writes go through to it, graphs update it in place, host
// reads come from it. So the trainer, its loader, logging, checkpoints and resume run unchanged.
//
// One NeuronCore (BackendOptions::device_index, default 0). Several cores are a later step: a
// per-core copy of the step with the gradient allreduce as collectives in the graph
// (nrt_load_collectives); nothing here assumes a single core beyond the core index.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backend/capture/capture_backend.h"
#include "backend/capture/lowering.h"
#include "backend/neuron/nrt_api.h"

namespace perceiver::neuron {

class NeuronBackend final : public capture::CaptureBackend {
 public:
  explicit NeuronBackend(const BackendOptions& options);
  ~NeuronBackend() override;
  std::string name() const override { return "neuron"; }
  std::string describe() const override;
  void zero(void* dst, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;

  /// Where NEFFs are looked up: $PERCEIVER_NEFF_DIR, else ./neff.
  static std::filesystem::path neff_dir();
  /// Graphs executed so far.
  int64_t executions() const { return executions_; }

 private:
  struct Loaded {
    NrtModel* model = nullptr;
    std::vector<std::string> inputs, outputs;   // the NEFF's tensor names, in module order
    std::vector<NrtTensor*> staging_in, staging_out;  // per argument/result that is not resident
  };
  class TensorSet;
  void run(const capture::Graph& g);
  Loaded& load(const capture::Module& m);
  void match_tensors(const capture::Module& m, const std::filesystem::path& neff, Loaded& l);
  NrtTensor* twin(int32_t buffer, bool upload);
  NrtTensor* staging(std::vector<NrtTensor*>& slots, size_t index, size_t bytes, const std::string& name);
  void release(int32_t buffer);

  NrtApi api_;
  int core_ = 0;
  std::filesystem::path dir_;
  std::map<std::string, Loaded> models_;  // by module hash
  std::map<int32_t, NrtTensor*> twins_;   // device copies of buffers
  int64_t executions_ = 0;
};

}  // namespace perceiver::neuron
