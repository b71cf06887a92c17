#include "model/flops.h"

namespace perceiver {
namespace {

// The channels the folded input attention's products run over: C, or over factors the columns
// they ran over (kv_factor_columns), else the factors' width.
double input_product_columns(const ModelConfig& c, bool folded_kv, int64_t kv_factor_width, double kv_factor_columns) {
  if (!folded_kv || kv_factor_width <= 0) return double(c.input_channels());
  return kv_factor_columns > 0 ? kv_factor_columns : double(kv_factor_width);
}

}  // namespace

double forward_flops(const ModelConfig& c, int64_t batch, int64_t pi, int64_t pa, bool folded_kv,
                     int64_t kv_factor_width, double kv_factor_columns) {
  const double N = double(c.num_latents), D = double(c.d_latents), C = double(c.input_channels());
  const double M = double(c.input_tokens()), E = double(c.query_channels()), F = double(c.output_num_channels);
  const double O = double(pi + pa + 1);
  const bool kv = c.cross_attention_shape_for_attention == "kv";
  const double enc_qk = c.qk_channels ? double(c.qk_channels) : (kv ? C : D);
  const double enc_v = c.v_channels ? double(c.v_channels) : enc_qk;
  const double self_qk = c.qk_channels ? double(c.qk_channels) : D, self_v = c.v_channels ? double(c.v_channels) : self_qk;
  const double dec_qk = kv ? D : E;
  // Multiply-adds of each part.
  // Folded: Q·W_k, the attention over the C-wide inputs themselves, and the value projection of its
  // N output rows, instead of projecting K and V over all M input rows.
  // Over factors: the attention's products over K columns of them (of W), and its queries and
  // output taken to and from them.
  const bool factors = folded_kv && kv_factor_width > 0;
  const double W = factors ? double(kv_factor_width) : C;
  const double K = input_product_columns(c, folded_kv, kv_factor_width, kv_factor_columns);
  const double to_factors = factors ? 2 * N * C * W : 0;
  const double cross_attention = folded_kv ? N * enc_qk * C + 2 * N * M * K + to_factors + N * C * enc_v
                                           : M * C * (enc_qk + enc_v) + N * M * (enc_qk + enc_v);
  const double encoder = N * D * enc_qk + cross_attention + N * enc_v * D +
                         2 * N * D * D * double(c.cross_attention_widening_factor);
  const double latent = double(c.num_blocks * c.num_self_attends_per_block) *
                        (N * D * (2 * self_qk + self_v) + N * self_v * self_v + N * N * (self_qk + self_v) +
                         2 * N * self_v * self_v * double(c.self_attention_widening_factor));
  const double decoder = O * E * dec_qk + N * D * 2 * dec_qk + O * N * 2 * dec_qk + O * dec_qk * E +
                         2 * O * E * E * double(c.decoder_widening_factor) + O * E * F +
                         double(pa) * F * double(c.samples_per_patch) + double(pi) * F * 3 + F * double(c.num_labels);
  return 2.0 * double(batch) * (encoder + latent + decoder);
}

double training_flops(const ModelConfig& c, int64_t batch, int64_t image_queries, int64_t audio_queries,
                      bool folded_kv, bool summed_input_grad, int64_t kv_factor_width, double kv_factor_columns) {
  const double full =
      3.0 * forward_flops(c, batch, image_queries, audio_queries, folded_kv, kv_factor_width, kv_factor_columns);
  if (!folded_kv || !summed_input_grad) return full;
  // The folded input attention's backward is then dP = dO·Xᵀ and dQ = dS·X, N·M·K multiply-adds each
  // (K: C, or the factors' columns).
  const double K = input_product_columns(c, folded_kv, kv_factor_width, kv_factor_columns);
  return full - 2.0 * double(batch) * 2 * double(c.num_latents) * double(c.input_tokens()) * K;
}

}  // namespace perceiver
