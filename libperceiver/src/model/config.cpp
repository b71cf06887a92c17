// ModelConfig: derived sizes, validation, and the YAML / HF config.json readers.
#include "perceiver/config.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "model/yaml_mapping.h"
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

// Every integer key is at most kMaxKey, so a derived size (at most three keys multiplied) fits
// in int64; the sizes they make and the parameter count (first computed in double) must stay at
// most kMaxDerived. Both are far beyond any model that fits in memory.
constexpr int64_t kMaxKey = int64_t(1) << 20;
constexpr double kMaxDerived = double(int64_t(1) << 40);

void need(bool ok, const std::string& key, const std::string& what) {
  PCV_CHECK(ok, "invalid model config: ", key, ": ", what);
}

std::string whole_number(double v) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(0) << v;
  return os.str();
}

void need_in_range(int64_t v, int64_t lo, const char* key) {
  need(v >= lo && v <= kMaxKey, key,
       "must be in [" + std::to_string(lo) + ", " + std::to_string(kMaxKey) + "], got " + std::to_string(v));
}

// spec §7 arithmetic for any config, in N (double to check the size before int64 holds it).
template <class N>
N count_parameters(const ModelConfig& c) {
  auto linear = [](N i, N o) { return i * o + o; };
  auto ln = [](N d) { return 2 * d; };
  const N C = N(c.input_channels()), D = N(c.d_latents), E = N(c.query_channels());
  auto block = [&](N q, N kv, bool cross, N qk, N v, N out, N wf) {
    return ln(q) + (cross ? ln(kv) : 0) + linear(q, qk) + linear(cross ? kv : q, qk) + linear(cross ? kv : q, v) +
           linear(v, out) + ln(out) + linear(out, wf * out) + linear(wf * out, out);
  };
  const bool kv_shape = c.cross_attention_shape_for_attention == "kv";
  const N enc_qk = c.qk_channels ? N(c.qk_channels) : (kv_shape ? C : D);
  const N enc_v = c.v_channels ? N(c.v_channels) : enc_qk;
  const N self_qk = c.qk_channels ? N(c.qk_channels) : D, self_v = c.v_channels ? N(c.v_channels) : self_qk;
  const N dec_qk = kv_shape ? D : E;
  const N labels = N(c.num_labels), label_query = N(c.label_trainable_num_channels), out = N(c.output_num_channels);
  N n = (C - N(c.image_in_channels())) + (C - N(c.audio_in_channels())) + (C - labels) + 3 * C;  // pads, masks
  n += N(c.num_latents) * D;
  n += block(D, C, true, enc_qk, enc_v, D, N(c.cross_attention_widening_factor));
  n += N(c.num_self_attends_per_block) *
       block(D, D, false, self_qk, self_v, self_v, N(c.self_attention_widening_factor));
  n += (E - N(c.image_pos_channels())) + (E - N(c.audio_pos_channels())) + (E - label_query) + label_query;
  n += block(E, D, true, dec_qk, dec_qk, E, N(c.decoder_widening_factor));
  n += linear(E, out);
  n += linear(out, N(c.samples_per_patch)) + linear(out, 3) + linear(out, labels);
  return n;
}

// The bounds above: checked before anything multiplies keys.
void check_ranges(const ModelConfig& c) {
  for (auto [v, k] : {std::pair{c.num_latents, "num_latents"}, {c.d_latents, "d_latents"}, {c.d_model, "d_model"},
                      {c.num_blocks, "num_blocks"}, {c.num_self_attends_per_block, "num_self_attends_per_block"},
                      {c.num_self_attention_heads, "num_self_attention_heads"},
                      {c.num_cross_attention_heads, "num_cross_attention_heads"}, {c.num_labels, "num_labels"},
                      {c.image_size, "image_size"}, {c.num_frames, "num_frames"},
                      {c.audio_samples_per_frame, "audio_samples_per_frame"},
                      {c.samples_per_patch, "samples_per_patch"}, {c.output_num_channels, "output_num_channels"},
                      {c.label_trainable_num_channels, "_label_trainable_num_channels"},
                      {c.frame_height, "frame_height"}, {c.frame_width, "frame_width"},
                      {c.spatial_downsample, "spatial_downsample"}, {c.temporal_downsample, "temporal_downsample"},
                      {c.image_fourier_num_bands, "image_fourier_num_bands"},
                      {c.audio_fourier_num_bands, "audio_fourier_num_bands"},
                      {c.audio_fourier_max_resolution, "audio_fourier_max_resolution"},
                      {c.decoder_num_heads, "decoder_num_heads"},
                      {c.self_attention_widening_factor, "self_attention_widening_factor"},
                      {c.cross_attention_widening_factor, "cross_attention_widening_factor"},
                      {c.decoder_widening_factor, "decoder_widening_factor"}})
    need_in_range(v, 1, k);
  for (auto [v, k] : {std::pair{c.qk_channels, "qk_channels"}, {c.v_channels, "v_channels"},
                      {c.input_min_padding_size, "input_min_padding_size"},
                      {c.decoder_min_padding_size, "decoder_min_padding_size"}})
    need_in_range(v, 0, k);  // 0: null (qk/v channels) or no padding
  for (int64_t v : c.image_fourier_max_resolution) need_in_range(v, 1, "image_fourier_max_resolution");
  for (int64_t v : c.output_shape) need_in_range(v, 1, "output_shape");
  for (auto [v, k] : {std::pair{double(c.pixels()), "num_frames x frame_height x frame_width"},
                      {double(c.audio_samples()), "num_frames x audio_samples_per_frame"},
                      {double(c.input_channels()), "the input width"},
                      {double(c.query_channels()), "the decoder query width"},
                      {count_parameters<double>(c), "the parameter count"}})
    need(v <= kMaxDerived, k, "is " + whole_number(v) + ", more than 2^40");
}

// HF configs have no num_queries_*: when a config leaves them out they are min(default, what the
// model has), so a small model loads; a value given explicitly must fit (validate()).
void fit_query_defaults(ModelConfig& c, bool image_given, bool audio_given) {
  if (!image_given) c.num_queries_image = std::min(c.num_queries_image, c.pixels());
  if (!audio_given) c.num_queries_audio = std::min(c.num_queries_audio, c.audio_tokens());
}

}  // namespace

void ModelConfig::validate() const {
  check_ranges(*this);
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

int64_t ModelConfig::num_parameters() const { return count_parameters<int64_t>(*this); }

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

// Sets one key; unknown keys are an error (HF keys we do not use are skipped by the caller).
void set_key(ModelConfig& cfg, const std::string& key, const YAML::Node& value) {
  auto it = setters().find(key);
  PCV_CHECK(it != setters().end(), "unknown model config key '", key, "'");
  it->second(cfg, value);
}

}  // namespace

namespace {

// A parsed model config document; `path` names it in errors (a file, or where the text came from).
ModelConfig model_config_from_doc(const YAML::Node& doc, const std::string& path) {
  PCV_CHECK(doc.IsMap(), path, ": expected a top-level 'model:' mapping");
  const std::vector<YamlEntry> top = yaml_mapping(doc, path);
  const auto model = std::find_if(top.begin(), top.end(), [](const YamlEntry& e) { return e.key == "model"; });
  PCV_CHECK(model == top.end() || !model->value.IsScalar(), path, ":", model->line, ": this file is a trainer config ",
            "('model: ", model->value.Scalar(), "' names a model); pass it as --config_file_path");
  PCV_CHECK(model != top.end() && model->value.IsMap(), path, ": expected a top-level 'model:' mapping");
  ModelConfig cfg;
  bool image_queries = false, audio_queries = false;
  try {
    for (const YamlEntry& e : yaml_mapping(model->value, path)) {
      try {
        set_key(cfg, e.key, e.value);
      } catch (const Error& err) {
        throw Error("line " + std::to_string(e.line) + ": " + err.what());
      }
      image_queries |= e.key == "num_queries_image", audio_queries |= e.key == "num_queries_audio";
    }
    check_ranges(cfg);
    fit_query_defaults(cfg, image_queries, audio_queries);
    cfg.validate();
  } catch (const Error& e) {
    throw Error(with_file(path, e.what()));
  }
  return cfg;
}

}  // namespace

ModelConfig model_config_from_yaml(const std::string& path) {
  return model_config_from_doc(load_yaml_file(path, "model config"), path);
}

ModelConfig model_config_from_yaml_text(const std::string& text, const std::string& source) {
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    PCV_FAIL(source, ": YAML error: ", e.what());
  }
  return model_config_from_doc(doc, source);
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
  PCV_CHECK(j.is_object(), path, ": expected a JSON object (an HF config.json)");
  ModelConfig cfg;
  try {
    // Reuse the YAML setters: convert each known HF key's JSON value to a YAML node.
    for (const auto& [key, value] : j.items())
      if (setters().count(key)) set_key(cfg, key, YAML::Load(value.dump()));  // others: vocab_size, id2label, ...
    // HF's num_labels is a property: the size of id2label.
    if (j.contains("id2label") && j["id2label"].is_object() && !j.contains("num_labels"))
      cfg.num_labels = int64_t(j["id2label"].size());
    check_ranges(cfg);
    // What PerceiverForMultimodalAutoencoding derives from the config. d_model is not among
    // them: the encoder's key/value width is the preprocessor's, so HF never reads d_model
    // (PerceiverConfig's default 704 fits the released model only).
    cfg.frame_height = cfg.output_shape[2];
    cfg.frame_width = cfg.output_shape[3];
    cfg.image_fourier_max_resolution = {cfg.num_frames, cfg.image_size, cfg.image_size};
    cfg.audio_fourier_max_resolution = cfg.num_frames * cfg.audio_samples_per_frame;
    check_ranges(cfg);
    cfg.d_model = cfg.input_channels();
    fit_query_defaults(cfg, j.contains("num_queries_image"), j.contains("num_queries_audio"));
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

// ---- writer ---------------------------------------------------------------------------------

namespace {

// The shortest text that reads back as the same double.
std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // stays a number to a YAML reader
  return s;
}

template <size_t N>
std::string list_text(const std::array<int64_t, N>& a) {
  std::string s = "[";
  for (size_t i = 0; i < N; ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  return s + "]";
}

std::string optional_text(int64_t v) { return v == 0 ? "null" : std::to_string(v); }
std::string bool_text(bool b) { return b ? "true" : "false"; }

}  // namespace

std::vector<std::pair<std::string, std::string>> model_config_entries(const ModelConfig& c) {
  using std::to_string;
  std::vector<std::pair<std::string, std::string>> e = {
      {"num_latents", to_string(c.num_latents)}, {"d_latents", to_string(c.d_latents)},
      {"d_model", to_string(c.d_model)}, {"num_blocks", to_string(c.num_blocks)},
      {"num_self_attends_per_block", to_string(c.num_self_attends_per_block)},
      {"num_self_attention_heads", to_string(c.num_self_attention_heads)},
      {"num_cross_attention_heads", to_string(c.num_cross_attention_heads)},
      {"qk_channels", optional_text(c.qk_channels)}, {"v_channels", optional_text(c.v_channels)},
      {"cross_attention_shape_for_attention", c.cross_attention_shape_for_attention},
      {"self_attention_widening_factor", to_string(c.self_attention_widening_factor)},
      {"cross_attention_widening_factor", to_string(c.cross_attention_widening_factor)},
      {"hidden_act", c.hidden_act == GeluKind::kErf ? "gelu" : "gelu_new"},
      {"attention_probs_dropout_prob", number_text(c.attention_probs_dropout_prob)},
      {"initializer_range", number_text(c.initializer_range)},
      {"use_query_residual", bool_text(c.use_query_residual)}, {"num_labels", to_string(c.num_labels)},
      {"image_size", to_string(c.image_size)}, {"num_frames", to_string(c.num_frames)},
      {"audio_samples_per_frame", to_string(c.audio_samples_per_frame)},
      {"samples_per_patch", to_string(c.samples_per_patch)}, {"output_shape", list_text(c.output_shape)},
      {"output_num_channels", to_string(c.output_num_channels)},
      {"_label_trainable_num_channels", to_string(c.label_trainable_num_channels)},
      {"frame_height", to_string(c.frame_height)}, {"frame_width", to_string(c.frame_width)},
      {"spatial_downsample", to_string(c.spatial_downsample)},
      {"temporal_downsample", to_string(c.temporal_downsample)},
      {"image_fourier_num_bands", to_string(c.image_fourier_num_bands)},
      {"image_fourier_max_resolution", list_text(c.image_fourier_max_resolution)},
      {"audio_fourier_num_bands", to_string(c.audio_fourier_num_bands)},
      {"audio_fourier_max_resolution", to_string(c.audio_fourier_max_resolution)},
      {"input_min_padding_size", to_string(c.input_min_padding_size)},
      {"decoder_min_padding_size", to_string(c.decoder_min_padding_size)},
      {"decoder_num_heads", to_string(c.decoder_num_heads)},
      {"decoder_widening_factor", to_string(c.decoder_widening_factor)},
      {"decoder_use_query_residual", bool_text(c.decoder_use_query_residual)}, {"ln_eps", number_text(c.ln_eps)},
      {"mask_prob_image", number_text(c.mask_prob_image)}, {"mask_prob_audio", number_text(c.mask_prob_audio)},
      {"mask_prob_label", number_text(c.mask_prob_label)}, {"num_queries_image", to_string(c.num_queries_image)},
      {"num_queries_audio", to_string(c.num_queries_audio)},
  };
  // One entry per key the reader knows, or a stored config would silently lose a field.
  PCV_ASSERT(e.size() == setters().size(), "model config writer has ", e.size(), " keys, the reader ",
             setters().size());
  for (const auto& kv : e) PCV_ASSERT(setters().count(kv.first), "model config writer key '", kv.first, "'");
  return e;
}

std::string model_config_yaml(const ModelConfig& c) {
  std::string s = "model:\n";
  for (const auto& [key, value] : model_config_entries(c)) s += "  " + key + ": " + value + "\n";
  return s;
}

std::vector<std::string> model_config_differences(const ModelConfig& a, const ModelConfig& b) {
  const auto ea = model_config_entries(a), eb = model_config_entries(b);
  std::vector<std::string> out;
  for (size_t i = 0; i < ea.size(); ++i)
    if (ea[i].second != eb[i].second) out.push_back(ea[i].first + ": " + ea[i].second + " vs " + eb[i].second);
  return out;
}

}  // namespace perceiver
