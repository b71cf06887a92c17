// The model configuration of PerceiverForMultimodalAutoencoding (spec §1, §10).
// Field names are HF PerceiverConfig names where HF has one; the rest are values HF hard-codes
// in PerceiverForMultimodalAutoencoding. The YAML presets (configs/*.yaml, a top-level `model:`
// mapping) and HF config.json files both map onto this struct.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "perceiver/activation.h"
#include "perceiver/error.h"

namespace perceiver {

/// Parameter initialisation (spec §6).
enum class InitScheme {
  kHuggingFace,  // N(0, 0.02) for weights and embeddings (HF _init_weights)
  kDeepMind,     // Haiku variance scaling / truncated normals
};

enum class ReconLoss { kL1, kMse };

/// The training loss (spec §5): weighted reconstruction of the queried pixels and audio patches
/// (means over the subsampled elements and the batch) plus label cross-entropy.
struct LossConfig {
  ReconLoss recon = ReconLoss::kL1;
  double w_image = 0.03, w_audio = 1.0, w_label = 1e-4;  // paper defaults
};

/// The loss of a pass: unweighted terms and their weighted total.
struct LossValues {
  double total = 0, image = 0, audio = 0, label = 0;
};

struct ModelConfig {
  // ---- HF PerceiverConfig fields (defaults: the released kinetics700 model) ----
  int64_t num_latents = 784;                 // N
  int64_t d_latents = 512;                   // D
  int64_t d_model = 704;                     // C; must equal the derived input width
  int64_t num_blocks = 1;                    // the self-attention block is applied this many times
  int64_t num_self_attends_per_block = 8;
  int64_t num_self_attention_heads = 8;
  int64_t num_cross_attention_heads = 1;
  int64_t qk_channels = 0;                   // 0 = null (spec §2.2 defaults)
  int64_t v_channels = 0;                    // 0 = null
  std::string cross_attention_shape_for_attention = "kv";  // "kv" or "q"
  int64_t self_attention_widening_factor = 1;
  int64_t cross_attention_widening_factor = 1;
  GeluKind hidden_act = GeluKind::kErf;      // "gelu" (erf) or "gelu_new" (tanh)
  double attention_probs_dropout_prob = 0.0;
  double initializer_range = 0.02;
  bool use_query_residual = true;            // encoder cross-attention
  int64_t num_labels = 700;                  // L
  int64_t image_size = 56;                   // patch grid; only the image Fourier max_resolution
  int64_t num_frames = 16;                   // T
  int64_t audio_samples_per_frame = 1920;
  int64_t samples_per_patch = 16;
  std::array<int64_t, 4> output_shape{1, 16, 224, 224};
  int64_t output_num_channels = 512;
  int64_t label_trainable_num_channels = 1024;  // HF "_label_trainable_num_channels"
  // ---- values HF hard-codes ----
  int64_t frame_height = 224, frame_width = 224;
  int64_t spatial_downsample = 4, temporal_downsample = 1;
  int64_t image_fourier_num_bands = 32;
  std::array<int64_t, 3> image_fourier_max_resolution{16, 56, 56};
  int64_t audio_fourier_num_bands = 192;
  int64_t audio_fourier_max_resolution = 30720;
  int64_t input_min_padding_size = 4;
  int64_t decoder_min_padding_size = 2;
  int64_t decoder_num_heads = 1;
  int64_t decoder_widening_factor = 1;
  bool decoder_use_query_residual = false;
  double ln_eps = 1e-5;                      // HF's layer_norm_eps (1e-12) is never used
  double mask_prob_image = 0.0, mask_prob_audio = 0.0, mask_prob_label = 1.0;
  // Training: subsampled decoder queries per step. The readers lower an unset one to what the
  // model has (pixels(), audio_tokens()) when that is fewer; a value set explicitly must fit.
  int64_t num_queries_image = 512;           // pixel queries
  int64_t num_queries_audio = 512;           // audio-patch queries

  // ---- derived sizes ----
  int64_t audio_samples() const { return num_frames * audio_samples_per_frame; }      // S
  int64_t audio_tokens() const { return audio_samples() / samples_per_patch; }
  int64_t image_grid_t() const { return num_frames / temporal_downsample; }
  int64_t image_grid_h() const { return frame_height / spatial_downsample; }
  int64_t image_grid_w() const { return frame_width / spatial_downsample; }
  int64_t image_tokens() const { return image_grid_t() * image_grid_h() * image_grid_w(); }
  int64_t pixels() const { return num_frames * frame_height * frame_width; }
  int64_t patch_values() const { return 3 * temporal_downsample * spatial_downsample * spatial_downsample; }
  int64_t image_pos_channels() const { return 3 + 6 * image_fourier_num_bands; }
  int64_t audio_pos_channels() const { return 1 + 2 * audio_fourier_num_bands; }
  int64_t image_in_channels() const { return patch_values() + image_pos_channels(); }
  int64_t audio_in_channels() const { return samples_per_patch + audio_pos_channels(); }
  int64_t input_channels() const;   // C
  int64_t query_channels() const;   // E
  int64_t input_tokens() const { return audio_tokens() + image_tokens() + 1; }  // M

  /// Refuses inconsistent configs with a message naming the key and value. Every integer key
  /// must be at most 2^20, and the sizes they make (pixels, audio samples, widths, parameters)
  /// at most 2^40, so that no derived size overflows.
  void validate() const;
  /// Number of trainable parameters this config gives (spec §7).
  int64_t num_parameters() const;
};

/// Reads the `model:` mapping of a YAML file (our presets). Keys not given keep the kinetics700
/// defaults; unknown, repeated or non-scalar keys, wrong types and invalid values throw, naming
/// the file and key (and the line where it helps).
ModelConfig model_config_from_yaml(const std::string& path);
/// Reads an HF config.json of PerceiverForMultimodalAutoencoding; fields HF hard-codes take
/// HF's values (derived from num_frames, image_size, ... as HF does), and d_model, which HF
/// does not read for this model, is the derived input width.
ModelConfig model_config_from_hf_json(const std::string& path);
/// By extension: .json → HF config, otherwise YAML.
ModelConfig load_model_config(const std::string& path);
/// model_config_from_yaml of YAML text (e.g. stored in a checkpoint); `source` names it in errors.
ModelConfig model_config_from_yaml_text(const std::string& text, const std::string& source);

/// Every key of the config as (name, YAML value text), in preset order; the names are the YAML
/// keys the readers take.
std::vector<std::pair<std::string, std::string>> model_config_entries(const ModelConfig& c);
/// A `model:` document holding every key, which model_config_from_yaml_text reads back equal.
std::string model_config_yaml(const ModelConfig& c);
/// "key: <a's value> vs <b's value>" for each key where the two configs differ.
std::vector<std::string> model_config_differences(const ModelConfig& a, const ModelConfig& b);

}  // namespace perceiver
