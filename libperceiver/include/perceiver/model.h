// The library's front door for researchers: build the multimodal Perceiver IO autoencoder from a
// config, load or save weights by HF name, run a training step, classify, reconstruct.
//
//   perceiver::Model model(perceiver::load_model_config("configs/small.yaml"));
//   model.load_weights("model.safetensors");            // optional: HF names, F32/F16/BF16
//   perceiver::BatchView batch{video, audio, labels, 4};     // [B,T,H,W,3] in [0,1], [B,S], [B]
//   model.zero_grad();
//   auto loss = model.train_step(batch, step);           // forward + backward; gradients accumulate
//   // ... update model.parameters() from model.gradients() (flat arrays, same layout)
//   auto logits = model.classify(batch);                 // [B, num_labels], label masked
//   auto rec = model.reconstruct(batch);                 // every pixel and sample, decoded in chunks
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "perceiver/config.h"
#include "perceiver/error.h"

namespace perceiver {

/// One batch in the model's layout (pointers are borrowed, not copied).
struct BatchView {
  const float* video = nullptr;     // [B, T, H, W, 3], values in [0, 1]
  const float* audio = nullptr;     // [B, T·audio_samples_per_frame], mono
  const int64_t* labels = nullptr;  // [B], class indices
  int64_t size = 0;                 // B
};

struct Reconstruction {
  std::vector<float> video;         // [B, T, H, W, 3]
  std::vector<float> audio;         // [B, S]
  std::vector<float> label_logits;  // [B, L]
};

/// A parameter: its HF state_dict name, shape and place in the flat arrays.
struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
};

class Model {
 public:
  /// Initialises every parameter from `seed` (HF's N(0, 0.02) by default) on `device` ("cpu",
  /// or another backend of this build; see perceiver/backend.h make_backend).
  explicit Model(const ModelConfig& cfg, uint64_t seed = 0, InitScheme init = InitScheme::kHuggingFace,
                 const std::string& device = "cpu");
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelConfig& config() const;
  int64_t num_parameters() const;
  std::vector<ParameterInfo> parameter_info() const;
  /// The device this model runs on ("cpu", ...).
  std::string device() const;
  /// Flat parameter and gradient arrays with one layout (see parameter_info for the offsets),
  /// in place. Only where the device's memory is host memory (cpu); elsewhere they throw and
  /// the copies below are the way.
  std::span<float> parameters();
  std::span<float> gradients();
  /// Copies of the flat arrays on the host, and writing parameters back (any device).
  std::vector<float> read_parameters() const;
  std::vector<float> read_gradients() const;
  void write_parameters(std::span<const float> values);
  void zero_grad();

  /// .safetensors (HF names; F32/F16/BF16) or our HDF5 checkpoint; throws naming any missing,
  /// unexpected or mis-shaped tensor.
  void load_weights(const std::string& path);
  /// .safetensors, or .h5/.hdf5 for HDF5, by extension (another name throws); written atomically.
  void save_weights(const std::string& path);

  /// One training forward + backward pass. Output points (config num_queries_*) are drawn from
  /// the (seed, step) stream and shared by the batch; input masks from (seed, step, example),
  /// where example = first_example + b, so data-parallel ranks reproduce a single large batch.
  /// Runs in train mode: attention dropout (attention_probs_dropout_prob) masks come from
  /// (seed, step, example) the same way. Gradients accumulate; call zero_grad() first.
  LossValues train_step(const BatchView& batch, int64_t step, const LossConfig& loss = {}, int64_t first_example = 0);
  /// Loss without backward, on the same draws as train_step, in eval mode (no dropout), as are
  /// classify() and reconstruct(). These three run forward only and keep nothing for a backward
  /// pass (on the CPU ~73 MB per kinetics700 example, against ~630 MB in a training step); their
  /// results match a training pass's forward to float rounding, not bitwise.
  LossValues evaluate_loss(const BatchView& batch, int64_t step, const LossConfig& loss = {}, int64_t first_example = 0);
  /// Label logits [B, L] with the label input masked (the classifier use).
  std::vector<float> classify(const BatchView& batch);
  /// Every pixel and audio sample (label masked), decoded in `chunks` passes so that decoder
  /// memory stays bounded (the colab uses 128 for kinetics700); more chunks than the larger
  /// modality has points run as that many.
  Reconstruction reconstruct(const BatchView& batch, int64_t chunks = 128);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perceiver
