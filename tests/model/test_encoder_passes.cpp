// Forward-only encoder passes (Pass::kForwardOnly): they plan and write none of what only
// backward reads — the streamed cross-attention's kept scores, its K and V (made a row chunk at a
// time and merged into the attention: stream_kv), a saved state per latent layer —, give the
// latents of a training pass to float rounding, and a backward after one is refused. And the
// cross-attention with its K/V projections folded away (EncoderConfig::fold_kv), in both passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "core/rng.h"
#include "model/perceiver_core.h"
#include "model/perceiver_net.h"
#include "model/preprocessor.h"

namespace perceiver {
namespace {

// The cpu backend (float32 products, or bf16 ones), counting the bytes of its live allocations.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Precision precision = Precision::kFp32) : cpu_(make_backend("cpu", {.precision = precision})) {}
  std::string name() const override { return "counting-cpu"; }
  Buffer allocate(size_t bytes) override {
    auto held = std::make_shared<Buffer>(cpu_->allocate(bytes));
    in_use_ += int64_t(bytes);
    return Buffer(held->data(), bytes, [this, held, bytes](void*) { in_use_ -= int64_t(bytes); });
  }
  void zero(void* dst, size_t bytes) override { cpu_->zero(dst, bytes); }
  void discard(void* data, size_t bytes) override { cpu_->discard(data, bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_host(dst, src, bytes); }
  void synchronize() override { cpu_->synchronize(); }
  bool host_accessible() const override { return true; }
  void* handle() const override { return cpu_->handle(); }
  Precision precision() const override { return cpu_->precision(); }
  bool keeps_attention_scores() const override { return cpu_->keeps_attention_scores(); }
  bool merges_attention_chunks() const override { return merges; }
  const KernelTable<float>& kernels_f32() const override { return fused_embed ? cpu_->kernels_f32() : unfused_f32_; }
  const KernelTable<double>* kernels_f64() const override {
    return fused_embed ? cpu_->kernels_f64() : &unfused_f64_;
  }
  int64_t in_use() const { return in_use_; }
  bool merges = true;  // the cpu backend's answer, or what a backend without it says
  // false: the cpu kernels without embed_layer_norm_forward (Kernels::embeds_normalised), so the
  // net makes the encoder input's rows and normalises them apart.
  bool fused_embed = true;

 private:
  template <class T>
  static KernelTable<T> unfused(const KernelTable<T>& t) {
    KernelTable<T> u = t;
    u.embed_layer_norm_forward = nullptr;
    return u;
  }
  std::unique_ptr<Backend> cpu_;
  KernelTable<float> unfused_f32_ = unfused(cpu_->kernels_f32());
  KernelTable<double> unfused_f64_ = unfused(*cpu_->kernels_f64());
  int64_t in_use_ = 0;
};

constexpr int64_t kB = 2, kLatents = 16, kD = 32, kM = 300, kC = 24;

constexpr int64_t kBlocks = 2, kSelfPerBlock = 2, kSelfLayers = kBlocks * kSelfPerBlock;

// One cross-attention (streamed in K/V chunks of 64, LN_kv and K/V projections in 96-row
// chunks, scores kept) and two self-attention layers applied twice (shared weights).
EncoderConfig encoder_config(bool fold_kv = false) {
  EncoderConfig e;
  e.fold_kv = fold_kv;
  e.num_latents = kLatents, e.d_latents = kD, e.num_blocks = kBlocks, e.self_attends_per_block = kSelfPerBlock;
  e.cross.cross = true, e.cross.q_dim = kD, e.cross.kv_dim = kC;
  e.cross.kv_chunk = 64, e.cross.kv_row_chunk = 96, e.cross.keep_scores = true;
  e.self.cross = false, e.self.q_dim = kD, e.self.heads = 2;
  return e;
}

struct Fixture {
  CountingBackend backend;
  PerceiverEncoder<float> encoder;
  ParamStore<float> store;
  Context<float> ctx{backend};
  std::vector<float> x = std::vector<float>(size_t(kB * kM * kC));

  explicit Fixture(bool fold_kv = false) : encoder(encoder_config(fold_kv), "enc.") {
    ParamRegistry r;
    r.add(encoder.param_specs());
    store = ParamStore<float>(backend, std::move(r));
    RngStream rng(7, RngPurpose::kTest);
    for (size_t i = 0; i < store.params().size(); ++i) store.params().data()[i] = float(rng.normal() * 0.3);
    for (float& v : x) v = float(rng.normal());
  }
  std::vector<float> forward(Pass pass) {
    const ConstView<float> z = encoder.forward(store, ConstView<float>{x.data(), Shape{kB, kM, kC}}, ctx, pass);
    return {z.data, z.data + z.numel()};
  }
  // The parameter gradients and the input gradient of sum(z · w) for fixed weights w.
  std::vector<float> backward() {
    std::vector<float> dz(size_t(kB * kLatents * kD)), dx(x.size());
    RngStream rng(9, RngPurpose::kTest);
    for (float& v : dz) v = float(rng.normal());
    store.zero_grad();
    encoder.backward(store, ConstView<float>{dz.data(), Shape{kB, kLatents, kD}},
                     [&](int64_t row0, ConstView<float> rows) {
                       std::copy(rows.data, rows.data + rows.numel(), dx.begin() + row0 * kC);
                     },
                     ctx);
    std::vector<float> g(store.grads().data(), store.grads().data() + store.grads().size());
    g.insert(g.end(), dx.begin(), dx.end());
    return g;
  }
};

// Bytes a forward-only pass does not plan: the B·Nq·Nk scores (and, `kv`, the [B, M, C] K and V),
// all but one latent layer application's saved state and all but two of their outputs (every
// size here is a multiple of the arena's 16-element alignment).
int64_t forward_only_saving(bool kv) {
  int64_t self = 0;
  for (const TensorSpec& t : attention_block_saved_specs(encoder_config().self, kB, kLatents, kLatents))
    self += t.shape.numel();
  const int64_t floats = kB * kLatents * kM + (kv ? 2 * kB * kM * kC : 0) + (kSelfLayers - 1) * self +
                         (kSelfLayers - 2) * kB * kLatents * kD;
  return floats * int64_t(sizeof(float));
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, double(std::abs(v)));
  return m;
}

// The largest |a − b|; NaN if either holds one (so no bound admits it).
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

TEST(EncoderPasses, ForwardOnlyKeepsNothingForBackwardAndGivesTheSameLatents) {
  Fixture f;
  const std::vector<float> z_train = f.forward(Pass::kWithBackward);
  const int64_t with_backward = f.backend.in_use();
  const std::vector<float> z_eval = f.forward(Pass::kForwardOnly);
  const int64_t forward_only = f.backend.in_use();
  EXPECT_LT(forward_only, with_backward);
  EXPECT_GT(max_abs(z_train), 0.5);
  EXPECT_LT(max_diff(z_train, z_eval), 1e-5 * max_abs(z_train)) << "the merged key chunks round differently, no more";
  // A training pass plans them again: its saved state is larger by exactly what the forward-only
  // pass left out (the K/V chunk buffers that pass added to the grow-only scratch are in both
  // figures), and its backward gives a fresh encoder's gradients bitwise.
  f.forward(Pass::kWithBackward);
  EXPECT_EQ(f.backend.in_use() - forward_only, forward_only_saving(true));
  Fixture fresh;
  fresh.forward(Pass::kWithBackward);
  const std::vector<float> want = fresh.backward(), got = f.backward();
  EXPECT_GT(max_abs(want), 0.1);
  EXPECT_EQ(max_diff(want, got), 0.0);
}

TEST(EncoderPasses, BackwardAfterAForwardOnlyPassIsRefused) {
  Fixture f;
  f.forward(Pass::kForwardOnly);
  try {
    f.backward();
    FAIL() << "backward after a forward-only pass ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward-only"), std::string::npos) << e.what();
  }
}

// Where the backend cannot merge attention over key chunks, a forward-only pass keeps K and V
// (the stored path) and gives the training pass's latents bitwise.
TEST(EncoderPasses, WithoutMergingTheForwardOnlyPassStoresKv) {
  Fixture f;
  f.backend.merges = false;
  const std::vector<float> z_train = f.forward(Pass::kWithBackward);
  const int64_t with_backward = f.backend.in_use();
  const std::vector<float> z_eval = f.forward(Pass::kForwardOnly);
  EXPECT_EQ(with_backward - f.backend.in_use(), forward_only_saving(false));
  EXPECT_EQ(max_diff(z_train, z_eval), 0.0);
}

// The cross-attention's K/V projections folded into its queries and output (EncoderConfig::fold_kv):
// both passes plan no [B, M, C] K or V but two [B, Nq, C] tensors in their place, and give the
// projecting encoder's latents and gradients to float rounding (the key bias's gradient is zero
// in theory: zero folded, rounding noise projected).
TEST(EncoderPasses, FoldedKvProjectionsKeepNoKvAndGiveTheProjectedResults) {
  Fixture projected, folded(true);
  std::vector<float> z = projected.forward(Pass::kWithBackward), z_folded = folded.forward(Pass::kWithBackward);
  EXPECT_TRUE(folded.encoder.folds_kv());
  EXPECT_FALSE(projected.encoder.folds_kv());
  EXPECT_GT(max_abs(z), 0.5);
  EXPECT_LT(max_diff(z, z_folded), 1e-5 * max_abs(z));
  // The arena holds two [B, Nq, C] tensors instead of K and V; the folded pass's scratch holds
  // one range of normalised kv rows, [B, 96, C], where the projecting pass has one chunk's, [96, C],
  // and with LN_kv's gain folded as well (Kernels::folds_kv_norm, the cpu backend) the kernel's
  // queries [B, Nq, C] and a unit gain and zero shift [C] (each a 64-byte aligned block).
  const bool norm_folded = Kernels<float>(folded.backend.kernels_f32(), nullptr).folds_kv_norm();
  const int64_t arena_bytes = (2 * kB * kM * kC - 2 * kB * kLatents * kC) * 4, range_bytes = (kB - 1) * 96 * kC * 4;
  const int64_t fold_bytes = norm_folded ? kB * kLatents * kC * 4 + 2 * ((kC * 4 + 63) / 64 * 64) : 0;
  const int64_t saved_bytes = projected.backend.in_use() - folded.backend.in_use();
  EXPECT_TRUE(norm_folded);
  EXPECT_LE(saved_bytes, arena_bytes);
  EXPECT_GE(saved_bytes, arena_bytes - range_bytes - fold_bytes);
  const std::vector<float> want = projected.backward(), got = folded.backward();
  EXPECT_GT(max_abs(want), 0.1);
  EXPECT_LT(max_diff(want, got), 1e-5 * max_abs(want));
  z = projected.forward(Pass::kForwardOnly), z_folded = folded.forward(Pass::kForwardOnly);
  EXPECT_TRUE(folded.encoder.folds_kv());
  EXPECT_LT(max_diff(z, z_folded), 1e-5 * max_abs(z));
  // Two heads cannot fold: the encoder projects, as it would without the option.
  EncoderConfig two_heads = encoder_config(true);
  two_heads.cross.heads = 2;
  EXPECT_FALSE(can_fold_kv(two_heads.cross, kB, kLatents, kM, projected.backend, projected.ctx.mode));
  EXPECT_TRUE(can_fold_kv(encoder_config(true).cross, kB, kLatents, kM, projected.backend, projected.ctx.mode));
}

// The whole net refuses too, before its decoder adds anything to the gradients.
TEST(EncoderPasses, NetRefusesBackwardAfterAForwardOnlyEncode) {
  const ModelConfig c = model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/tiny.yaml");
  PerceiverNet<float> net(c, cpu_backend());
  std::vector<float> video(size_t(c.pixels() * 3), 0.5f), audio(size_t(c.audio_samples()), 0.1f);
  const int64_t label = 1;
  net.encode(video.data(), audio.data(), &label, 1, std::vector<uint8_t>(size_t(c.input_tokens()), 0),
             Pass::kForwardOnly);
  net.decode(OutputPoints{{0, 5}, {1}});
  const DecoderOutputs<float> d = net.output_grads();
  std::fill_n(d.image.data, d.image.numel(), 1.f);  // the cpu backend's memory is the host's
  net.store().zero_grad();
  try {
    net.backward(ConstView<float>(d.image), ConstView<float>(d.audio), ConstView<float>(d.label));
    FAIL() << "backward after a forward-only encode ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward-only"), std::string::npos) << e.what();
  }
  const Arena<float>& g = net.store().grads();
  EXPECT_EQ(std::count(g.data(), g.data() + g.size(), 0.f), int64_t(g.size()));
}

// One training step of an encoded net: its outputs at `pts`, then (with fixed output gradients)
// its parameter gradients, in one vector.
template <class T>
std::vector<T> step_outputs_and_grads(PerceiverNet<T>& net, const OutputPoints& pts) {
  const DecoderOutputs<T> out = net.decode(pts);
  std::vector<T> result;
  for (const TensorView<T>& t : {out.image, out.audio, out.label}) result.insert(result.end(), t.data, t.data + t.numel());
  const DecoderOutputs<T> d = net.output_grads();
  for (const TensorView<T>& t : {d.image, d.audio, d.label})
    for (int64_t i = 0; i < t.numel(); ++i) t.data[i] = T(0.01) * T(i % 13) - T(0.05);
  net.store().zero_grad();
  net.backward(ConstView<T>(d.image), ConstView<T>(d.audio), ConstView<T>(d.label));
  const Arena<T>& g = net.store().grads();
  result.insert(result.end(), g.data(), g.data() + g.size());
  return result;
}

// Batch 16 of the small config (streamed, so the encoder can fold): random clips and audio,
// labels, and rows masked in every modality (the label of every other item; audio and image rows
// in a stride), so every padding and mask-token group takes part.
template <class T>
struct SmallBatch {
  static constexpr int64_t B = 16;
  ModelConfig c = model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/small.yaml");
  std::vector<T> video, audio;
  std::vector<int64_t> labels;
  std::vector<uint8_t> mask;
  explicit SmallBatch(uint64_t seed) {
    const int64_t M = c.input_tokens();
    const ModalityLayout lay(c);
    video.resize(size_t(B * c.pixels() * 3)), audio.resize(size_t(B * c.audio_samples()));
    labels.resize(size_t(B)), mask.assign(size_t(B * M), 0);
    RngStream rng(seed, RngPurpose::kTest);
    for (T& v : video) v = T(0.5 + 0.3 * rng.normal());
    for (T& v : audio) v = T(0.3 * rng.normal());
    for (int64_t b = 0; b < B; ++b) {
      labels[size_t(b)] = b % c.num_labels;
      mask[size_t(b * M + lay.label_begin)] = uint8_t(b % 2);
      for (int64_t i = b % 5; i < lay.audio_count; i += 5) mask[size_t(b * M + lay.audio_begin + i)] = 1;
      for (int64_t i = b % 7; i < lay.image_count; i += 7) mask[size_t(b * M + lay.image_begin + i)] = 1;
    }
  }
};

// The net's whole backward in double with the encoder folded (its input gradient as the padding
// and mask tokens' group sums, KvGradGroups) and projecting (the gradient rows into
// preprocessor_backward_rows): every parameter gradient the same, with audio, image and label
// rows masked and not, so all six groups take part. Batch 16 of the small config streams the
// encoder attention, as folding needs.
TEST(EncoderPasses, FoldedNetGivesTheProjectingNetsGradientsInDouble) {
  const SmallBatch<double> in(7);
  const ModelConfig& c = in.c;
  auto grads = [&](bool fold, bool& folded, bool& summed) {
    NetOptions o;
    o.fold_kv_projections = fold;
    PerceiverNet<double> net(c, cpu_backend(), o);
    net.store().initialize(3, InitScheme::kDeepMind);
    net.encode(in.video.data(), in.audio.data(), in.labels.data(), in.B, in.mask);
    net.decode(OutputPoints{{0, 5, 77, 300}, {1, 9}});
    const DecoderOutputs<double> d = net.output_grads();
    for (const TensorView<double>& t : {d.image, d.audio, d.label})
      for (int64_t i = 0; i < t.numel(); ++i) t.data[i] = 0.01 * double(i % 13) - 0.05;
    net.store().zero_grad();
    net.backward(ConstView<double>(d.image), ConstView<double>(d.audio), ConstView<double>(d.label));
    folded = net.folds_kv_projections(), summed = net.sums_input_gradient();
    const Arena<double>& g = net.store().grads();
    return std::vector<double>(g.data(), g.data() + g.size());
  };
  bool folded = false, summed = false, projected_folds = true, projected_sums = true;
  const std::vector<double> want = grads(false, projected_folds, projected_sums), got = grads(true, folded, summed);
  EXPECT_TRUE(folded && summed);
  EXPECT_FALSE(projected_folds || projected_sums);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(want[i] - got[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_GT(scale, 1e-3);
  EXPECT_LT(worst, 1e-10 * scale) << "max abs diff " << worst << " of " << scale;
  // The mask tokens of all three modalities and the paddings got gradients.
  const ParamRegistry registry = PerceiverNet<double>::make_registry(c);
  for (const char* name : {"mask.audio", "mask.image", "mask.label", "padding.audio", "padding.image"}) {
    const int64_t off = registry.at(std::string("perceiver.input_preprocessor.") + name).offset;
    EXPECT_NE(got[size_t(off)], 0.0) << name;
  }
}

// The folded encoder attending over the input rows' factors (NetOptions::factor_kv_inputs,
// EmbedFactors) or over the rows: in double, the same outputs and parameter gradients, with
// audio, image and label rows masked and not (SmallBatch). The small config with 300 labels, so
// its 304 channels are mostly padding of the audio and image rows, and 176 factors stand for
// them; in 64-row ranges, so that ranges of audio rows alone (the narrower content) run their
// products over the first 96 columns only (AttentionDims::key_columns).
TEST(EncoderPasses, FactorisedInputRowsGiveTheSameStepInDouble) {
  const SmallBatch<double> in(13);
  ModelConfig c = in.c;
  c.num_labels = 300, c.d_model = 304;
  ASSERT_EQ(input_factor_columns(c, in.B, 0, 64), 96) << "no range of narrow rows in this test";
  ASSERT_EQ(input_factor_columns(c, in.B, c.input_tokens() - 64, 64), 176);
  auto step = [&](bool factor, int64_t& width) {
    NetOptions o;
    o.factor_kv_inputs = factor;
    o.kv_row_chunk = 64;
    PerceiverNet<double> net(c, cpu_backend(), o);
    net.store().initialize(4, InitScheme::kDeepMind);
    net.encode(in.video.data(), in.audio.data(), in.labels.data(), in.B, in.mask);
    width = net.kv_factor_width();
    return step_outputs_and_grads(net, OutputPoints{{0, 5, 77, 300}, {1, 9}});
  };
  int64_t rows_width = -1, factors_width = -1;
  const std::vector<double> want = step(false, rows_width), got = step(true, factors_width);
  EXPECT_EQ(rows_width, 0);
  EXPECT_EQ(factors_width, 176) << "EmbedFactors: 81 audio content + 13 to 96, then 66 more image content";
  ASSERT_EQ(want.size(), got.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(want[i] - got[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_GT(scale, 1e-3);
  EXPECT_LT(worst, 1e-10 * scale) << "max abs diff " << worst << " of " << scale;
  const ParamRegistry registry = PerceiverNet<double>::make_registry(c);
  for (const char* name : {"mask.audio", "mask.image", "mask.label", "padding.audio", "padding.image", "padding.label"}) {
    const int64_t off = registry.at(std::string("perceiver.input_preprocessor.") + name).offset;
    EXPECT_NE(got[size_t(off)], 0.0) << name << " got no gradient";
  }
}

// The same with bf16 products (where the CPU has them), whose operands the factors round otherwise
// (a padding channel's product terms rounded apiece over the rows, one sum over the factors):
// outputs and gradients within bf16 rounding of the rows' own, in float.
TEST(EncoderPasses, FactorisedInputRowsGiveTheSameStepWithBf16Products) {
  const SmallBatch<float> in(17);
  ModelConfig c = in.c;
  c.num_labels = 300, c.d_model = 304;
  std::unique_ptr<Backend> backend;
  try {
    backend = make_backend("cpu", {.precision = Precision::kBf16});
  } catch (const Error& e) {
    GTEST_SKIP() << "no bf16 products here: " << e.what();
  }
  auto step = [&](bool factor) {
    NetOptions o;
    o.factor_kv_inputs = factor;
    o.kv_row_chunk = 64;
    PerceiverNet<float> net(c, *backend, o);
    net.store().initialize(4, InitScheme::kDeepMind);
    net.encode(in.video.data(), in.audio.data(), in.labels.data(), in.B, in.mask);
    EXPECT_EQ(net.kv_factor_width(), factor ? 176 : 0);
    return step_outputs_and_grads(net, OutputPoints{{0, 5, 77, 300}, {1, 9}});
  };
  const std::vector<float> want = step(false), got = step(true);
  ASSERT_EQ(want.size(), got.size());
  const double scale = max_abs(want), diff = max_diff(want, got);
  EXPECT_GT(scale, 1e-3);
  EXPECT_LT(diff, 2e-2 * scale) << "max abs diff " << diff << " of " << scale;
  EXPECT_GT(diff, 0.0) << "bf16 products round the factors otherwise: the same bits means they did not run";
}

// With bf16 products the folded encoder over the input's factors keeps its bf16 keys from forward
// for the backward's key sums (EncoderConfig::keep_keys, on with NetOptions::keep_attention_scores
// where no scores are kept) instead of embedding and normalising the inputs again: B·M·176 bf16
// values more, and bitwise the outputs and gradients of making them again. A forward-only encode
// keeps none.
TEST(EncoderPasses, KeptBf16KeysGiveTheBitsOfMakingThemAgain) {
  const SmallBatch<float> in(19);
  ModelConfig c = in.c;
  c.num_labels = 300, c.d_model = 304;
  try {
    (void)make_backend("cpu", {.precision = Precision::kBf16});
  } catch (const Error& e) {
    GTEST_SKIP() << "no bf16 products here: " << e.what();
  }
  auto step = [&](bool keep, Pass pass, int64_t& planned) {
    CountingBackend backend(Precision::kBf16);
    NetOptions o;
    o.keep_attention_scores = keep;
    o.kv_row_chunk = 64;
    PerceiverNet<float> net(c, backend, o);
    net.store().initialize(6, InitScheme::kDeepMind);
    net.encode(in.video.data(), in.audio.data(), in.labels.data(), in.B, in.mask, pass);
    planned = backend.in_use();
    EXPECT_EQ(net.kv_factor_width(), 176);
    EXPECT_TRUE(net.folds_kv_projections());
    return pass == Pass::kWithBackward ? step_outputs_and_grads(net, OutputPoints{{0, 5, 77, 300}, {1, 9}})
                                       : std::vector<float>{};
  };
  int64_t kept_bytes = 0, again_bytes = 0, eval_kept = 0, eval_again = 0;
  const std::vector<float> kept = step(true, Pass::kWithBackward, kept_bytes);
  const std::vector<float> again = step(false, Pass::kWithBackward, again_bytes);
  EXPECT_EQ(kept_bytes - again_bytes, in.B * c.input_tokens() * 176 * 2);
  ASSERT_EQ(kept.size(), again.size());
  EXPECT_GT(max_abs(kept), 1e-3);
  EXPECT_EQ(0, std::memcmp(kept.data(), again.data(), kept.size() * sizeof(float))) << "max diff " << max_diff(kept, again);
  (void)step(true, Pass::kForwardOnly, eval_kept);
  (void)step(false, Pass::kForwardOnly, eval_again);
  EXPECT_EQ(eval_kept, eval_again);
}

// The encoder input's rows made and normalised by LN_kv in one pass (KernelTable::
// embed_layer_norm_forward, the cpu backend's) or apart: a training step gives bitwise the same
// outputs and parameter gradients, the encoder folded (its forward and its backward's key sums
// make LN_kv that way) and projecting (its forward), with masked rows of every modality
// (SmallBatch): 16 × 2289 input rows in chunks of 512, so the fused kernel's blocks of rows end
// inside a chunk and at its end. With bf16 products (where the CPU has them) the folded encoder's
// keys, rounded to bf16 in the fused kernel or by store_bf16 after the layer norm, give the same
// bits too (an even input width, which bf16 keys need: one more padding channel).
TEST(EncoderPasses, InputRowsNormalisedInOnePassGiveTheSameStep) {
  const SmallBatch<float> in(11);
  ModelConfig c = in.c;
  Precision precision = Precision::kFp32;
  auto step = [&](bool fold, bool fused) {
    CountingBackend backend(precision);
    backend.fused_embed = fused;
    NetOptions o;
    o.fold_kv_projections = fold;
    o.kv_row_chunk = 512;
    PerceiverNet<float> net(c, backend, o);
    EXPECT_EQ(Kernels<float>(backend.kernels_f32(), nullptr).embeds_normalised(), fused);
    net.store().initialize(5, InitScheme::kDeepMind);
    net.encode(in.video.data(), in.audio.data(), in.labels.data(), in.B, in.mask);
    EXPECT_EQ(net.folds_kv_projections(), fold);
    return step_outputs_and_grads(net, OutputPoints{{0, 7, 99, 400}, {2, 11}});
  };
  const auto compare = [&](bool fold) -> std::vector<float> {
    const std::vector<float> fused = step(fold, true), apart = step(fold, false);
    EXPECT_EQ(fused.size(), apart.size());
    if (fused.size() != apart.size()) return fused;
    EXPECT_GT(max_abs(fused), 0.1);
    EXPECT_EQ(0, std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)))
        << (fold ? "folded" : "projecting") << " encoder, " << (precision == Precision::kBf16 ? "bf16" : "fp32")
        << ": max diff " << max_diff(fused, apart);
    return fused;
  };
  compare(true);
  compare(false);
  c.input_min_padding_size += 1, c.d_model += 1;
  const std::vector<float> fp32 = step(true, true);
  try {
    precision = Precision::kBf16;
    (void)make_backend("cpu", {.precision = precision});
  } catch (const Error& e) {
    GTEST_SKIP() << "bf16 not checked: " << e.what();
  }
  const std::vector<float> bf16 = compare(true);
  ASSERT_EQ(fp32.size(), bf16.size());
  EXPECT_NE(0, std::memcmp(fp32.data(), bf16.data(), fp32.size() * sizeof(float))) << "bf16 products did not run";
}

}  // namespace
}  // namespace perceiver
