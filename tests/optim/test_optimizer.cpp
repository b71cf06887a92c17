// Optimizers against tests/reference/optim_ref.py (torch SGD/AdamW, DeepMind's LAMB, schedules),
// gradient clipping, non-finite handling, state listing, option validation, and bitwise
// identical results at 1 and 2 OpenMP threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "core/params.h"
#include "io/hdf5_file.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

// Runs the generator once per test process; fails loudly when PyTorch is missing.
const std::string& fixture_path() {
  static const std::string path = [] {
    const fs::path dir = fs::path(PERCEIVER_BINARY_DIR) / "fixtures" / "optim";
    fs::create_directories(dir);
    const fs::path out = dir / "optim_ref.h5";
    const std::string cmd = std::string(PERCEIVER_PYTHON) + " " + PERCEIVER_SOURCE_DIR +
                            "/tests/reference/optim_ref.py --out " + out.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "fixture generator failed (is python3-torch installed?): " << cmd;
    return out.string();
  }();
  return path;
}

ParamRole role_from_name(const std::string& s) {
  static const std::map<std::string, ParamRole> roles = {
      {"kLinearWeight", ParamRole::kLinearWeight}, {"kHeadWeight", ParamRole::kHeadWeight},
      {"kBias", ParamRole::kBias}, {"kNormGain", ParamRole::kNormGain},
      {"kNormBias", ParamRole::kNormBias}, {"kEmbedding", ParamRole::kEmbedding}};
  return roles.at(s);
}

ParamRegistry fixture_registry(const H5File& f) {
  const auto names = f.read_strings("meta/names");
  const auto roles = f.read_strings("meta/roles");
  ParamRegistry reg;
  for (size_t i = 0; i < names.size(); ++i)
    reg.add(ParamSpec{names[i], Shape(f.shape("init/" + names[i])), role_from_name(roles[i])});
  return reg;
}

// Copies step k of a [K, *shape] dataset (or the whole dataset when k < 0) into each tensor.
void load(const H5File& f, const std::string& prefix, int k, const ParamRegistry& reg, float* arena) {
  for (const auto& e : reg.entries()) {
    const auto all = f.read<float>(prefix + e.spec.name);
    const int64_t n = e.spec.shape.numel();
    const int64_t off = k < 0 ? 0 : k * n;
    std::copy(all.begin() + off, all.begin() + off + n, arena + e.offset);
  }
}

OptimizerOptions case_options(const H5File& f, const std::string& group) {
  OptimizerOptions o;
  o.name = f.attr_string(group, "optimizer");
  o.momentum = f.attr_double(group, "momentum");
  o.beta1 = f.attr_double(group, "beta1");
  o.beta2 = f.attr_double(group, "beta2");
  o.eps = f.attr_double(group, "eps");
  o.weight_decay = f.attr_double(group, "weight_decay");
  o.max_grad_norm = f.attr_double(group, "max_grad_norm");
  return o;
}

// |c − r| ≤ atol + rtol·|r| per element, and the error relative to how far the parameter moved
// from its start (so a tiny lr cannot hide a wrong update inside rtol·|p|).
void expect_params_close(const ParamRegistry& reg, const float* got, const std::vector<float>& ref_all, int k,
                         const float* init, const std::string& name, double rtol, double atol) {
  const auto& e = reg.at(name);
  const int64_t n = e.spec.shape.numel();
  const float* ref = ref_all.data() + k * n;
  const float* c = got + e.offset;
  const float* p0 = init + e.offset;
  double max_err = 0, max_move = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::abs(double(c[i]) - ref[i]);
    max_err = std::max(max_err, err);
    max_move = std::max(max_move, std::abs(double(ref[i]) - p0[i]));
    if (!(err <= atol + rtol * std::abs(ref[i])) && bad++ < 3)
      ADD_FAILURE() << name << "[" << i << "] step " << k << ": got " << c[i] << " want " << ref[i];
  }
  EXPECT_EQ(bad, 0) << name << " step " << k << ": " << bad << " mismatches, max |diff| " << max_err;
  if (max_move > 0) {
    EXPECT_LE(max_err / max_move, 2e-3) << name << " step " << k << ": error vs movement";
  }
}

void check_case(const std::string& cname, double rtol) {
  const H5File f = H5File::open(fixture_path());
  const std::string group = "cases/" + cname;
  ParamStore<float> store(fixture_registry(f));
  const ParamRegistry& reg = store.registry();
  load(f, "init/", -1, reg, store.params().data());
  const std::vector<float> init(store.params().data(), store.params().data() + reg.arena_size());
  auto opt = make_optimizer(case_options(f, group), reg, cpu_backend());
  const auto lrs = f.read<double>(group + "/lr");
  const auto norms = f.read<double>(group + "/grad_norm");
  std::map<std::string, std::vector<float>> ref;
  for (const auto& e : reg.entries()) ref[e.spec.name] = f.read<float>(group + "/params/" + e.spec.name);
  for (int k = 0; k < int(lrs.size()); ++k) {
    load(f, "grads/", k, reg, store.grads().data());
    const StepResult r = opt->step(store, lrs[k]);
    EXPECT_FALSE(r.skipped);
    EXPECT_NEAR(r.grad_norm, norms[k], 1e-9 * norms[k]) << cname << " step " << k;
    EXPECT_EQ(r.clipped, opt->options().max_grad_norm > 0 && norms[k] >= opt->options().max_grad_norm);
    for (const auto& e : reg.entries())
      expect_params_close(reg, store.params().data(), ref[e.spec.name], k, init.data(), e.spec.name, rtol, 1e-7);
  }
  EXPECT_EQ(opt->step_count(), int64_t(lrs.size()));
}

TEST(OptimizerParity, SgdSeedDefaults) { check_case("sgd_seed", 1e-6); }
TEST(OptimizerParity, SgdMomentumWeightDecay) { check_case("sgd", 1e-5); }
TEST(OptimizerParity, SgdClipped) { check_case("sgd_clip", 1e-5); }
TEST(OptimizerParity, AdamW) { check_case("adamw", 1e-5); }
TEST(OptimizerParity, AdamWClipped) { check_case("adamw_clip", 1e-5); }
TEST(OptimizerParity, LambDeepMind) { check_case("lamb", 1e-5); }
TEST(OptimizerParity, LambWithCosineSchedule) { check_case("lamb_schedule", 1e-5); }

TEST(ScheduleParity, MatchesReference) {
  const H5File f = H5File::open(fixture_path());
  for (const auto& name : f.list("schedules")) {
    const std::string g = "schedules/" + name;
    ScheduleOptions o;
    o.name = f.attr_string(g, "name");
    o.lr = f.attr_double(g, "lr");
    o.warmup_steps = f.attr_int(g, "warmup_steps");
    o.total_steps = f.attr_int(g, "total_steps");
    o.final_lr = f.attr_double(g, "final_lr");
    const Schedule s(o);
    const auto ref = f.read<double>(g + "/lr");
    for (size_t k = 0; k < ref.size(); ++k)
      EXPECT_NEAR(s.lr_at(int64_t(k)), ref[k], 1e-12 * o.lr) << name << " step " << k;
  }
}

// ---- Properties without a reference ----------------------------------------------------------

ParamRegistry big_registry() {
  ParamRegistry reg;
  reg.add(ParamSpec{"a.weight", Shape{300, 257}, ParamRole::kLinearWeight});  // several chunks
  reg.add(ParamSpec{"a.bias", Shape{257}, ParamRole::kBias});
  reg.add(ParamSpec{"norm.weight", Shape{1000}, ParamRole::kNormGain});
  reg.add(ParamSpec{"latents", Shape{70, 333}, ParamRole::kEmbedding});
  return reg;
}

void fill_pattern(float* x, int64_t n, uint32_t seed) {
  uint32_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float(s >> 8) / float(1 << 24) - 0.5f) * 2.0f;
  }
}

// Three steps of `name` at `threads` threads; returns params followed by every state tensor.
std::vector<float> run_threads(const std::string& name, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  ParamStore<float> store(big_registry());
  const int64_t n = store.registry().arena_size();
  fill_pattern(store.params().data(), n, 1);
  OptimizerOptions o;
  o.name = name;
  o.weight_decay = 0.05;
  o.max_grad_norm = 50.0;
  auto opt = make_optimizer(o, store.registry(), cpu_backend());
  for (int k = 0; k < 3; ++k) {
    fill_pattern(store.grads().data(), n, 100 + k);
    opt->step(store, 1e-2);
  }
  std::vector<float> out(store.params().data(), store.params().data() + n);
  for (const auto& t : opt->state_tensors()) out.insert(out.end(), t.view.data, t.view.data + t.view.numel());
  omp_set_num_threads(saved);
  return out;
}

TEST(Optimizer, BitwiseIdenticalAtOneAndTwoThreads) {
  for (const char* name : {"sgd", "adamw", "lamb"}) {
    const auto one = run_threads(name, 1), two = run_threads(name, 2);
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0) << name;
  }
}

TEST(Optimizer, StateTensorsNamedByParameter) {
  ParamRegistry reg = big_registry();
  auto sgd = make_optimizer({}, reg, cpu_backend());
  OptimizerOptions o;
  o.name = "lamb";
  auto lamb = make_optimizer(o, reg, cpu_backend());
  const auto s = sgd->state_tensors();
  ASSERT_EQ(s.size(), reg.entries().size());
  EXPECT_EQ(s[0].name, "momentum_buffer/a.weight");
  EXPECT_EQ(s[0].view.shape, (Shape{300, 257}));
  const auto l = lamb->state_tensors();
  ASSERT_EQ(l.size(), 2 * reg.entries().size());
  EXPECT_EQ(l[1].name, "exp_avg/a.bias");
  EXPECT_EQ(l[reg.entries().size() + 3].name, "exp_avg_sq/latents");
  // Defaults resolved by the factory: seed SGD (lr comes from the schedule), DM LAMB eps.
  EXPECT_DOUBLE_EQ(sgd->options().momentum, 0.9);
  EXPECT_DOUBLE_EQ(*lamb->options().eps, 1e-6);
  EXPECT_DOUBLE_EQ(*lamb->options().weight_decay, 0.0);
}

// Restoring the state and step count into a fresh optimizer continues exactly (checkpoints).
TEST(Optimizer, RestoredStateContinuesBitwise) {
  ParamStore<float> a(big_registry()), b(big_registry());
  const int64_t n = a.registry().arena_size();
  OptimizerOptions o;
  o.name = "adamw";
  auto oa = make_optimizer(o, a.registry(), cpu_backend());
  fill_pattern(a.params().data(), n, 7);
  for (int k = 0; k < 2; ++k) {
    fill_pattern(a.grads().data(), n, 20 + k);
    oa->step(a, 1e-3);
  }
  auto ob = make_optimizer(o, b.registry(), cpu_backend());
  std::memcpy(b.params().data(), a.params().data(), n * sizeof(float));
  auto sa = oa->state_tensors(), sb = ob->state_tensors();
  for (size_t i = 0; i < sa.size(); ++i)
    std::memcpy(sb[i].view.data, sa[i].view.data, sa[i].view.numel() * sizeof(float));
  ob->set_step_count(oa->step_count());
  fill_pattern(a.grads().data(), n, 30);
  fill_pattern(b.grads().data(), n, 30);
  oa->step(a, 1e-3);
  ob->step(b, 1e-3);
  EXPECT_EQ(std::memcmp(a.params().data(), b.params().data(), n * sizeof(float)), 0);
}

TEST(Optimizer, NonFiniteGradientSkipsStep) {
  ParamStore<float> store(big_registry());
  const int64_t n = store.registry().arena_size();
  fill_pattern(store.params().data(), n, 3);
  fill_pattern(store.grads().data(), n, 4);
  OptimizerOptions o;
  o.name = "lamb";
  auto opt = make_optimizer(o, store.registry(), cpu_backend());
  const std::vector<float> before(store.params().data(), store.params().data() + n);
  store.grads().data()[store.registry().at("latents").offset + 5] = std::numeric_limits<float>::quiet_NaN();
  StepResult r = opt->step(store, 1e-2);
  EXPECT_TRUE(r.skipped);
  EXPECT_FALSE(std::isfinite(r.grad_norm));
  EXPECT_EQ(opt->step_count(), 0);
  EXPECT_EQ(std::memcmp(before.data(), store.params().data(), n * sizeof(float)), 0);
  for (const auto& t : opt->state_tensors())
    for (int64_t i = 0; i < t.view.numel(); ++i) ASSERT_EQ(t.view.data[i], 0.0f) << t.name;
  store.grads().data()[store.registry().at("latents").offset + 5] = 0.5f;
  store.grads().data()[0] = std::numeric_limits<float>::infinity();
  r = opt->step(store, 1e-2);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(std::memcmp(before.data(), store.params().data(), n * sizeof(float)), 0);
  fill_pattern(store.grads().data(), n, 4);
  EXPECT_FALSE(opt->step(store, 1e-2).skipped);
  EXPECT_EQ(opt->step_count(), 1);
}

TEST(NonFiniteGuard, CountsAndStopsAfterTooManyInARow) {
  NonFiniteGuard guard(3);
  EXPECT_TRUE(guard.check(1.0, 2.0, 0));
  EXPECT_FALSE(guard.check(std::nan(""), 2.0, 1));
  EXPECT_FALSE(guard.check(1.0, INFINITY, 2));
  EXPECT_EQ(guard.consecutive_skipped(), 2);
  EXPECT_TRUE(guard.check(1.0, 2.0, 3));
  EXPECT_EQ(guard.consecutive_skipped(), 0);
  EXPECT_EQ(guard.total_skipped(), 2);
  EXPECT_FALSE(guard.check(INFINITY, 1.0, 4));
  EXPECT_FALSE(guard.check(INFINITY, 1.0, 5));
  try {
    guard.check(INFINITY, 1.0, 6);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 consecutive steps"), std::string::npos) << e.what();
  }
}

// The ops behind Optimizer::enqueue_step: Σx² in a fixed order, and optax's clip_by_global_norm.
TEST(Clip, GlobalNormIsDeterministicAndClipsLikeOptax) {
  const Kernels<float> k = cpu_backend().kernels<float>();
  std::vector<float> x(100003);
  fill_pattern(x.data(), int64_t(x.size()), 9);
  double ref = 0;
  for (float v : x) ref += double(v) * v;
  ref = std::sqrt(ref);
  double s1 = 0, s2 = 0, clipped = -1;
  omp_set_num_threads(1);
  k.sum_squares(int64_t(x.size()), x.data(), &s1);
  omp_set_num_threads(2);
  k.sum_squares(int64_t(x.size()), x.data(), &s2);
  EXPECT_EQ(s1, s2);
  const double n1 = std::sqrt(s1);
  EXPECT_NEAR(n1, ref, 1e-12 * ref);

  std::vector<float> y = x;
  k.clip_by_global_norm(int64_t(y.size()), y.data(), &s1, 2 * ref, &clipped);
  EXPECT_EQ(clipped, 0.0);
  EXPECT_EQ(y, x);
  k.clip_by_global_norm(int64_t(y.size()), y.data(), &s1, 0.5 * ref, &clipped);
  EXPECT_EQ(clipped, 1.0);
  double s3 = 0;
  k.sum_squares(int64_t(y.size()), y.data(), &s3);
  EXPECT_NEAR(std::sqrt(s3), 0.5 * ref, 1e-6 * ref);
  for (size_t i = 0; i < x.size(); i += 9973) EXPECT_FLOAT_EQ(y[i], (x[i] / float(n1)) * float(0.5 * ref));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  k.clip_by_global_norm(int64_t(y.size()), y.data(), &nan, 0.5 * ref, &clipped);  // left for the update to skip
  EXPECT_EQ(clipped, 0.0);
}

// ---- Validation -------------------------------------------------------------------------------

std::string error_of(const OptimizerOptions& o) {
  try {
    make_optimizer(o, big_registry(), cpu_backend());
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(OptimizerOptions, ErrorsNameTheOption) {
  OptimizerOptions o;
  o.name = "adam";
  EXPECT_NE(error_of(o).find("'optimizer' must be sgd, adamw or lamb, got 'adam'"), std::string::npos);
  o = {};
  o.momentum = 1.0;
  EXPECT_NE(error_of(o).find("'momentum'"), std::string::npos);
  o = {};
  o.name = "adamw";
  o.beta2 = -0.1;
  EXPECT_NE(error_of(o).find("'beta2'"), std::string::npos);
  o.beta2 = 0.999;
  o.eps = 0.0;
  EXPECT_NE(error_of(o).find("'eps'"), std::string::npos);
  o.eps.reset();
  o.weight_decay = -1;
  EXPECT_NE(error_of(o).find("'weight_decay'"), std::string::npos);
  o.weight_decay.reset();
  o.max_grad_norm = NAN;
  EXPECT_NE(error_of(o).find("'max_grad_norm'"), std::string::npos);

  ParamStore<float> store(big_registry());
  auto opt = make_optimizer({}, store.registry(), cpu_backend());
  EXPECT_THROW(opt->step(store, -1.0), Error);
  ParamRegistry other;
  other.add(ParamSpec{"x", Shape{3}, ParamRole::kBias});
  ParamStore<float> wrong(other);
  EXPECT_THROW(opt->step(wrong, 1e-3), Error);
}

TEST(ScheduleOptions, ErrorsNameTheOption) {
  auto err = [](ScheduleOptions o) {
    try {
      Schedule s(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err({.name = "step"}).find("'schedule'"), std::string::npos);
  EXPECT_NE(err({.name = "warmup"}).find("'warmup_steps'"), std::string::npos);
  EXPECT_NE(err({.name = "cosine", .warmup_steps = 5, .total_steps = 5}).find("'total_steps'"), std::string::npos);
  EXPECT_NE(err({.name = "cosine", .lr = 1e-3, .total_steps = 5, .final_lr = 1.0}).find("'final_lr'"),
            std::string::npos);
  EXPECT_NE(err({.lr = -1}).find("'lr'"), std::string::npos);
  EXPECT_THROW(Schedule({}).lr_at(-1), Error);
  EXPECT_DOUBLE_EQ(Schedule({}).lr_at(123456), 1e-5);  // the seed's constant default
}

}  // namespace
}  // namespace perceiver
