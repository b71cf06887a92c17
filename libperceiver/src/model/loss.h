// The training loss (spec §5, §9): weighted reconstruction of the queried pixels and audio
// patches (L1 as in the paper, or MSE; means over the subsampled elements and the batch) plus
// softmax cross-entropy of the label logits.
#pragma once

#include <string>
#include <type_traits>

#include "model/perceiver_net.h"

namespace perceiver {

struct LossTerms {
  double total = 0, image = 0, audio = 0, label = 0;  // unweighted terms; total is weighted
};

/// The loss from its two config keys: `recon` "l1" or "mse", `weights` "V,A,L" (the video,
/// audio and label weights). Throws naming loss_weights / recon_loss and the bad part.
LossConfig parse_loss_config(const std::string& recon, const std::string& weights);

/// Loss of `out` against the clip's pixels/samples at `pts` and the labels. With `grads`
/// non-null, also writes d(total)/d(outputs) into it (+=; same shapes as `out`).
template <class T>
LossTerms compute_loss(const ModelConfig& cfg, const LossConfig& lc, const DecoderOutputs<T>& out,
                       const OutputPoints& pts, const T* video, const T* audio, const int64_t* labels,
                       Context<T>& ctx, const std::type_identity_t<DecoderOutputs<T>>* grads);

/// The targets compute_loss compares with: pixels [B,Pi,3] and samples [B,Pa·spp].
template <class T>
void gather_targets(const ModelConfig& cfg, const OutputPoints& pts, int64_t batch, const T* video, const T* audio,
                    T* image_targets, T* audio_targets);

}  // namespace perceiver
