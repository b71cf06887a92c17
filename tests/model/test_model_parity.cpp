// Whole-model parity with the PyTorch reference (tests/reference/perceiver_ref.py, which mirrors
// HF's PerceiverForMultimodalAutoencoding module by module): forward outputs, loss terms,
// intermediates and the gradient of every parameter, by HF name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "io/hdf5_file.h"
#include "model/loss.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

// Runs the generator once per fixture name; fails loudly when PyTorch is missing. The files are
// named per process: ctest runs this binary once per kernel level (baseline, v3, ...) at the same
// time, and a shared name let one run read a fixture that another was still writing.
std::string make_fixture(const std::string& name, const std::string& args) {
  const fs::path dir = fs::path(PERCEIVER_BINARY_DIR) / "fixtures" / "model";
  fs::create_directories(dir);
  const std::string stem = name + "." + std::to_string(::getpid());
  const fs::path out = dir / (stem + ".h5");
  const std::string cmd = std::string(PERCEIVER_PYTHON) + " " + PERCEIVER_SOURCE_DIR +
                          "/tests/reference/gen_model_fixture.py " + args + " --out " + out.string() + " > " +
                          (dir / (stem + ".log")).string() + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "fixture generator failed (is python3-torch installed?): " << cmd
                                         << "\nsee " << (dir / (stem + ".log")).string();
  return out.string();
}

struct Compare {
  double atol, rtol;
  int failures = 0;
  // |got − ref| ≤ atol·max(1, max|ref|) + rtol·|ref| elementwise; prints the worst element.
  void operator()(const std::string& name, const float* got, const std::vector<float>& ref) {
    double scale = 1.0, worst = 0;
    for (float r : ref) scale = std::max(scale, double(std::abs(r)));
    int64_t worst_i = -1, bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double diff = std::abs(double(got[i]) - ref[i]);
      const double allowed = atol * scale + rtol * std::abs(ref[i]);
      if (diff > allowed) ++bad;
      if (diff / allowed > worst) worst = diff / allowed, worst_i = int64_t(i);
    }
    if (bad) {
      ++failures;
      ADD_FAILURE() << name << ": " << bad << " of " << ref.size() << " elements out of tolerance; worst [" << worst_i
                    << "] got " << got[worst_i] << " want " << ref[worst_i];
    }
  }
};

ModelConfig fixture_config(const H5File& f) {
  const fs::path p = fs::path(f.path()).replace_extension(".yaml");
  std::ofstream(p) << f.attr_string("/", "config_yaml");
  return model_config_from_yaml(p.string());
}

// One way of running the net on a fixture: its options and whether it then folds its K/V projections.
struct Variant {
  NetOptions options;
  bool folds_kv = false;
};

// Returns the number of outputs out of tolerance.
int check_variant(H5File& f, const ModelConfig& cfg, const Variant& v, double atol, double rtol, bool grads_too) {
  PerceiverNet<float> net(cfg, cpu_backend(), v.options);
  // Every parameter by name, and no extra or missing names.
  const size_t names = f.read_strings("param_names").size(), entries = net.store().registry().entries().size();
  EXPECT_EQ(names, entries);
  if (names != entries) return 1;
  for (const auto& e : net.store().registry().entries()) {
    const bool has = f.has("params/" + e.spec.name);
    EXPECT_TRUE(has) << "reference lacks " << e.spec.name;
    if (!has) return 1;
    auto p = net.store().param(e.spec.name);
    f.read_into("params/" + e.spec.name, p.data, p.numel());
  }
  const int64_t B = f.shape("label")[0];
  auto video = f.read<float>("video"), audio = f.read<float>("audio");
  auto labels = f.read<int64_t>("label");
  OutputPoints pts{f.read<int64_t>("subsample/image"), f.read<int64_t>("subsample/audio")};
  // The masks the reference applied, in our [B, M] token order (audio, image, label).
  std::vector<uint8_t> mask(B * cfg.input_tokens());
  const ModalityLayout lay(cfg);
  for (auto [m, begin, count] : {std::tuple{"audio", lay.audio_begin, lay.audio_count},
                                 {"image", lay.image_begin, lay.image_count}, {"label", lay.label_begin, int64_t(1)}}) {
    auto mk = f.read<float>(std::string("masks/") + m);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < count; ++i) mask[b * cfg.input_tokens() + begin + i] = mk[b * count + i] > 0.5f;
  }
  LossConfig lc;
  lc.recon = f.attr_string("/", "recon_loss") == "mse" ? ReconLoss::kMse : ReconLoss::kL1;
  net.encode(video.data(), audio.data(), labels.data(), B, mask);
  auto out = net.decode(pts);
  const DecoderOutputs<float> grads = net.output_grads();
  const LossValues t = compute_loss(net, lc, out, &grads);
  net.store().zero_grad();
  net.backward(ConstView<float>(grads.image), ConstView<float>(grads.audio), ConstView<float>(grads.label));

  EXPECT_EQ(net.folds_kv_projections(), v.folds_kv) << "the encoder's K/V projections (NetOptions::fold_kv_projections)";
  Compare cmp{atol, rtol};
  cmp("intermediate/x", net.encoder_input().data, f.read<float>("intermediate/x"));
  cmp("logits/image", out.image.data, f.read<float>("logits/image"));
  cmp("logits/audio", out.audio.data, f.read<float>("logits/audio"));
  cmp("logits/label", out.label.data, f.read<float>("logits/label"));
  const float terms[4] = {float(t.total), float(t.image), float(t.audio), float(t.label)};
  cmp("loss", &terms[0], f.read<float>("loss"));
  cmp("loss_terms/image", &terms[1], f.read<float>("loss_terms/image"));
  cmp("loss_terms/audio", &terms[2], f.read<float>("loss_terms/audio"));
  cmp("loss_terms/label", &terms[3], f.read<float>("loss_terms/label"));
  for (const auto& e : net.store().registry().entries())
    if (grads_too) cmp("grads/" + e.spec.name, net.store().grad(e.spec.name).data, f.read<float>("grads/" + e.spec.name));
  return cmp.failures;
}

void check_fixture(const std::string& path, double atol, double rtol, bool grads_too = true,
                   const std::vector<Variant>& variants = {Variant{}}) {
  H5File f = H5File::open(path);
  const ModelConfig cfg = fixture_config(f);
  int failures = 0;
  for (const Variant& v : variants) {
    const int n = check_variant(f, cfg, v, atol, rtol, grads_too);
    EXPECT_EQ(n, 0) << path << " (fold_kv_projections " << v.options.fold_kv_projections << ", kv_row_chunk "
                    << v.options.kv_row_chunk << ")";
    failures += n;
  }
  if (failures == 0) {  // a failing run keeps its fixture and log to look at
    for (const char* ext : {".h5", ".log", ".yaml"}) fs::remove(fs::path(path).replace_extension(ext));
  }
}

// float32 on both sides; sums over up to a few thousand terms differ in order, hence 1e-4.
TEST(ModelParity, TinyL1LabelMasked) { check_fixture(make_fixture("tiny_l1", "--config " PERCEIVER_SOURCE_DIR "/configs/tiny.yaml --seed 0 --batch 2 --recon_loss l1"), 1e-5, 1e-4); }

TEST(ModelParity, TinyMseHalfMaskedTwoBlocksTanh) {
  check_fixture(make_fixture("tiny_mse_masked",
                             "--config " PERCEIVER_SOURCE_DIR
                             "/configs/tiny.yaml --seed 3 --batch 3 --recon_loss mse --label_mask_prob 0.5 "
                             "--hidden_act gelu_new --set num_blocks=2 --set mask_prob_image=0.3 --set mask_prob_audio=0.3"),
                1e-5, 1e-4);
}

TEST(ModelParity, TinyLabelVisible) {
  check_fixture(make_fixture("tiny_visible", "--config " PERCEIVER_SOURCE_DIR "/configs/tiny.yaml --seed 5 --batch 2 --label_mask_prob 0"),
                1e-5, 1e-4);
}

// The benchmark config at its real training shape: 512 pixel and 64 audio queries, inference
// outputs and loss (the encoder attends 128 latents over 2,289 tokens).
TEST(ModelParity, SmallInference) {
  check_fixture(make_fixture("small", "--config " PERCEIVER_SOURCE_DIR "/configs/small.yaml --seed 1 --batch 2 --init hf"),
                1e-5, 1e-4, false);
}

// A training step whose encoder attention is streamed (16 × 128 × 2,289 probabilities are more
// than kMaterialiseLimitBytes), so the net folds its K/V projections into the queries and the
// output (AttentionBlockConfig::fold_kv): the reference projects K and V as the model is written.
// The same step also projecting K and V, in the CPU's 2048-row chunks and in the CUDA backend's
// 16384 (NetOptions::kv_row_chunk; 36,624 rows: chunks that span batch items, a short last one).
TEST(ModelParity, SmallTrainingStepWithFoldedKvProjections) {
  NetOptions projecting;
  projecting.fold_kv_projections = false;
  NetOptions gpu_chunks = projecting;
  gpu_chunks.kv_row_chunk = 16384;
  check_fixture(make_fixture("small_folded", "--config " PERCEIVER_SOURCE_DIR "/configs/small.yaml --seed 2 --batch 16"),
                1e-5, 1e-4, true, {Variant{NetOptions{}, true}, Variant{projecting, false}, Variant{gpu_chunks, false}});
}

TEST(ModelParity, NegativeKvRowChunkIsRefused) {
  NetOptions o;
  o.kv_row_chunk = -1;
  const ModelConfig cfg = load_model_config(PERCEIVER_SOURCE_DIR "/configs/tiny.yaml");
  try {
    PerceiverNet<float> net(cfg, cpu_backend(), o);
    ADD_FAILURE() << "kv_row_chunk -1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_row_chunk must be 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perceiver
