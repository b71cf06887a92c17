// The neuron driver's call protocol against a STAND-IN libnrt (nrt_standin.cpp, built by the
// tests: host memory, a text file for a NEFF, a log line per call). It proves which runtime
// calls the driver makes, in which order, with which tensors — the trainer's step on
// --device neuron — not that anything runs on a Trainium chip (not possible here).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "backend/neuron/neuron_backend.h"
#include "train/compiled_step.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

StepCaptureOptions tiny() {
  StepCaptureOptions o;
  o.model = load_model_config(PERCEIVER_SOURCE_DIR "/configs/tiny.yaml");
  o.batch = 2;
  o.optimizer.name = "adamw";
  o.seed = 3;
  return o;
}

// The modules of steps 0..n-1 as perceiver-export makes them, each with a stand-in "NEFF"
// naming its inputs and outputs and their sizes. Returns the distinct hashes.
std::vector<std::string> export_standin_neffs(const fs::path& dir, int steps) {
  fs::create_directories(dir);
  capture::CaptureBackend backend;
  StepCapture sc(tiny(), backend);
  std::vector<std::string> hashes;
  for (int s = 0; s < steps; ++s) {
    const capture::Module m = capture::lower(sc.capture(s, synthetic_batch(tiny().model, 2, 3, s), 1e-3));
    if (std::find(hashes.begin(), hashes.end(), m.hash) != hashes.end()) continue;
    hashes.push_back(m.hash);
    std::ofstream f(dir / (m.hash + ".neff"));
    f << "PCV-NRT-STANDIN\n";
    for (size_t i = 0; i < m.args.size(); ++i)
      f << "input input" << i << " " << m.args[i].elems * int64_t(capture::elem_bytes(m.args[i].elem)) << "\n";
    for (size_t i = 0; i < m.results.size(); ++i)
      f << "output output" << i << " " << m.results[i].elems * int64_t(capture::elem_bytes(m.results[i].elem)) << "\n";
  }
  return hashes;
}

struct Env {
  fs::path dir, log;
  explicit Env(const std::string& name) {
    dir = fs::path(PERCEIVER_BINARY_DIR) / "neuron-test" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    log = dir / "calls.log";
    setenv("PERCEIVER_LIBNRT", NRT_STANDIN_PATH, 1);
    setenv("PERCEIVER_NEFF_DIR", dir.c_str(), 1);
    setenv("NRT_STANDIN_LOG", log.c_str(), 1);
  }
  std::vector<std::string> calls() const {
    std::ifstream f(log);
    std::vector<std::string> out;
    for (std::string l; std::getline(f, l);) out.push_back(l);
    return out;
  }
};

int count(const std::vector<std::string>& calls, const std::string& pattern) {
  const std::regex re(pattern);
  int n = 0;
  for (const auto& c : calls) n += std::regex_search(c, re);
  return n;
}

// The index of the first call matching `pattern` at or after `from` (-1 if none).
int find_call(const std::vector<std::string>& calls, const std::string& pattern, int from = 0) {
  const std::regex re(pattern);
  for (int i = from; i < int(calls.size()); ++i)
    if (std::regex_search(calls[size_t(i)], re)) return i;
  return -1;
}

TEST(NeuronDriver, TrainingStepsKeepStateResidentAndRunOneGraphPerStep) {
  Env env("steps");
  const std::vector<std::string> hashes = export_standin_neffs(env.dir, 3);
  ASSERT_EQ(hashes.size(), 2u) << "step 0 allocates the activations; steps 1 and 2 share the steady module";
  {
    auto backend = make_backend("neuron");
    auto& nb = dynamic_cast<neuron::NeuronBackend&>(*backend);
    StepCapture sc(tiny(), nb);
    for (int s = 0; s < 3; ++s) {
      const capture::Graph g = sc.capture(s, synthetic_batch(tiny().model, 2, 3, s), 1e-3);
      EXPECT_TRUE(g.nodes.empty()) << "the download of the step's statistics ran the graph";
      // The stand-in fills results that are not updated in place with 42.0: the host got them
      // back from the device (loss terms, Σg²), not from its own memory.
      for (double v : sc.last_stats()) EXPECT_EQ(v, 42.0);
    }
    EXPECT_EQ(nb.executions(), 3);
    const std::vector<float> params = sc.net().store().params().to_host();  // read from the device twin
    EXPECT_EQ(params.size(), sc.net().store().registry().arena_size());
  }
  const auto calls = env.calls();
  EXPECT_EQ(count(calls, "^nrt_init framework=1"), 1);
  EXPECT_EQ(count(calls, "AGAIN|REFUSED|INVALID|OUT OF RANGE|BAD"), 0);
  EXPECT_EQ(count(calls, "^nrt_load "), 2) << "each NEFF loads once";
  EXPECT_EQ(count(calls, "^nrt_get_model_tensor_info"), 2);
  EXPECT_EQ(count(calls, "^nrt_execute .*in_place=[1-9]"), 3) << "one execution per step, state updated in place";
  // Parameters, gradients and both Adam moments get one device tensor each for the whole run,
  // and the parameters are uploaded once (before the first execution), never again.
  for (const char* state : {"params", "grads", "exp_avg", "exp_avg_sq"})
    EXPECT_EQ(count(calls, std::string("^nrt_tensor_allocate name=") + state + " "), 1) << state;
  const int first_exec = find_call(calls, "^nrt_execute ");
  EXPECT_EQ(count(calls, "^nrt_tensor_write name=params "), 1);
  EXPECT_LT(find_call(calls, "^nrt_tensor_write name=params "), first_exec);
  // From step 1 on, the host's zero_grad is a memset of the resident gradients.
  EXPECT_EQ(count(calls, "^nrt_tensor_memset name=grads "), 2);
  // Each step after the first writes only its batch (video, audio, labels and masks as resident
  // buffers written before the graph opens; the image and audio output points as inputs) and
  // the optimizer's lr and t, then executes and reads the statistics back.
  const int second_exec = find_call(calls, "^nrt_execute ", first_exec + 1);
  const int third_exec = find_call(calls, "^nrt_execute ", second_exec + 1);
  ASSERT_GT(third_exec, second_exec);
  int writes = 0;
  for (int i = second_exec + 1; i < third_exec; ++i) writes += calls[size_t(i)].rfind("nrt_tensor_write", 0) == 0;
  EXPECT_EQ(writes, 4 + 2 + 2) << "batch buffers, output points and two scalars";
  EXPECT_EQ(count(calls, "^nrt_tensor_write name=(lr|t) offset=0 bytes=8$"), 2 * 3);
  EXPECT_EQ(count(calls, "^nrt_tensor_read name=read0 offset=0 bytes=40$"), 3) << "the step statistics, once per step";
  EXPECT_EQ(count(calls, "^nrt_tensor_read name=params "), 1);
  // Teardown: every tensor freed, both models unloaded, then the runtime closed.
  EXPECT_EQ(count(calls, "^nrt_tensor_allocate "), count(calls, "^nrt_tensor_free "));
  EXPECT_EQ(count(calls, "^nrt_unload "), 2);
  EXPECT_EQ(calls.back(), "nrt_close tensors_left=0 sets_left=0");
}

TEST(NeuronDriver, MissingNeffNamesTheModuleAndTheFix) {
  Env env("missing");
  const std::vector<std::string> hashes = export_standin_neffs(env.dir, 1);
  fs::remove(env.dir / (hashes[0] + ".neff"));
  auto backend = make_backend("neuron");
  StepCapture sc(tiny(), dynamic_cast<capture::CaptureBackend&>(*backend));
  try {
    sc.capture(0, synthetic_batch(tiny().model, 2, 3, 0), 1e-3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((env.dir / (hashes[0] + ".neff")).string() + " does not exist"), std::string::npos) << what;
    EXPECT_NE(what.find("perceiver-export --out DIR"), std::string::npos) << what;
    EXPECT_NE(what.find("neuronx-cc compile DIR/" + hashes[0] + ".hlo.pb --framework XLA --target trn1"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line";
  }
}

TEST(NeuronDriver, NeffOfAnotherModuleIsRefused) {
  Env env("mismatch");
  const std::vector<std::string> hashes = export_standin_neffs(env.dir, 1);
  std::ofstream(env.dir / (hashes[0] + ".neff")) << "PCV-NRT-STANDIN\ninput input0 8\noutput output0 8\n";
  {
    auto backend = make_backend("neuron");
    StepCapture sc(tiny(), dynamic_cast<capture::CaptureBackend&>(*backend));
    try {
      sc.capture(0, synthetic_batch(tiny().model, 2, 3, 0), 1e-3);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has 1 inputs and 1 outputs; module " + hashes[0]), std::string::npos)
          << e.what();
    }
  }
  const auto calls = env.calls();
  EXPECT_EQ(count(calls, "^nrt_load "), 1);
  EXPECT_EQ(count(calls, "^nrt_unload "), 1) << "a refused NEFF is unloaded";
  EXPECT_EQ(calls.back(), "nrt_close tensors_left=0 sets_left=0");
}

// A runtime error is one clear error naming the call and its status, and nothing leaks: the
// tensor sets of the failed execution are destroyed and teardown still frees everything.
TEST(NeuronDriver, RuntimeErrorsBecomeClearErrors) {
  Env env("failing");
  export_standin_neffs(env.dir, 1);
  setenv("NRT_STANDIN_FAIL", "nrt_execute=5", 1);
  {
    auto backend = make_backend("neuron");
    StepCapture sc(tiny(), dynamic_cast<capture::CaptureBackend&>(*backend));
    try {
      sc.capture(0, synthetic_batch(tiny().model, 2, 3, 0), 1e-3);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("nrt_execute (module "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("failed with status 5 (NRT_TIMEOUT)"), std::string::npos) << e.what();
    }
  }
  unsetenv("NRT_STANDIN_FAIL");
  const auto calls = env.calls();
  EXPECT_EQ(count(calls, "^nrt_execute FAILS WITH 5"), 1);
  EXPECT_EQ(count(calls, "^nrt_unload "), 1);
  EXPECT_EQ(calls.back(), "nrt_close tensors_left=0 sets_left=0");
}

TEST(NeuronDriver, LoadErrorsNameTheNeff) {
  Env env("load-fails");
  const std::vector<std::string> hashes = export_standin_neffs(env.dir, 1);
  setenv("NRT_STANDIN_FAIL", "nrt_load=2", 1);
  {
    auto backend = make_backend("neuron");
    StepCapture sc(tiny(), dynamic_cast<capture::CaptureBackend&>(*backend));
    try {
      sc.capture(0, synthetic_batch(tiny().model, 2, 3, 0), 1e-3);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("nrt_load (" + (env.dir / (hashes[0] + ".neff")).string() +
                                           ") failed with status 2 (NRT_INVALID)"),
                std::string::npos)
          << e.what();
    }
  }
  unsetenv("NRT_STANDIN_FAIL");
  EXPECT_EQ(env.calls().back(), "nrt_close tensors_left=0 sets_left=0");
}

TEST(NeuronDriver, WithoutTheSdkSaysSo) {
  setenv("PERCEIVER_LIBNRT", "/nonexistent/libnrt.so", 1);
  try {
    make_backend("neuron");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Neuron runtime (libnrt) is not installed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perceiver
