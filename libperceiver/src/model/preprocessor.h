// MultimodalPreprocessor (spec §3, HF PerceiverMultimodalPreprocessor): video, audio and label
// become one token array x [B, M, C] in sorted modality order (audio, image, label):
//   audio  [B, S]          -> patches of samples_per_patch  | Fourier(1-D)  | padding.audio
//   image  [B, T, H, W, 3] -> space-to-depth patches         | Fourier(3-D)  | padding.image
//   label  [B] (class ids) -> one-hot [L]                    |               | padding.label
// then each token is replaced by its modality's mask token where the mask says so. The math is
// the backend's embed op (op_params.h EmbedDims); this file holds the parameters, the constant
// position features and the op's arguments.
// Parameters (HF names under "perceiver.input_preprocessor."): padding.{audio,image,label}
// [1, C − c_m] and mask.{audio,image,label} [1, C]. The data inputs get no gradient.
#pragma once

#include <vector>

#include "core/context.h"
#include "core/params.h"
#include "layers/bind.h"
#include "layers/layer_norm.h"
#include "perceiver/config.h"

namespace perceiver {

/// Token ranges of the sorted modalities inside x.
struct ModalityLayout {
  int64_t audio_begin, audio_count, image_begin, image_count, label_begin;
  explicit ModalityLayout(const ModelConfig& c)
      : audio_begin(0), audio_count(c.audio_tokens()), image_begin(c.audio_tokens()),
        image_count(c.image_tokens()), label_begin(c.audio_tokens() + c.image_tokens()) {}
};

std::vector<ParamSpec> preprocessor_param_specs(const ModelConfig& cfg);

template <class T>
struct PreprocessorParams {
  ConstView<T> pad_audio, pad_image, pad_label, mask_audio, mask_image, mask_label;
  static PreprocessorParams bind(const ParamBinder<T>& b);
};
template <class T>
struct PreprocessorGrads {
  TensorView<T> pad_audio, pad_image, pad_label, mask_audio, mask_image, mask_label;
  static PreprocessorGrads bind(const ParamBinder<T>& b);
};

/// The constant position features of the input tokens, computed once on the host per config
/// and uploaded to the backend.
struct PositionTables {
  Arena<float> audio;  // [audio_tokens, audio_pos_channels]
  Arena<float> image;  // [image_tokens, image_pos_channels]
  PositionTables(Backend& backend, const ModelConfig& cfg);
};

/// The embed op's dimensions for a batch of B.
EmbedDims embed_dims(const ModelConfig& cfg, int64_t batch);

/// Rows [row0, row0 + n) of x [B,M,C] seen as [B·M, C], into x_rows [n, C], from the device
/// inputs video [B,T,H,W,3], audio [B,S], labels [B], mask [B·M]. The encoder asks for its input
/// a chunk at a time (in forward and again in backward), so x is never stored whole.
template <class T>
void preprocessor_forward_rows(const ModelConfig& cfg, const PositionTables& pos, const PreprocessorParams<T>& p,
                               const T* video, const T* audio, const int64_t* labels, const uint8_t* mask,
                               int64_t batch, int64_t row0, TensorView<T> x_rows, Context<T>& ctx);

/// The same rows layer-normalised (γ, β of p_norm, eps) into y, with their mean and rstd, in one
/// pass: bitwise layer_norm_forward of preprocessor_forward_rows' rows. Needs
/// Kernels::embeds_normalised. y16 (optional; Kernels::stores_bf16): the same rows rounded to bf16
/// as well; y may then have its shape only (no data), and the float rows are never written.
template <class T>
void preprocessor_forward_normalised_rows(const ModelConfig& cfg, const PositionTables& pos,
                                          const PreprocessorParams<T>& p, const T* video, const T* audio,
                                          const int64_t* labels, const uint8_t* mask, int64_t batch, int64_t row0,
                                          const LayerNormParams<T>& p_norm, double eps, TensorView<T> y,
                                          uint16_t* y16, T* mean, T* rstd, Context<T>& ctx);

/// The factors of those rows normalised without gain and shift (EmbedFactors), into f [n, width]
/// (or with f16 as bf16 only), their mean and rstd; with Kernels::embeds_factors. input_factors:
/// the layout at this config (width 0 where the rows would not be narrower as factors).
EmbedFactors input_factors(const ModelConfig& cfg, int64_t batch);
/// The factors' columns that input tokens [token0, token0 + n) can be nonzero in
/// (EmbedFactors::columns).
int64_t input_factor_columns(const ModelConfig& cfg, int64_t batch, int64_t token0, int64_t n);
template <class T>
void preprocessor_forward_factors(const ModelConfig& cfg, const PositionTables& pos, const PreprocessorParams<T>& p,
                                  const T* video, const T* audio, const int64_t* labels, const uint8_t* mask,
                                  int64_t batch, int64_t row0, double eps, TensorView<T> f, uint16_t* f16, T* mean,
                                  T* rstd, Context<T>& ctx);
/// M [B, width, C] with X̂ = F·M_b for item b, from the current padding and mask tokens and the
/// items' labels [B] (device).
template <class T>
void preprocessor_factor_matrix(const ModelConfig& cfg, const PreprocessorParams<T>& p, const int64_t* labels,
                                int64_t batch, TensorView<T> m, Context<T>& ctx);

/// Padding and mask-token gradients (+=) from rows [row0, row0 + n) of dx seen as [B·M, C], so
/// the encoder can hand its input gradient over a chunk at a time.
template <class T>
void preprocessor_backward_rows(const ModelConfig& cfg, int64_t batch, const uint8_t* mask, int64_t row0,
                                ConstView<T> dx_rows, const PreprocessorGrads<T>& g, Context<T>& ctx);

/// The encoder input's rows by the parameters their gradient feeds (KvGradGroups): groups 0, 1, 2
/// are the unmasked audio, image and label rows (their padding), 3, 4, 5 the masked ones (their
/// mask token). One id per row of x [B,M,C] seen as [B·M, C], from the mask [B·M], into `ids`
/// (resized to B·M; a reused vector allocates nothing once large enough).
inline constexpr int64_t kInputGradGroups = 6;
void input_grad_groups(const ModelConfig& cfg, int64_t batch, const std::vector<uint8_t>& mask,
                       std::vector<uint8_t>& ids);

/// Padding and mask-token gradients (+=) from the input gradient's sums over those groups,
/// sums [kInputGradGroups, C]: what preprocessor_backward_rows adds up from all the rows.
template <class T>
void preprocessor_backward_sums(const ModelConfig& cfg, ConstView<T> sums, const PreprocessorGrads<T>& g,
                                Context<T>& ctx);

}  // namespace perceiver
