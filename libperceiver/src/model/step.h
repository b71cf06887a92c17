// One pass of the multimodal network for training or evaluation, and full-output decoding.
// Shared by perceiver::Model, the trainer and the evaluator.
#pragma once

#include <vector>

#include "model/loss.h"

namespace perceiver {

/// encode → decode(pts) → loss; with `backward`, also the loss gradient and the backward pass
/// (parameter gradients accumulate). The host inputs are uploaded once; the loss terms
/// [image, audio, label] go to `terms` (kLossTermCount device doubles) and stay on the device.
/// `mode` is the pass's train mode (attention dropout keyed by seed, step and the first example
/// index, as draw_masks); the net's context is back in its previous mode afterwards. A backward
/// pass of a model with attention_probs_dropout_prob > 0 needs mode.training.
void enqueue_step(PerceiverNet<float>& net, const float* video, const float* audio, const int64_t* labels,
                  int64_t batch, const OutputPoints& pts, const std::vector<uint8_t>& mask, const LossConfig& loss,
                  bool backward, double* terms, const TrainingMode& mode = {}, const GradsReady& ready = {});

/// enqueue_step with the loss read back at once. `label_logits`, when given, receives the
/// logits [B, L].
LossValues run_step(PerceiverNet<float>& net, const float* video, const float* audio, const int64_t* labels,
                   int64_t batch, const OutputPoints& pts, const std::vector<uint8_t>& mask, const LossConfig& loss,
                   bool backward, std::vector<float>* label_logits = nullptr, const TrainingMode& mode = {},
                   const GradsReady& ready = {});

/// After encode(): every pixel [B,T,H,W,3], every audio sample [B,S] and the label logits [B,L],
/// decoded in `chunks` passes (bounded decoder memory) and copied to the host.
void decode_everything(PerceiverNet<float>& net, int64_t chunks, std::vector<float>& video, std::vector<float>& audio,
                       std::vector<float>& label_logits);

}  // namespace perceiver
