// The parity/debug entry point behind `perceiver-eval --inputs in.h5 --dump out.h5`: one forward
// and backward pass in eval mode on given inputs and output points, with every output, loss term
// and parameter gradient written by HF name, so a port can be checked tensor by tensor.
//
// in.h5:  video f32 [B,T,H,W,3], audio f32 [B,S], label i64 [B], subsample/image i64 (flat
//         row-major over T×H×W), subsample/audio i64 (audio patch indices); optional
//         masks/{audio,image,label} [B, tokens] (0/1) to force the input masks.
// out.h5: logits/image [B,Pi,3], logits/audio [B,Pa·spp], logits/label [B,L], loss,
//         loss_terms/{image,audio,label} (unweighted), grads/<HF name>, intermediate/{x,z}.
#pragma once

#include <string>

#include "model/loss.h"

namespace perceiver {

/// Without masks in the inputs, each modality's mask follows its probability in the config:
/// 0 and 1 need no randomness; in between, tokens are drawn from the (seed, kMask) stream.
LossValues forward_backward_dump(PerceiverNet<float>& net, const std::string& inputs_path,
                                const std::string& dump_path, const LossConfig& loss, uint64_t seed = 0);

}  // namespace perceiver
