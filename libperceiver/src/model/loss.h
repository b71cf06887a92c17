// The training loss (spec §5, §9): weighted reconstruction of the queried pixels and audio
// patches (L1 as in the paper, or MSE; means over the subsampled elements and the batch) plus
// softmax cross-entropy of the label logits. The terms are computed by the backend into device
// doubles; the host reads them once per step.
#pragma once

#include <string>
#include <type_traits>

#include "model/perceiver_net.h"

namespace perceiver {

/// Number of device doubles one pass's loss terms occupy: image, audio, label.
inline constexpr int kLossTermCount = 3;

/// The loss from its two config keys: `recon` "l1" or "mse", `weights` "V,A,L" (the video,
/// audio and label weights). Throws naming loss_weights / recon_loss and the bad part.
LossConfig parse_loss_config(const std::string& recon, const std::string& weights);

/// The weighted total of terms [image, audio, label] read from the device.
LossValues loss_terms(const double* terms, const LossConfig& lc);

/// Loss of the net's last decode against the inputs of its last encode: writes the terms
/// [image, audio, label] to `terms` (kLossTermCount device doubles) and, with `grads` non-null,
/// adds d(total)/d(outputs) to it (same shapes as the outputs, device memory).
template <class T>
void loss_forward_backward(PerceiverNet<T>& net, const LossConfig& lc, const DecoderOutputs<T>& out,
                           const std::type_identity_t<DecoderOutputs<T>>* grads, double* terms);

/// The same, read back to the host at once (tests, tools).
template <class T>
LossValues compute_loss(PerceiverNet<T>& net, const LossConfig& lc, const DecoderOutputs<T>& out,
                       const std::type_identity_t<DecoderOutputs<T>>* grads);

}  // namespace perceiver
