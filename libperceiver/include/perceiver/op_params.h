// Argument structs of the ops that are specific to the multimodal model or to the optimizers
// (perceiver/backend.h lists every op). Pointers inside them are device memory, allocated by the
// same backend; dimensions are host values. Shape legend: B batch, M input tokens, C input
// channels, O output queries, E query channels, T/H/W frames/height/width, S audio samples.
#pragma once

#include <cstdint>

namespace perceiver {

/// The multimodal input array (spec §3): tokens in sorted modality order (audio, image, label).
/// Audio token a holds samples [a·spp, (a+1)·spp) then its Fourier features and padding; image
/// token (t, h, w) holds its space-to-depth patch, then Fourier features and padding; the label
/// token is one-hot, then padding. A token whose mask byte is 1 is replaced by its modality's
/// mask token.
struct EmbedDims {
  int64_t batch = 0, tokens = 0, channels = 0;              // B, M, C
  int64_t audio_tokens = 0, samples_per_patch = 0, audio_samples = 0, audio_pos = 0;
  int64_t image_tokens = 0, frames = 0, height = 0, width = 0;
  int64_t spatial_downsample = 1, temporal_downsample = 1, image_pos = 0;
  int64_t num_labels = 0;
  int64_t grid_h() const { return height / spatial_downsample; }
  int64_t grid_w() const { return width / spatial_downsample; }
  int64_t patch_values() const { return 3 * temporal_downsample * spatial_downsample * spatial_downsample; }
  int64_t label_begin() const { return audio_tokens + image_tokens; }
};

template <class T>
struct EmbedArgs {
  const T* video = nullptr;          // [B,T,H,W,3]
  const T* audio = nullptr;          // [B,S]
  const int64_t* labels = nullptr;   // [B], in [0, num_labels) (checked on the host before upload)
  const uint8_t* mask = nullptr;     // [B·M]
  const float* pos_audio = nullptr;  // [audio_tokens, audio_pos]
  const float* pos_image = nullptr;  // [image_tokens, image_pos]
  // Parameters: padding [1, C − content width] and mask tokens [1, C] of audio, image, label.
  const T *pad_audio = nullptr, *pad_image = nullptr, *pad_label = nullptr;
  const T *mask_audio = nullptr, *mask_image = nullptr, *mask_label = nullptr;
};

template <class T>
struct EmbedGrads {
  T *pad_audio = nullptr, *pad_image = nullptr, *pad_label = nullptr;
  T *mask_audio = nullptr, *mask_image = nullptr, *mask_label = nullptr;
};

/// The input rows normalised without gain and shift, X̂ = (x − mean)·rstd, as factors F [n, width]
/// of a matrix M_b [width, C] per batch item that the parameters and the item's label give:
/// X̂ = F·M_b. A row's channels past its content are its modality's padding (a masked row's are all
/// its mask token), a vector v shared by the modality's rows, so there X̂ = rstd·v − mean·rstd: two
/// factors per (modality, padding or mask), one times v, one times ones. Audio and image rows keep
/// their content as it is (zeros past their own); a label row's content is one-hot, rstd times the
/// item's label channel (factor `label_content`). Where the modalities' contents are much narrower
/// than C (kinetics700: audio 401 and image 243 channels, padded to the label's 704), attention
/// over F instead of X̂ runs its products over `width` channels rather than C.
/// Layout: the first `narrow` content channels of both modalities, the pairs, the label content,
/// zeros to `narrow_width` (a multiple of 32); then the wider modality's other content channels.
/// Rows of the narrower modality and label rows are zero past `narrow_width` (kinetics700: 256 of
/// 416 for the image rows, 96% of them), so attention over such rows alone needs only those
/// columns (AttentionDims::key_columns).
struct EmbedFactors {
  int64_t narrow = 0, wide = 0;  // the narrower and the wider of the audio and image contents
  int wide_modality = 0;         // 0 audio, 1 image
  int64_t narrow_width = 0, width = 0;
  /// Factor of (modality 0 audio / 1 image / 2 label, padding or mask token): rstd there; the
  /// next one holds −mean·rstd.
  int64_t pair(int modality, bool masked) const { return narrow + 2 * (3 * int64_t(masked) + modality); }
  /// Factor of an unmasked label row's one-hot content: rstd there.
  int64_t label_content() const { return narrow + 12; }
  /// Factor of content channel c (< the row's content width).
  int64_t content(int64_t c) const { return c < narrow ? c : narrow_width + (c - narrow); }
  static EmbedFactors of(const EmbedDims& d) {
    EmbedFactors f;
    const int64_t audio = d.samples_per_patch + d.audio_pos, image = d.patch_values() + d.image_pos;
    f.wide_modality = audio > image ? 0 : 1;
    f.narrow = audio > image ? image : audio;
    f.wide = audio > image ? audio : image;
    f.narrow_width = (f.label_content() + 1 + 31) / 32 * 32;
    f.width = (f.narrow_width + (f.wide - f.narrow) + 15) / 16 * 16;
    return f;
  }
  /// Whether F is narrower than the rows themselves (else attention over X̂ runs fewer FLOPs).
  bool saves(const EmbedDims& d) const { return width < d.channels; }
  /// The columns of F that input tokens [t0, t1) can be nonzero in: narrow_width where none is of
  /// the wider modality, else width.
  int64_t columns(const EmbedDims& d, int64_t t0, int64_t t1) const {
    const int64_t w0 = wide_modality == 0 ? 0 : d.audio_tokens;
    const int64_t w1 = wide_modality == 0 ? d.audio_tokens : d.label_begin();
    return t1 <= w0 || t0 >= w1 ? narrow_width : width;
  }
};

/// Fourier features of subsampled output points, gathered from one table per axis (spec §4.1):
/// axis j's table row c is [pos_c | sin(π·pos_c·f_jk) (K) | cos(π·pos_c·f_jk) (K)] with
/// pos_c = −1 + 2c/dims[j]. A point's features are [pos (d) | sin (d·K) | cos (d·K)].
struct FourierAxes {
  int64_t d = 0;          // 1 (audio) or 3 (image t, y, x)
  int64_t dims[3] = {0, 0, 0};
  int64_t bands = 0;      // K
  int64_t width() const { return d + 2 * d * bands; }
};

/// Decoder queries q [B, O, E] (spec §4.2): audio points, image points, then the label query,
/// each row [Fourier features | padding] (label: [trainable query | padding]), the same for
/// every batch item.
struct QueryDims {
  int64_t batch = 0, num_audio = 0, num_image = 0, channels = 0;  // B, Pa, Pi, E
  int64_t label_channels = 0;
  FourierAxes audio, image;
  int64_t rows() const { return num_audio + num_image + 1; }      // O
};

template <class T>
struct QueryArgs {
  const int64_t* audio_points = nullptr;  // [Pa] audio patch indices
  const int64_t* image_points = nullptr;  // [Pi] flat indices into T×H×W
  const float* audio_axis = nullptr;      // [audio_tokens, 1 + 2K]
  const float* image_axes[3] = {nullptr, nullptr, nullptr};  // [dims[j], 1 + 2K]
  const T *pad_audio = nullptr, *pad_image = nullptr, *pad_label = nullptr, *label_query = nullptr;
};

template <class T>
struct QueryGrads {
  T *pad_audio = nullptr, *pad_image = nullptr, *pad_label = nullptr, *label_query = nullptr;
};

/// The reconstruction targets of the queried points: pixels [B, Pi, 3] and samples [B, Pa·spp].
struct TargetDims {
  int64_t batch = 0, pixels = 0, audio_samples = 0, samples_per_patch = 0;  // pixels = T·H·W
  int64_t num_image = 0, num_audio = 0;
};

/// A contiguous run of one parameter tensor in the flat arenas: the unit of optimizer work.
/// Chunk boundaries depend only on the parameter registry, never on the thread count.
struct OptimChunk {
  int64_t begin = 0, end = 0;  // element range
  int32_t tensor = 0;          // index of the parameter in the registry
  int32_t decayed = 1;         // weight decay applies (is_decayed(role))
};

/// One optimizer update. The hyper-parameters are host values; `chunks`, `grad_sumsq` and
/// `work` are device memory. The update is skipped (nothing changes) when sqrt(*grad_sumsq) is
/// not finite, so the host never has to look at the norm before the step.
struct OptimStep {
  double lr = 0, momentum = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t t = 1;                          // this update's 1-based count (Adam bias correction)
  const OptimChunk* chunks = nullptr;     // [num_chunks]
  int64_t num_chunks = 0, num_tensors = 0;
  const double* grad_sumsq = nullptr;     // Σ grad² of this step (after the allreduce)
  double* work = nullptr;                 // LAMB: [2·num_chunks + 2·num_tensors] partial sums
};

}  // namespace perceiver
