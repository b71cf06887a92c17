// ModelConfig: derived sizes, validation, and the YAML / HF config.json readers.
#include "perceiver/config.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "perceiver/error.h"

namespace perceiver {

int64_t ModelConfig::input_channels() const {
  return std::max({image_in_channels(), audio_in_channels(), num_labels}) + input_min_padding_size;
}

int64_t ModelConfig::query_channels() const {
  return std::max({image_pos_channels(), audio_pos_channels(), label_trainable_num_channels}) +
         decoder_min_padding_size;
}

namespace {

void need(bool ok, const std::string& key, const std::string& what) {
  PCV_CHECK(ok, "invalid model config: ", key, ": ", what);
}

void need_positive(int64_t v, const char* key) { need(v > 0, key, "must be positive, got " + std::to_string(v)); }

}  // namespace

void ModelConfig::validate() const {
  for (auto [v, k] : {std::pair{num_latents, "num_latents"}, {d_latents, "d_latents"}, {num_blocks, "num_blocks"},
                      {num_self_attends_per_block, "num_self_attends_per_block"},
                      {num_self_attention_heads, "num_self_attention_heads"},
                      {num_cross_attention_heads, "num_cross_attention_heads"}, {num_labels, "num_labels"},
                      {num_frames, "num_frames"}, {audio_samples_per_frame, "audio_samples_per_frame"},
                      {samples_per_patch, "samples_per_patch"}, {output_num_channels, "output_num_channels"},
                      {label_trainable_num_channels, "_label_trainable_num_channels"},
                      {frame_height, "frame_height"}, {frame_width, "frame_width"},
                      {spatial_downsample, "spatial_downsample"}, {temporal_downsample, "temporal_downsample"},
                      {image_fourier_num_bands, "image_fourier_num_bands"},
                      {audio_fourier_num_bands, "audio_fourier_num_bands"}, {decoder_num_heads, "decoder_num_heads"},
                      {self_attention_widening_factor, "self_attention_widening_factor"},
                      {cross_attention_widening_factor, "cross_attention_widening_factor"},
                      {decoder_widening_factor, "decoder_widening_factor"}})
    need_positive(v, k);
  need(frame_height % spatial_downsample == 0, "frame_height",
       std::to_string(frame_height) + " is not divisible by spatial_downsample " + std::to_string(spatial_downsample));
  need(frame_width % spatial_downsample == 0, "frame_width",
       std::to_string(frame_width) + " is not divisible by spatial_downsample " + std::to_string(spatial_downsample));
  need(num_frames % temporal_downsample == 0, "num_frames",
       std::to_string(num_frames) + " is not divisible by temporal_downsample " + std::to_string(temporal_downsample));
  need(num_frames / temporal_downsample >= 2, "num_frames",
       "T/temporal_downsample must be >= 2 (both reference codebases squeeze a single time step, spec §3.2)");
  need(audio_samples() % samples_per_patch == 0, "samples_per_patch",
       std::to_string(samples_per_patch) + " does not divide the " + std::to_string(audio_samples()) + " audio samples");
  need(d_model == input_channels(), "d_model",
       std::to_string(d_model) + " but the preprocessed input width is " + std::to_string(input_channels()));
  need(cross_attention_shape_for_attention == "kv" || cross_attention_shape_for_attention == "q",
       "cross_attention_shape_for_attention", "'" + cross_attention_shape_for_attention + "' is not kv or q");
  const int64_t self_qk = qk_channels ? qk_channels : d_latents;
  need(self_qk % num_self_attention_heads == 0, "num_self_attention_heads",
       std::to_string(num_self_attention_heads) + " does not divide the self-attention width " + std::to_string(self_qk));
  const int64_t cross_qk =
      qk_channels ? qk_channels : (cross_attention_shape_for_attention == "kv" ? d_model : d_latents);
  need(cross_qk % num_cross_attention_heads == 0, "num_cross_attention_heads",
       std::to_string(num_cross_attention_heads) + " does not divide the cross-attention width " + std::to_string(cross_qk));
  need(d_latents % decoder_num_heads == 0, "decoder_num_heads",
       std::to_string(decoder_num_heads) + " does not divide the decoder attention width " + std::to_string(d_latents));
  need(output_shape[1] == num_frames && output_shape[2] == frame_height && output_shape[3] == frame_width,
       "output_shape", "must be [1, num_frames, frame_height, frame_width]");
  need(attention_probs_dropout_prob >= 0 && attention_probs_dropout_prob < 1, "attention_probs_dropout_prob",
       "must be in [0, 1)");
  need(ln_eps > 0, "ln_eps", "must be positive");
  for (auto [p, k] : {std::pair{mask_prob_image, "mask_prob_image"}, {mask_prob_audio, "mask_prob_audio"},
                      {mask_prob_label, "mask_prob_label"}})
    need(p >= 0 && p <= 1, k, "must be in [0, 1], got " + std::to_string(p));
  need(num_queries_image >= 0 && num_queries_image <= pixels(), "num_queries_image",
       "must be in [0, " + std::to_string(pixels()) + "]");
  need(num_queries_audio >= 0 && num_queries_audio <= audio_tokens(), "num_queries_audio",
       "must be in [0, " + std::to_string(audio_tokens()) + "]");
}

// spec §7 arithmetic for any config.
int64_t ModelConfig::num_parameters() const {
  auto linear = [](int64_t i, int64_t o) { return i * o + o; };
  auto ln = [](int64_t d) { return 2 * d; };
  const int64_t C = input_channels(), D = d_latents, E = query_channels();
  auto block = [&](int64_t q, int64_t kv, bool cross, int64_t qk, int64_t v, int64_t out, int64_t wf) {
    int64_t n = ln(q) + (cross ? ln(kv) : 0) + linear(q, qk) + linear(cross ? kv : q, qk) + linear(cross ? kv : q, v) +
                linear(v, out) + ln(out) + linear(out, wf * out) + linear(wf * out, out);
    return n;
  };
  const bool kv_shape = cross_attention_shape_for_attention == "kv";
  const int64_t enc_qk = qk_channels ? qk_channels : (kv_shape ? C : D);
  const int64_t enc_v = v_channels ? v_channels : enc_qk;
  const int64_t self_qk = qk_channels ? qk_channels : D, self_v = v_channels ? v_channels : self_qk;
  const int64_t dec_qk = kv_shape ? D : E;
  int64_t n = (C - image_in_channels()) + (C - audio_in_channels()) + (C - num_labels) + 3 * C;  // pads, masks
  n += num_latents * D;
  n += block(D, C, true, enc_qk, enc_v, D, cross_attention_widening_factor);
  n += num_self_attends_per_block * block(D, D, false, self_qk, self_v, self_v, self_attention_widening_factor);
  n += (E - image_pos_channels()) + (E - audio_pos_channels()) + (E - label_trainable_num_channels) +
       label_trainable_num_channels;
  n += block(E, D, true, dec_qk, dec_qk, E, decoder_widening_factor);
  n += linear(E, output_num_channels);
  n += linear(output_num_channels, samples_per_patch) + linear(output_num_channels, 3) +
       linear(output_num_channels, num_labels);
  return n;
}

// ---- readers --------------------------------------------------------------------------------

namespace {

// One setter per key; each converts and type-checks its value and names the key on failure.
using Setter = std::function<void(ModelConfig&, const YAML::Node&)>;

template <class T>
T scalar(const YAML::Node& n, const std::string& key) {
  PCV_CHECK(n.IsScalar(), "model config key '", key, "': expected a scalar");
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    PCV_FAIL("model config key '", key, "': '", n.Scalar(), "' is not a valid ", std::is_same_v<T, bool> ? "boolean"
             : std::is_integral_v<T> ? "integer" : std::is_floating_point_v<T> ? "number" : "string");
  }
}

template <size_t N>
std::array<int64_t, N> int_list(const YAML::Node& n, const std::string& key) {
  PCV_CHECK(n.IsSequence() && n.size() == N, "model config key '", key, "': expected a list of ", N, " integers");
  std::array<int64_t, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = scalar<int64_t>(n[i], key);
  return out;
}

GeluKind gelu_kind(const std::string& s, const std::string& key) {
  if (s == "gelu") return GeluKind::kErf;
  if (s == "gelu_new") return GeluKind::kTanh;
  PCV_FAIL("model config key '", key, "': '", s, "' is not gelu (erf) or gelu_new (tanh)");
}

#define PCV_INT(field) {#field, [](ModelConfig& c, const YAML::Node& n) { c.field = scalar<int64_t>(n, #field); }}
#define PCV_NUM(field) {#field, [](ModelConfig& c, const YAML::Node& n) { c.field = scalar<double>(n, #field); }}
#define PCV_BOOL(field) {#field, [](ModelConfig& c, const YAML::Node& n) { c.field = scalar<bool>(n, #field); }}
#define PCV_OPT_INT(field) \
  {#field, [](ModelConfig& c, const YAML::Node& n) { c.field = n.IsNull() ? 0 : scalar<int64_t>(n, #field); }}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      PCV_INT(num_latents), PCV_INT(d_latents), PCV_INT(d_model), PCV_INT(num_blocks),
      PCV_INT(num_self_attends_per_block), PCV_INT(num_self_attention_heads), PCV_INT(num_cross_attention_heads),
      PCV_OPT_INT(qk_channels), PCV_OPT_INT(v_channels),
      {"cross_attention_shape_for_attention",
       [](ModelConfig& c, const YAML::Node& n) {
         c.cross_attention_shape_for_attention = scalar<std::string>(n, "cross_attention_shape_for_attention");
       }},
      PCV_INT(self_attention_widening_factor), PCV_INT(cross_attention_widening_factor),
      {"hidden_act",
       [](ModelConfig& c, const YAML::Node& n) { c.hidden_act = gelu_kind(scalar<std::string>(n, "hidden_act"), "hidden_act"); }},
      PCV_NUM(attention_probs_dropout_prob), PCV_NUM(initializer_range), PCV_BOOL(use_query_residual),
      PCV_INT(num_labels), PCV_INT(image_size), PCV_INT(num_frames), PCV_INT(audio_samples_per_frame),
      PCV_INT(samples_per_patch),
      {"output_shape", [](ModelConfig& c, const YAML::Node& n) { c.output_shape = int_list<4>(n, "output_shape"); }},
      PCV_INT(output_num_channels),
      {"_label_trainable_num_channels",
       [](ModelConfig& c, const YAML::Node& n) {
         c.label_trainable_num_channels = scalar<int64_t>(n, "_label_trainable_num_channels");
       }},
      PCV_INT(frame_height), PCV_INT(frame_width), PCV_INT(spatial_downsample), PCV_INT(temporal_downsample),
      PCV_INT(image_fourier_num_bands),
      {"image_fourier_max_resolution",
       [](ModelConfig& c, const YAML::Node& n) {
         c.image_fourier_max_resolution = int_list<3>(n, "image_fourier_max_resolution");
       }},
      PCV_INT(audio_fourier_num_bands), PCV_INT(audio_fourier_max_resolution), PCV_INT(input_min_padding_size),
      PCV_INT(decoder_min_padding_size), PCV_INT(decoder_num_heads), PCV_INT(decoder_widening_factor),
      PCV_BOOL(decoder_use_query_residual), PCV_NUM(ln_eps), PCV_NUM(mask_prob_image), PCV_NUM(mask_prob_audio),
      PCV_NUM(mask_prob_label), PCV_INT(num_queries_image), PCV_INT(num_queries_audio),
  };
  return table;
}

#undef PCV_INT
#undef PCV_NUM
#undef PCV_BOOL
#undef PCV_OPT_INT

std::string with_file(const std::string& path, const std::string& msg) { return path + ": " + msg; }

}  // namespace

ModelConfig model_config_from_yaml(const std::string& path) {
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    PCV_FAIL("cannot open model config '", path, "'");
  } catch (const YAML::Exception& e) {
    PCV_FAIL(path, ": YAML error: ", e.what());
  }
  PCV_CHECK(doc.IsMap() && doc["model"] && doc["model"].IsMap(), path, ": expected a top-level 'model:' mapping");
  ModelConfig cfg;
  try {
    for (const auto& kv : doc["model"]) {
      const std::string key = kv.first.as<std::string>();
      auto it = setters().find(key);
      PCV_CHECK(it != setters().end(), "unknown model config key '", key, "'");
      it->second(cfg, kv.second);
    }
    cfg.validate();
  } catch (const Error& e) {
    throw Error(with_file(path, e.what()));
  }
  return cfg;
}

ModelConfig model_config_from_hf_json(const std::string& path) {
  std::ifstream in(path);
  PCV_CHECK(in.good(), "cannot open HF config '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    PCV_FAIL(path, ": JSON error: ", e.what());
  }
  ModelConfig cfg;
  try {
    // Reuse the YAML setters: convert each known HF key's JSON value to a YAML node.
    for (const auto& [key, value] : j.items()) {
      auto it = setters().find(key);
      if (it == setters().end()) continue;  // vocab_size, id2label, ...: not part of this model
      it->second(cfg, YAML::Load(value.dump()));
    }
    // HF's num_labels is a property: the size of id2label.
    if (j.contains("id2label") && j["id2label"].is_object() && !j.contains("num_labels"))
      cfg.num_labels = int64_t(j["id2label"].size());
    // What PerceiverForMultimodalAutoencoding derives from the config.
    cfg.frame_height = cfg.output_shape[2];
    cfg.frame_width = cfg.output_shape[3];
    cfg.image_fourier_max_resolution = {cfg.num_frames, cfg.image_size, cfg.image_size};
    cfg.audio_fourier_max_resolution = cfg.num_frames * cfg.audio_samples_per_frame;
    cfg.validate();
  } catch (const Error& e) {
    throw Error(with_file(path, e.what()));
  }
  return cfg;
}

ModelConfig load_model_config(const std::string& path) {
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  return json ? model_config_from_hf_json(path) : model_config_from_yaml(path);
}

}  // namespace perceiver
