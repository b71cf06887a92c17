// Checkpoints: bit-exact round trips of parameters, optimizer state (SGD, AdamW, LAMB) and
// TrainingState; fallback past corrupt files; errors naming the tensor at fault; pruning;
// h5py readability; and atomic writes (leftover .tmp ignored, SIGKILL mid-write never leaves a
// half-written ckpt-*.h5).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <fstream>
#include <random>
#include <thread>

#include "core/params.h"
#include "io/hdf5_file.h"
#include "optim/optimizer.h"
#include "perceiver/error.h"
#include "train/checkpoint.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, under the build tree.
fs::path test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  const fs::path dir = fs::path(PERCEIVER_BINARY_DIR) / "test_tmp" / "train" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// HF-style names with dots, a bias (not decayed), a layer norm and a rank-3 embedding.
ParamRegistry small_registry(int64_t scale = 1) {
  ParamRegistry r;
  r.add(ParamSpec{"perceiver.embeddings.latents", Shape{4, 3 * scale}, ParamRole::kEmbedding});
  r.add(ParamSpec{"perceiver.encoder.cross_attention.attention.self.query.weight", Shape{5, 7}, ParamRole::kLinearWeight});
  r.add(ParamSpec{"perceiver.encoder.cross_attention.attention.self.query.bias", Shape{5}, ParamRole::kBias});
  r.add(ParamSpec{"perceiver.encoder.cross_attention.layernorm1.weight", Shape{7}, ParamRole::kNormGain});
  r.add(ParamSpec{"perceiver.decoder.output_position_encodings.position_embeddings", Shape{2, 3, 4},
                  ParamRole::kEmbedding});
  return r;
}

void fill_random(float* x, int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = d(gen);
}

// Parameters, and an optimizer that has taken a few steps so every state tensor is non-trivial.
struct Trained {
  ParamStore<float> store;
  std::unique_ptr<Optimizer> opt;
};

Trained trained(const std::string& optimizer, uint32_t seed, int steps = 3, int64_t scale = 1) {
  Trained t{ParamStore<float>(small_registry(scale)), nullptr};
  fill_random(t.store.params().data(), t.store.registry().arena_size(), seed);
  OptimizerOptions o;
  o.name = optimizer;
  t.opt = make_optimizer(o, t.store.registry(), cpu_backend());
  for (int s = 0; s < steps; ++s) {
    fill_random(t.store.grads().data(), t.store.registry().arena_size(), seed + 100 + s);
    t.opt->step(t.store, 1e-2);
  }
  return t;
}

TrainingState sample_state(const std::string& optimizer, int64_t step = 42) {
  TrainingState s;
  s.step = step;
  s.epoch = 3;
  s.sampler_epoch = 4;
  s.sampler_batch = 17;
  s.seed = 0xfedcba9876543210ull;  // high bit set: must survive the int64 attribute
  s.world_size = 2;
  s.sampler_global_batch = 4;  // batch_size 2 × 2 ranks
  s.optimizer = optimizer;
  s.config_yaml = "batch_size: 2\nlr: 1.0e-05\noptimizer: " + optimizer + "\n";
  s.model_yaml = "model:\n  num_latents: 8\n";
  s.class_names = {"abseiling", "air drumming", "class, with \"quotes\""};
  return s;
}

void expect_tensor_bits_equal(const TensorView<float>& a, const TensorView<float>& b, const std::string& name) {
  ASSERT_EQ(a.shape, b.shape) << name;
  EXPECT_EQ(std::memcmp(a.data, b.data, sizeof(float) * size_t(a.numel())), 0) << name << " differs";
}

void save_steps(const fs::path& logdir, const std::vector<int64_t>& steps) {
  for (int64_t s : steps) {
    Trained t = trained("sgd", uint32_t(s));
    save_checkpoint(checkpoint_path(logdir, s), t.store, t.opt.get(), sample_state("sgd", s));
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class CheckpointRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointRoundTrip, ParamsOptimizerStateAndTrainingStateAreBitExact) {
  const fs::path dir = test_dir();
  const std::string name = GetParam();
  Trained a = trained(name, 7);
  const TrainingState state = sample_state(name);
  const fs::path path = save_checkpoint(checkpoint_path(dir, state.step), a.store, a.opt.get(), state);
  EXPECT_EQ(path, dir / "checkpoints" / "ckpt-00000042.h5");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

  Trained b = trained(name, 99, /*steps=*/1);  // different values everywhere
  const TrainingState got = load_checkpoint(path, b.store, b.opt.get());
  for (const auto& e : a.store.registry().entries())
    expect_tensor_bits_equal(a.store.param(e.spec.name), b.store.param(e.spec.name), e.spec.name);
  const auto sa = a.opt->state_tensors(), sb = b.opt->state_tensors();
  ASSERT_EQ(sa.size(), sb.size());
  ASSERT_FALSE(sa.empty());
  for (size_t i = 0; i < sa.size(); ++i) expect_tensor_bits_equal(sa[i].view, sb[i].view, sa[i].name);
  EXPECT_EQ(b.opt->step_count(), 3);

  EXPECT_EQ(got.step, state.step);
  EXPECT_EQ(got.epoch, state.epoch);
  EXPECT_EQ(got.sampler_epoch, state.sampler_epoch);
  EXPECT_EQ(got.sampler_batch, state.sampler_batch);
  EXPECT_EQ(got.seed, state.seed);
  EXPECT_EQ(got.world_size, state.world_size);
  EXPECT_EQ(got.sampler_global_batch, state.sampler_global_batch);
  EXPECT_EQ(got.optimizer, name);
  EXPECT_EQ(got.config_yaml, state.config_yaml);
  EXPECT_EQ(got.model_yaml, state.model_yaml);
  EXPECT_EQ(got.class_names, state.class_names);

  // The next step from the restored state equals the next step of the original.
  fill_random(a.store.grads().data(), a.store.registry().arena_size(), 555);
  std::memcpy(b.store.grads().data(), a.store.grads().data(), sizeof(float) * a.store.registry().arena_size());
  a.opt->step(a.store, 1e-2);
  b.opt->step(b.store, 1e-2);
  for (const auto& e : a.store.registry().entries())
    expect_tensor_bits_equal(a.store.param(e.spec.name), b.store.param(e.spec.name), e.spec.name);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointRoundTrip, ::testing::Values("sgd", "adamw", "lamb"));

TEST(Checkpoint, ParamsOnlyWithoutOptimizer) {
  const fs::path dir = test_dir();
  Trained a = trained("sgd", 1);
  const fs::path p = save_checkpoint(dir / "only_params.h5", a.store, nullptr, sample_state("sgd"));
  Trained b = trained("sgd", 2);
  EXPECT_EQ(load_checkpoint(p, b.store, nullptr).optimizer, "sgd");
  for (const auto& e : a.store.registry().entries())
    expect_tensor_bits_equal(a.store.param(e.spec.name), b.store.param(e.spec.name), e.spec.name);
}

TEST(Checkpoint, PathsSortByStepAndListIgnoresOtherFiles) {
  const fs::path dir = test_dir();
  EXPECT_EQ(checkpoint_path(dir, 7).filename(), "ckpt-00000007.h5");
  EXPECT_TRUE(list_checkpoints(dir).empty());  // no checkpoints folder yet
  save_steps(dir, {5, 100, 20});
  std::ofstream(dir / "checkpoints" / "ckpt-00000200.h5.tmp") << "partial";
  std::ofstream(dir / "checkpoints" / "notes.txt") << "x";
  std::ofstream(dir / "checkpoints" / "ckpt-abc.h5") << "x";
  const auto all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].filename(), "ckpt-00000100.h5");
  EXPECT_EQ(all[1].filename(), "ckpt-00000020.h5");
  EXPECT_EQ(all[2].filename(), "ckpt-00000005.h5");
}

// --- corrupt newest falls back to the previous one ---

enum class Damage { kTruncateHalf, kRandomBytes, kEmpty, kMissingAttributes };

void damage(const fs::path& p, Damage how) {
  switch (how) {
    case Damage::kTruncateHalf:
      fs::resize_file(p, fs::file_size(p) / 2);
      break;
    case Damage::kRandomBytes: {
      const auto n = fs::file_size(p);
      std::mt19937 gen(3);
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      for (uintmax_t i = 0; i < n; ++i) out.put(char(gen() & 0xff));
      break;
    }
    case Damage::kEmpty:
      std::ofstream(p, std::ios::trunc).flush();
      break;
    case Damage::kMissingAttributes: {
      // A well-formed HDF5 file with the tensors but without the attributes.
      Trained t = trained("sgd", 5);
      H5File f = H5File::create(p.string());
      for (const auto& e : t.store.registry().entries())
        f.write<float>("/params/" + e.spec.name, t.store.param(e.spec.name).data, e.spec.shape.dims());
      break;
    }
  }
}

class CorruptNewest : public ::testing::TestWithParam<Damage> {};

TEST_P(CorruptNewest, FallsBackToPreviousWithOneWarningNamingTheFile) {
  const fs::path dir = test_dir();
  save_steps(dir, {10, 20, 30});
  const fs::path newest = checkpoint_path(dir, 30);
  damage(newest, GetParam());

  std::vector<std::string> warnings;
  const auto found = newest_valid_checkpoint(dir, &warnings);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, checkpoint_path(dir, 20));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(newest.string()), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("skipping"), std::string::npos) << warnings[0];
  std::printf("  warning: %s\n", warnings[0].c_str());

  // The fallback really loads, and the damaged one reports an error naming the file.
  Trained t = trained("sgd", 0);
  EXPECT_EQ(load_checkpoint(*found, t.store, t.opt.get()).step, 20);
  EXPECT_NE(error_of([&] { load_checkpoint(newest, t.store, t.opt.get()); }).find(newest.string()),
            std::string::npos);
}

void PrintTo(Damage d, std::ostream* os) { *os << int(d); }

std::string damage_name(const ::testing::TestParamInfo<Damage>& info) {
  static const char* const names[] = {"TruncateHalf", "RandomBytes", "Empty", "MissingAttributes"};
  return names[int(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Damages, CorruptNewest,
                         ::testing::Values(Damage::kTruncateHalf, Damage::kRandomBytes, Damage::kEmpty,
                                           Damage::kMissingAttributes),
                         damage_name);

TEST(Checkpoint, SkipsSeveralCorruptAndReturnsNoneWhenAllAre) {
  const fs::path dir = test_dir();
  save_steps(dir, {10, 20, 30});
  damage(checkpoint_path(dir, 30), Damage::kEmpty);
  damage(checkpoint_path(dir, 20), Damage::kTruncateHalf);
  std::vector<std::string> warnings;
  EXPECT_EQ(newest_valid_checkpoint(dir, &warnings), checkpoint_path(dir, 10));
  EXPECT_EQ(warnings.size(), 2u);
  damage(checkpoint_path(dir, 10), Damage::kRandomBytes);
  warnings.clear();
  EXPECT_FALSE(newest_valid_checkpoint(dir, &warnings).has_value());
  EXPECT_EQ(warnings.size(), 3u);
  EXPECT_FALSE(newest_valid_checkpoint(test_dir() / "nothing", nullptr).has_value());
}

// --- errors name what is wrong ---

TEST(Checkpoint, MissingTensorIsNamed) {
  const fs::path dir = test_dir();
  ParamRegistry partial;
  const ParamRegistry full = small_registry();
  for (const auto& e : full.entries())
    if (e.spec.name.find("query.bias") == std::string::npos) partial.add(e.spec);
  ParamStore<float> store(partial);
  const fs::path p = save_checkpoint(dir / "partial.h5", store, nullptr, sample_state("sgd"));

  Trained t = trained("sgd", 1);
  const std::vector<float> before(t.store.params().data(), t.store.params().data() + t.store.registry().arena_size());
  const std::string err = error_of([&] { load_checkpoint(p, t.store, nullptr); });
  EXPECT_NE(err.find("perceiver.encoder.cross_attention.attention.self.query.bias"), std::string::npos) << err;
  EXPECT_NE(err.find("missing"), std::string::npos) << err;
  // Validation happens before any write: the model is untouched.
  EXPECT_EQ(std::memcmp(before.data(), t.store.params().data(), before.size() * sizeof(float)), 0);
}

TEST(Checkpoint, MisShapedTensorIsNamedWithBothShapes) {
  const fs::path dir = test_dir();
  Trained wide = trained("adamw", 1, 1, /*scale=*/2);  // latents [4,6]
  const fs::path p = save_checkpoint(dir / "wide.h5", wide.store, wide.opt.get(), sample_state("adamw"));
  Trained t = trained("adamw", 2);  // latents [4,3]
  const std::string err = error_of([&] { load_checkpoint(p, t.store, t.opt.get()); });
  EXPECT_NE(err.find("perceiver.embeddings.latents"), std::string::npos) << err;
  EXPECT_NE(err.find("[4,6]"), std::string::npos) << err;
  EXPECT_NE(err.find("[4,3]"), std::string::npos) << err;
}

TEST(Checkpoint, ExtraParameterIsAnError) {
  const fs::path dir = test_dir();
  ParamRegistry more = small_registry();
  more.add(ParamSpec{"perceiver.extra.weight", Shape{2, 2}, ParamRole::kLinearWeight});
  ParamStore<float> store(more);
  const fs::path p = save_checkpoint(dir / "more.h5", store, nullptr, sample_state("sgd"));
  Trained t = trained("sgd", 1);
  const std::string err = error_of([&] { load_checkpoint(p, t.store, nullptr); });
  EXPECT_NE(err.find("perceiver.extra.weight"), std::string::npos) << err;
}

TEST(Checkpoint, OptimizerMismatchAndMissingStateAreNamed) {
  const fs::path dir = test_dir();
  Trained sgd = trained("sgd", 1);
  const fs::path p = save_checkpoint(dir / "sgd.h5", sgd.store, sgd.opt.get(), sample_state("sgd"));
  Trained adamw = trained("adamw", 1);
  std::string err = error_of([&] { load_checkpoint(p, adamw.store, adamw.opt.get()); });
  EXPECT_NE(err.find("'sgd'"), std::string::npos) << err;
  EXPECT_NE(err.find("HINT"), std::string::npos) << err;

  // Parameters only, but the run has an optimizer: the state tensor is named.
  const fs::path q = save_checkpoint(dir / "noopt.h5", sgd.store, nullptr, sample_state("sgd"));
  err = error_of([&] { load_checkpoint(q, sgd.store, sgd.opt.get()); });
  EXPECT_NE(err.find("/optimizer/momentum_buffer/perceiver.embeddings.latents"), std::string::npos) << err;
}

TEST(Checkpoint, NewerFormatVersionFailsWithHint) {
  const fs::path dir = test_dir();
  Trained t = trained("sgd", 1);
  const fs::path p = save_checkpoint(checkpoint_path(dir, 1), t.store, t.opt.get(), sample_state("sgd"));
  H5File::open(p.string(), /*writable=*/true).set_attr("/", "format_version", kCheckpointFormatVersion + 1);
  const std::string err = error_of([&] { load_checkpoint(p, t.store, t.opt.get()); });
  EXPECT_NE(err.find("version"), std::string::npos) << err;
  EXPECT_NE(err.find("HINT"), std::string::npos) << err;
  // Not skipped by --resume auto: resuming from an older file would lose the newer one.
  EXPECT_EQ(newest_valid_checkpoint(dir, nullptr), p);
}

// Checkpoints written before sampler_global_batch existed: the size comes from the stored
// config's batch_size × world_size (2 × 2 in sample_state).
TEST(Checkpoint, GlobalBatchOfOlderFilesComesFromTheStoredConfig) {
  const fs::path dir = test_dir();
  Trained t = trained("sgd", 1);
  TrainingState s = sample_state("sgd");
  s.sampler_global_batch = 7;
  const fs::path p = save_checkpoint(checkpoint_path(dir, 1), t.store, t.opt.get(), s);
  EXPECT_EQ(load_checkpoint(p, t.store, t.opt.get()).sampler_global_batch, 7);
  {
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Adelete_by_name(f, "/", "sampler_global_batch", H5P_DEFAULT), 0);
    ASSERT_GE(H5Adelete_by_name(f, "/", "model_yaml", H5P_DEFAULT), 0);  // not stored before either
    ASSERT_GE(H5Adelete_by_name(f, "/", "class_names", H5P_DEFAULT), 0);  // nor this
    ASSERT_GE(H5Fclose(f), 0);
  }
  const TrainingState older = load_checkpoint(p, t.store, t.opt.get());
  EXPECT_EQ(older.sampler_global_batch, 4);
  EXPECT_EQ(older.model_yaml, "");  // the trainer then resumes unchecked, with a warning
  EXPECT_FALSE(stored_model_config(p).has_value());
  EXPECT_TRUE(older.class_names.empty());  // perceiver-eval --video then numbers the classes
}

TEST(Checkpoint, WrongFormatAttributeIsRejected) {
  const fs::path dir = test_dir();
  Trained t = trained("sgd", 1);
  const fs::path p = save_checkpoint(checkpoint_path(dir, 1), t.store, t.opt.get(), sample_state("sgd"));
  H5File::open(p.string(), true).set_attr("/", "format", std::string("something-else"));
  std::vector<std::string> warnings;
  EXPECT_FALSE(newest_valid_checkpoint(dir, &warnings).has_value());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("format"), std::string::npos) << warnings[0];
}

// --- pruning ---

TEST(Checkpoint, PruneKeepsNewestK) {
  const fs::path dir = test_dir();
  save_steps(dir, {1, 2, 3, 4, 5});
  prune_checkpoints(dir, 0, checkpoint_path(dir, 5));  // keep all
  EXPECT_EQ(list_checkpoints(dir).size(), 5u);
  prune_checkpoints(dir, 2, checkpoint_path(dir, 5));
  const auto left = list_checkpoints(dir);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], checkpoint_path(dir, 5));
  EXPECT_EQ(left[1], checkpoint_path(dir, 4));
  prune_checkpoints(dir, 10, checkpoint_path(dir, 5));
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
}

// Issue 15, High 2: a higher-step file this run did not write (a previous run's, or an
// unreadable newest that --resume auto skipped) used to count as one of the K newest, so the
// checkpoints just written were deleted. Only files older than the one just written count.
TEST(Checkpoint, PruneNeverDeletesTheCheckpointJustWritten) {
  const fs::path dir = test_dir();
  save_steps(dir, {100});                                           // an earlier run's
  std::ofstream(checkpoint_path(dir, 200)) << "unreadable";          // skipped by --resume auto
  for (int64_t step : {4, 5, 6}) {
    save_steps(dir, {step});
    prune_checkpoints(dir, 1, checkpoint_path(dir, step));
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, step))) << "step " << step << " deleted right after its save";
  }
  const auto left = list_checkpoints(dir);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0], checkpoint_path(dir, 200));
  EXPECT_EQ(left[1], checkpoint_path(dir, 100));
  EXPECT_EQ(left[2], checkpoint_path(dir, 6));
  prune_checkpoints(dir, 3, checkpoint_path(dir, 6));
  EXPECT_EQ(list_checkpoints(dir).size(), 3u);
  std::vector<std::string> warnings;
  EXPECT_EQ(newest_valid_checkpoint(dir, &warnings), checkpoint_path(dir, 100));
}

TEST(Checkpoint, StartingAfreshRefusesAFolderWithCheckpointsUnlessOverwrite) {
  const fs::path dir = test_dir();
  EXPECT_TRUE(start_afresh(dir, false, true).empty());  // nothing there: nothing to refuse
  save_steps(dir, {3, 6});
  const std::string err = error_of([&] { start_afresh(dir, false, true); });
  EXPECT_NE(err.find("ckpt-00000006.h5, ckpt-00000003.h5"), std::string::npos) << err;
  EXPECT_NE(err.find("--overwrite"), std::string::npos) << err;
  EXPECT_NE(err.find("--resume auto"), std::string::npos) << err;
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
  EXPECT_EQ(start_afresh(dir, true, /*remove=*/false).size(), 2u);  // a rank that does not own LOGDIR
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
  EXPECT_EQ(start_afresh(dir, true, true).size(), 2u);
  EXPECT_TRUE(list_checkpoints(dir).empty());
}

// --- integrity: checksums, finite values, attribute types and ranges ---

// Replaces attribute `key` on "/" by a 1-D int64 array of n elements.
void set_array_attr(const fs::path& p, const char* key, size_t n) {
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Adelete_by_name(f, "/", key, H5P_DEFAULT), 0);
  const hsize_t dims = n;
  const hid_t space = H5Screate_simple(1, &dims, nullptr);
  const hid_t a = H5Acreate_by_name(f, "/", key, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(a, 0);
  std::vector<int64_t> v(n, 7);
  ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, v.data()), 0);
  H5Aclose(a);
  H5Sclose(space);
  ASSERT_GE(H5Fclose(f), 0);
}

// Issue 15, High 1: an array where a scalar is expected was read whole into one int64 on the
// stack (SIGSEGV). Now every reader names the attribute and what it holds.
TEST(Checkpoint, ArrayAttributeWhereAScalarBelongsIsNamed) {
  const fs::path dir = test_dir();
  save_steps(dir, {10, 20});
  const fs::path newest = checkpoint_path(dir, 20);
  set_array_attr(newest, "step", 4000);
  Trained t = trained("sgd", 0);
  const std::string err = error_of([&] { load_checkpoint(newest, t.store, t.opt.get()); });
  EXPECT_NE(err.find(newest.string() + ": attribute 'step' on '/' must be one integer, found 4000 integers"),
            std::string::npos) << err;
  EXPECT_NE(error_of([&] { read_checkpoint_state(newest); }).find("4000 integers"), std::string::npos);
  std::vector<std::string> warnings;
  EXPECT_EQ(newest_valid_checkpoint(dir, &warnings), checkpoint_path(dir, 10));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'step'"), std::string::npos) << warnings[0];
}

TEST(Checkpoint, AttributesOutOfRangeAreNamed) {
  const fs::path dir = test_dir();
  Trained t = trained("sgd", 1);
  const fs::path p = save_checkpoint(checkpoint_path(dir, 1), t.store, t.opt.get(), sample_state("sgd"));
  const std::vector<std::pair<const char*, int64_t>> bad = {
      {"world_size", 0}, {"world_size", int64_t(1) << 40}, {"sampler_batch", -1}, {"sampler_batch", int64_t(1) << 50},
      {"sampler_global_batch", 0}, {"sampler_global_batch", int64_t(1) << 40}, {"step", -5}};
  for (const auto& [key, value] : bad) {
    const fs::path q = dir / (std::string(key) + std::to_string(value) + ".h5");
    fs::copy_file(p, q);
    H5File::open(q.string(), true).set_attr("/", key, value);
    const std::string err = error_of([&] { load_checkpoint(q, t.store, t.opt.get()); });
    EXPECT_NE(err.find(std::string("attribute ") + key + " is " + std::to_string(value) + ", outside"),
              std::string::npos) << err;
  }
  const fs::path big = dir / "big_yaml.h5";
  fs::copy_file(p, big);
  H5File::open(big.string(), true).set_attr("/", "config_yaml", std::string(size_t(2) << 20, 'x'));
  EXPECT_NE(error_of([&] { load_checkpoint(big, t.store, t.opt.get()); }).find("config_yaml has 2097152 bytes"),
            std::string::npos);
  const fs::path big_model = dir / "big_model_yaml.h5";
  fs::copy_file(p, big_model);
  H5File::open(big_model.string(), true).set_attr("/", "model_yaml", std::string(size_t(2) << 20, 'x'));
  EXPECT_NE(error_of([&] { load_checkpoint(big_model, t.store, t.opt.get()); }).find("model_yaml has 2097152 bytes"),
            std::string::npos);
}

// The file offset of the first occurrence of `pattern` (the raw bytes of a tensor).
size_t find_bytes(const std::string& file, const std::vector<float>& pattern) {
  const std::string needle(reinterpret_cast<const char*>(pattern.data()), pattern.size() * sizeof(float));
  return file.find(needle);
}

// Issue 15, Medium 5: flipped bytes in a tensor loaded silently (as NaN weights, here as a
// slightly different finite value). The Fletcher32 checksum names the tensor.
TEST(Checkpoint, FlippedBitInATensorFailsItsChecksumNamingIt) {
  const fs::path dir = test_dir();
  save_steps(dir, {10, 20});
  const fs::path newest = checkpoint_path(dir, 20);
  Trained t = trained("sgd", 20);  // the values save_steps wrote for step 20
  const TensorView<float> w = t.store.param("perceiver.encoder.cross_attention.attention.self.query.weight");
  std::string bytes;
  {
    std::ifstream in(newest, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = find_bytes(bytes, std::vector<float>(w.data, w.data + w.numel()));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] ^= 0x01;  // the lowest mantissa bit of element 1: still a finite float
  std::ofstream(newest, std::ios::binary | std::ios::trunc) << bytes;

  Trained u = trained("sgd", 0);
  const std::vector<float> before(u.store.params().data(), u.store.params().data() + u.store.registry().arena_size());
  const std::string err = error_of([&] { load_checkpoint(newest, u.store, u.opt.get()); });
  EXPECT_NE(err.find("/params/perceiver.encoder.cross_attention.attention.self.query.weight"), std::string::npos)
      << err;
  EXPECT_NE(err.find("Fletcher32"), std::string::npos) << err;
  EXPECT_EQ(std::memcmp(before.data(), u.store.params().data(), before.size() * sizeof(float)), 0)
      << "a failed load changed the model";
  std::vector<std::string> warnings;
  EXPECT_EQ(newest_valid_checkpoint(dir, &warnings), checkpoint_path(dir, 10));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("query.weight"), std::string::npos) << warnings[0];
}

// Rewrites a dataset in place through HDF5 (so its checksum, if any, matches the new values).
void overwrite_dataset(const fs::path& p, const std::string& name, const std::vector<float>& values) {
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(ds);
  ASSERT_GE(H5Fclose(f), 0);
}

TEST(Checkpoint, NonFiniteValuesAreNeverLoadedNorSaved) {
  const fs::path dir = test_dir();
  save_steps(dir, {10, 20});
  const fs::path newest = checkpoint_path(dir, 20);
  std::vector<float> bias(5, 0.5f);
  bias[3] = std::numeric_limits<float>::quiet_NaN();
  overwrite_dataset(newest, "/params/perceiver.encoder.cross_attention.attention.self.query.bias", bias);
  Trained t = trained("sgd", 0);
  std::string err = error_of([&] { load_checkpoint(newest, t.store, t.opt.get()); });
  EXPECT_NE(err.find("'/params/perceiver.encoder.cross_attention.attention.self.query.bias' holds nan at element 3"),
            std::string::npos) << err;
  EXPECT_EQ(newest_valid_checkpoint(dir, nullptr), checkpoint_path(dir, 10));

  // A diverged state is refused before anything is written.
  t.store.param("perceiver.embeddings.latents").data[2] = std::numeric_limits<float>::infinity();
  const fs::path next = checkpoint_path(dir, 30);
  err = error_of([&] { save_checkpoint(next, t.store, t.opt.get(), sample_state("sgd", 30)); });
  EXPECT_NE(err.find("parameter 'perceiver.embeddings.latents' holds inf at element 2"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(next));
  EXPECT_FALSE(fs::exists(next.string() + ".tmp"));
}

// Replaces a dataset by a contiguous copy without a checksum (as format version 1 wrote).
void drop_checksum(const fs::path& p, const std::string& name) {
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t space = H5Dget_space(ds);
  std::vector<float> v(size_t(H5Sget_simple_extent_npoints(space)));
  ASSERT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(ds);
  ASSERT_GE(H5Ldelete(f, name.c_str(), H5P_DEFAULT), 0);
  const hid_t plain = H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(plain, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(plain);
  H5Sclose(space);
  ASSERT_GE(H5Fclose(f), 0);
}

TEST(Checkpoint, Version2NeedsAChecksumOnEveryTensorVersion1LoadsWithout) {
  const fs::path dir = test_dir();
  Trained a = trained("adamw", 3);
  const fs::path p = save_checkpoint(checkpoint_path(dir, 1), a.store, a.opt.get(), sample_state("adamw"));
  drop_checksum(p, "/optimizer/exp_avg/perceiver.embeddings.latents");
  Trained b = trained("adamw", 4);
  const std::string err = error_of([&] { load_checkpoint(p, b.store, b.opt.get()); });
  EXPECT_NE(err.find("'/optimizer/exp_avg/perceiver.embeddings.latents' has no checksum"), std::string::npos) << err;
  H5File::open(p.string(), true).set_attr("/", "format_version", int64_t(1));
  EXPECT_EQ(load_checkpoint(p, b.store, b.opt.get()).step, 42);
  for (const auto& e : a.store.registry().entries())
    expect_tensor_bits_equal(a.store.param(e.spec.name), b.store.param(e.spec.name), e.spec.name);
}

// Issue 15, Medium 3: a save that fails on a full disk (here `ulimit -f`, with SIGXFSZ ignored
// as Python and many shells do) gave a clear error, then the process died inside HDF5 at exit
// (exit 139) because HDF5 could not close the half-written file. A child saves under the limit
// and runs HDF5's exit-time cleanup: its exit status must be its own, the old checkpoint intact.
TEST(Checkpoint, FailedSaveOnAFullDiskKeepsTheOldOneAndExitsCleanly) {
  const fs::path dir = test_dir();
  save_steps(dir, {10});
  const std::string before = [&] {
    std::ifstream in(checkpoint_path(dir, 10), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 << 10, 64 << 10};  // 64 KiB: the big checkpoint cannot fit
    setrlimit(RLIMIT_FSIZE, &limit);
    ParamRegistry big;
    big.add(ParamSpec{"perceiver.big.weight", Shape{512, 512}, ParamRole::kLinearWeight});
    ParamStore<float> store(big);
    int code = 10;
    try {
      save_checkpoint(checkpoint_path(dir, 20), store, nullptr, sample_state("sgd", 20));
    } catch (const Error& e) {
      code = std::string(e.what()).find("File too large") != std::string::npos ? 0 : 11;
      std::fprintf(stderr, "  child: %s\n", e.what());
    }
    H5close();  // HDF5's exit-time cleanup, where the old code crashed (exit 139)
    std::_Exit(code);  // no other exit handlers: OpenMP's threads do not exist in a forked child
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: the save did not fail; 11: the error did not say why";
  EXPECT_FALSE(fs::exists(checkpoint_path(dir, 20)));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir, 20).string() + ".tmp"));
  std::ifstream in(checkpoint_path(dir, 10), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), before);
}

// --- h5py ---

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

TEST(Checkpoint, OpensInH5py) {
  const fs::path dir = test_dir();
  Trained t = trained("adamw", 4);
  const fs::path p = save_checkpoint(checkpoint_path(dir, 42), t.store, t.opt.get(), sample_state("adamw"));
  const fs::path out = dir / "h5py.txt";
  const std::string py =
      "import sys, h5py\n"
      "f = h5py.File(sys.argv[1], 'r')\n"
      "a = f.attrs\n"
      "print(a['format'], int(a['format_version']), int(a['step']), a['optimizer'])\n"
      "print('classes', list(a['class_names']))\n"
      "for k in sorted(f['params']): print(k, f['params'][k].shape, f['params'][k].dtype)\n"
      "print('states', sorted(f['optimizer']))\n"
      "print('sum', float(f['params/perceiver.encoder.cross_attention.layernorm1.weight'][:].astype('f8').sum()))\n";
  const std::string cmd = shell_quote(PERCEIVER_PYTHON) + " -c " + shell_quote(py) + " " + shell_quote(p.string()) +
                          " > " + shell_quote(out.string()) + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << text << "\nHINT: " PERCEIVER_PYTHON " needs python3-h5py";
  EXPECT_NE(text.find("libperceiver-checkpoint 2 42 adamw"), std::string::npos) << text;
  for (const auto& e : t.store.registry().entries())
    EXPECT_NE(text.find(e.spec.name + " (" ), std::string::npos) << e.spec.name << "\n" << text;
  EXPECT_NE(text.find("perceiver.decoder.output_position_encodings.position_embeddings (2, 3, 4) float32"),
            std::string::npos) << text;
  EXPECT_NE(text.find("states ['exp_avg', 'exp_avg_sq']"), std::string::npos) << text;
  EXPECT_NE(text.find("classes ['abseiling', 'air drumming', 'class, with \"quotes\"']"), std::string::npos) << text;
  double sum = 0;
  const auto w = t.store.param("perceiver.encoder.cross_attention.layernorm1.weight");
  for (int64_t i = 0; i < w.numel(); ++i) sum += double(w.data[i]);
  const auto pos = text.find("sum ");
  ASSERT_NE(pos, std::string::npos) << text;
  EXPECT_NEAR(std::stod(text.substr(pos + 4)), sum, 1e-9);
}

// --- atomicity ---

TEST(Checkpoint, LeftoverTmpIsIgnoredAndOverwritten) {
  const fs::path dir = test_dir();
  save_steps(dir, {10});
  const fs::path tmp = checkpoint_path(dir, 20).string() + ".tmp";
  std::ofstream(tmp) << "half a checkpoint";
  std::vector<std::string> warnings;
  EXPECT_EQ(newest_valid_checkpoint(dir, &warnings), checkpoint_path(dir, 10));
  EXPECT_TRUE(warnings.empty());  // a .tmp is not a checkpoint: no warning either
  save_steps(dir, {20});
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(newest_valid_checkpoint(dir, &warnings), checkpoint_path(dir, 20));
}

TEST(Checkpoint, FailedSaveRemovesTmpAndNamesTheFile) {
  const fs::path dir = test_dir();
  // The final name is taken by a non-empty directory, so the rename fails after the write.
  const fs::path p = checkpoint_path(dir, 7);
  fs::create_directories(p / "blocker");
  Trained t = trained("sgd", 1);
  const std::string err = error_of([&] { save_checkpoint(p, t.store, t.opt.get(), sample_state("sgd")); });
  EXPECT_NE(err.find(p.string()), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

// A child saves checkpoints in a loop (large enough that a write takes a while) and is killed
// with SIGKILL at several points; every ckpt-*.h5 left behind must load completely.
TEST(Checkpoint, SigkillDuringWritesNeverLeavesAHalfWrittenCheckpoint) {
  const fs::path dir = test_dir();
  ParamRegistry big;
  big.add(ParamSpec{"perceiver.big.weight", Shape{1024, 1024}, ParamRole::kLinearWeight});
  big.add(ParamSpec{"perceiver.big.bias", Shape{1024}, ParamRole::kBias});
  const int64_t delays_ms[] = {3, 11, 25, 40, 70};
  int64_t first_step = 0, tmp_left = 0;
  for (int64_t delay : delays_ms) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child only writes files; no OpenMP work after fork().
      try {
        ParamStore<float> store(big);
        for (int64_t s = first_step;; ++s) {
          store.params().data()[0] = float(s);
          save_checkpoint(checkpoint_path(dir, s), store, nullptr, sample_state("sgd", s));
          prune_checkpoints(dir, 2, checkpoint_path(dir, s));
        }
      } catch (...) {
        _exit(3);  // never return into the test runner
      }
    }
    // Kill points tied to progress, not wall time (the machine may be busy): once the child's
    // first checkpoint of this round exists, plus a delay that lands in later writes.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fs::exists(checkpoint_path(dir, first_step)) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    // A kill mid-write leaves a .tmp (the next child, starting at that step, replaces it).
    if (fs::exists(dir / "checkpoints"))
      for (const auto& f : fs::directory_iterator(dir / "checkpoints")) tmp_left += f.path().extension() == ".tmp";
    ParamStore<float> store(big);
    for (const fs::path& p : list_checkpoints(dir)) {
      const TrainingState s = load_checkpoint(p, store, nullptr);  // throws if half written
      EXPECT_EQ(store.params().data()[0], float(s.step)) << p;
      first_step = std::max(first_step, s.step + 1);
    }
    std::vector<std::string> warnings;
    newest_valid_checkpoint(dir, &warnings);
    EXPECT_TRUE(warnings.empty()) << warnings.front();
  }
  EXPECT_GT(first_step, 0) << "the child never finished a checkpoint";

  std::printf("  %lld kills left a .tmp behind (killed mid-write); %lld checkpoints completed\n",
              static_cast<long long>(tmp_left), static_cast<long long>(first_step));
}

}  // namespace
}  // namespace perceiver
