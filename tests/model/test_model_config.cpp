// Model config readers: small HF configs load with training defaults that fit them, explicit
// impossible values are refused, YAML files are read strictly (repeated and non-scalar keys,
// a trainer config in the wrong place), and sizes are bounded before their products overflow.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perceiver/config.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

fs::path work_dir() {
  const fs::path d = fs::path(PERCEIVER_BINARY_DIR) / "tests" / "model_config";
  fs::create_directories(d);
  return d;
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path p = work_dir() / name;
  std::ofstream(p) << text;
  return p;
}

// The released model's HF config.json with a small model's sizes: 2 frames of 8x8, 2 x 64 audio
// samples in patches of 16 (8 audio tokens, 128 pixels), d_model left at HF's default 704.
nlohmann::json small_hf_config() {
  std::ifstream in(std::string(PERCEIVER_SOURCE_DIR) + "/configs/hf_kinetics700_config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["num_frames"] = 2;
  j["audio_samples_per_frame"] = 64;
  j["samples_per_patch"] = 16;
  j["output_shape"] = {1, 2, 8, 8};
  j["image_size"] = 2;
  j["num_latents"] = 8;
  j["d_latents"] = 16;
  j["num_self_attends_per_block"] = 1;
  j["output_num_channels"] = 8;
  j["_label_trainable_num_channels"] = 8;
  j["id2label"] = {{"0", "a"}, {"1", "b"}, {"2", "c"}};
  return j;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, SmallHfConfigLoadsWithQueryDefaultsThatFit) {
  const fs::path p = write("small_config.json", small_hf_config().dump(2));
  const ModelConfig c = load_model_config(p.string());
  EXPECT_EQ(c.audio_tokens(), 8);
  EXPECT_EQ(c.pixels(), 128);
  EXPECT_EQ(c.num_queries_audio, 8);    // the default 512 lowered to what the model has
  EXPECT_EQ(c.num_queries_image, 128);
  EXPECT_EQ(c.num_labels, 3);
  EXPECT_EQ(c.d_model, c.input_channels());  // HF never reads d_model for this model
  EXPECT_EQ(c.d_model, 16 + 1 + 2 * 192 + 4);  // the audio input (192 bands) is the widest
  // The released config keeps its values.
  const ModelConfig k = load_model_config(std::string(PERCEIVER_SOURCE_DIR) + "/configs/hf_kinetics700_config.json");
  EXPECT_EQ(k.num_queries_audio, 512);
  EXPECT_EQ(k.num_queries_image, 512);
  EXPECT_EQ(k.d_model, 704);
}

TEST(ModelConfig, ExplicitImpossibleQueriesAreRefused) {
  nlohmann::json j = small_hf_config();
  j["num_queries_audio"] = 9;
  const fs::path p = write("too_many_queries.json", j.dump());
  const std::string e = error_of([&] { load_model_config(p.string()); });
  EXPECT_NE(e.find("num_queries_audio: must be in [0, 8]"), std::string::npos) << e;
  EXPECT_NE(e.find(p.string()), std::string::npos) << e;
  j["num_queries_audio"] = 8;
  EXPECT_EQ(load_model_config(write("just_enough.json", j.dump()).string()).num_queries_audio, 8);
}

// tiny.yaml without its num_queries_* lines: the kinetics700 defaults (512) are lowered too.
std::string tiny_yaml_without_queries() {
  std::ifstream in(std::string(PERCEIVER_SOURCE_DIR) + "/configs/tiny.yaml");
  std::string line, out;
  while (std::getline(in, line))
    if (line.find("num_queries_") == std::string::npos) out += line + "\n";
  return out;
}

TEST(ModelConfig, YamlQueryDefaultsFitAndExplicitValuesMust) {
  const ModelConfig c = load_model_config(write("tiny_no_queries.yaml", tiny_yaml_without_queries()).string());
  EXPECT_EQ(c.num_queries_audio, c.audio_tokens());
  EXPECT_EQ(c.num_queries_image, 512);  // 2 x 16 x 16 pixels: the default fits
  const std::string e = error_of(
      [&] { load_model_config(write("tiny_bad.yaml", tiny_yaml_without_queries() + "  num_queries_audio: 9\n").string()); });
  EXPECT_NE(e.find("num_queries_audio: must be in [0, 8]"), std::string::npos) << e;
}

TEST(ModelConfig, RepeatedAndNonScalarKeysNameFileAndLine) {
  const std::string base = tiny_yaml_without_queries();
  const fs::path dup = write("dup.yaml", base + "  num_latents: 16\n");
  std::string e = error_of([&] { load_model_config(dup.string()); });
  EXPECT_NE(e.find("duplicate key 'num_latents'"), std::string::npos) << e;
  EXPECT_NE(e.find(dup.string() + ":"), std::string::npos) << e;
  EXPECT_NE(e.find("first given at line 5"), std::string::npos) << e;

  const fs::path list_key = write("list_key.yaml", base + "  [a, b]: 1\n");
  e = error_of([&] { load_model_config(list_key.string()); });
  const int last_line = int(std::count(base.begin(), base.end(), '\n')) + 1;
  EXPECT_NE(e.find(list_key.string() + ":" + std::to_string(last_line) + ": a key must be a single name, not a list"),
            std::string::npos)
      << e;

  const fs::path two_models = write("two_models.yaml", base + "model:\n  num_latents: 4\n");
  e = error_of([&] { load_model_config(two_models.string()); });
  EXPECT_NE(e.find("duplicate key 'model'"), std::string::npos) << e;
}

TEST(ModelConfig, UnknownKeyNamesItsLine) {
  const fs::path p = write("unknown.yaml", "model:\n  num_latents: 8\n  num_latent: 8\n");
  const std::string e = error_of([&] { load_model_config(p.string()); });
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown model config key 'num_latent'"), std::string::npos) << e;
}

TEST(ModelConfig, TrainerConfigPassedAsModelSaysSo) {
  const fs::path p = write("trainer.yaml", "model: demo\nbatch_size: 8\n");
  const std::string e = error_of([&] { load_model_config(p.string()); });
  EXPECT_NE(e.find("this file is a trainer config"), std::string::npos) << e;
  EXPECT_NE(e.find("--config_file_path"), std::string::npos) << e;
}

TEST(ModelConfig, SizesAreBoundedBeforeTheirProductsOverflow) {
  const std::string base = tiny_yaml_without_queries();
  std::string text = base;
  const std::string from = "  num_latents: 8\n";
  text.replace(text.find(from), from.size(), "  num_latents: 4611686018427387905\n");
  std::string e = error_of([&] { load_model_config(write("huge_latents.yaml", text).string()); });
  EXPECT_NE(e.find("num_latents: must be in [1, 1048576], got 4611686018427387905"), std::string::npos) << e;

  // Each key within its bound, the parameter count beyond 2^40 (it would not fit any memory).
  text = base;
  text.replace(text.find(from), from.size(), "  num_latents: 1048576\n");
  const std::string d = "  d_latents: 16\n";
  text.replace(text.find(d), d.size(), "  d_latents: 1048576\n");
  e = error_of([&] { load_model_config(write("huge_params.yaml", text).string()); });
  EXPECT_NE(e.find("the parameter count: is "), std::string::npos) << e;
  EXPECT_NE(e.find("more than 2^40"), std::string::npos) << e;

  // A negative optional width is refused rather than read as null.
  text = base;
  const std::string qk = "  qk_channels: null\n";
  text.replace(text.find(qk), qk.size(), "  qk_channels: -4\n");
  e = error_of([&] { load_model_config(write("negative_qk.yaml", text).string()); });
  EXPECT_NE(e.find("qk_channels: must be in [0, 1048576], got -4"), std::string::npos) << e;
}

// What a checkpoint stores (model_config_yaml) reads back as the same model, for every preset,
// the trainer tests' model and a config derived from HF's config.json.
TEST(ModelConfig, WrittenYamlReadsBackEqual) {
  const std::string src = PERCEIVER_SOURCE_DIR;
  std::vector<std::pair<std::string, ModelConfig>> cases;
  for (const char* name : {"tiny", "small", "demo", "kinetics700"})
    cases.emplace_back(name, load_model_config(src + "/configs/" + name + ".yaml"));
  cases.emplace_back("tiny_video", load_model_config(src + "/tests/train/tiny_video.yaml"));
  cases.emplace_back("small HF json", load_model_config(write("small_hf.json", small_hf_config().dump()).string()));
  ModelConfig odd = cases[0].second;  // values a preset leaves at their defaults
  odd.qk_channels = 8, odd.hidden_act = GeluKind::kTanh, odd.ln_eps = 1.0e-6, odd.mask_prob_label = 0.3;
  odd.attention_probs_dropout_prob = 0.1, odd.decoder_use_query_residual = true;
  cases.emplace_back("odd values", odd);
  for (const auto& [name, cfg] : cases) {
    const std::string text = model_config_yaml(cfg);
    const ModelConfig back = model_config_from_yaml_text(text, name);
    EXPECT_TRUE(model_config_differences(cfg, back).empty()) << name << ":\n" << text;
    EXPECT_EQ(model_config_yaml(back), text) << name;
    EXPECT_EQ(back.ln_eps, cfg.ln_eps) << name;  // doubles exactly, not to printed digits
    EXPECT_EQ(back.mask_prob_label, cfg.mask_prob_label) << name;
    EXPECT_EQ(back.num_parameters(), cfg.num_parameters()) << name;
  }
  // Configs that differ in one key each differ in that key only.
  const auto& tiny = cases[0].second;
  EXPECT_TRUE(model_config_differences(tiny, cases[1].second).size() > 3);
  EXPECT_EQ(model_config_differences(tiny, odd),
            (std::vector<std::string>{"qk_channels: null vs 8", "hidden_act: gelu vs gelu_new",
                                      "attention_probs_dropout_prob: 0.0 vs 0.1",
                                      "decoder_use_query_residual: false vs true", "ln_eps: 1e-05 vs 1e-06",
                                      "mask_prob_label: 1.0 vs 0.3"}));
  const std::string e = error_of([] { model_config_from_yaml_text("model: [1, 2]", "ckpt.h5 (attribute model_yaml)"); });
  EXPECT_NE(e.find("ckpt.h5 (attribute model_yaml)"), std::string::npos) << e;
}

}  // namespace
}  // namespace perceiver
