#include "train/compiled_step.h"

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "model/sampling.h"
#include "model/step.h"

namespace perceiver {

HostBatch synthetic_batch(const ModelConfig& cfg, int64_t B, uint64_t seed, int64_t step) {
  std::mt19937_64 rng(seed * 1000003ull + uint64_t(step));
  std::uniform_real_distribution<float> u(0.f, 1.f);
  HostBatch b;
  b.video.resize(size_t(B * cfg.pixels() * 3));
  b.audio.resize(size_t(B * cfg.audio_samples()));
  for (float& x : b.video) x = u(rng);
  for (float& x : b.audio) x = 2.f * u(rng) - 1.f;
  for (int64_t i = 0; i < B; ++i) b.labels.push_back(int64_t(rng() % uint64_t(cfg.num_labels)));
  return b;
}

StepCapture::StepCapture(const StepCaptureOptions& o, capture::CaptureBackend& backend) : o_(o), backend_(backend) {
  PCV_CHECK(o.batch > 0, "batch size must be positive, got ", o.batch);
  backend.set_auto_regions(true);  // a step's graph opens at its first op, as on the neuron device
  // The trainer's order: the net (parameters, tables), its initial values, the optimizer, the slot.
  net_ = std::make_unique<PerceiverNet<float>>(o.model, backend);
  net_->store().initialize(o.seed, o.init);
  optimizer_ = make_optimizer(o.optimizer, net_->store().registry(), backend);
  stats_ = Arena<double>(backend, size_t(kLossTermCount + kOptimStatCount));
  stats_.name("step_stats");
}

StepCapture::~StepCapture() = default;

capture::Graph StepCapture::capture(int64_t step, const HostBatch& b, double lr, const std::function<void()>& after_backward) {
  const ModelConfig& c = o_.model;
  net_->store().zero_grad();
  const OutputPoints pts = draw_output_points(c, o_.seed, step);
  const auto mask = draw_masks(c, o_.batch, o_.seed, step, 0);
  enqueue_step(*net_, b.video.data(), b.audio.data(), b.labels.data(), o_.batch, pts, mask, o_.loss, true,
               stats_.data(), TrainingMode{true, o_.seed, step, 0});
  if (after_backward) after_backward();
  optimizer_->enqueue_step(net_->store(), lr, stats_.data() + kLossTermCount);
  double host[kLossTermCount + kOptimStatCount];
  stats_.download(host, kLossTermCount + kOptimStatCount);
  optimizer_->finish_step(host + kLossTermCount);  // counts the step (the next one's t)
  last_stats_.assign(host, host + kLossTermCount + kOptimStatCount);
  if (!backend_.recording()) return {};  // a device backend ran the graph at the download
  capture::Graph g = backend_.end();
  g.name = "training step " + std::to_string(step);
  return g;
}

namespace {

const char* arg_kind(capture::ModuleArg::Kind k) {
  switch (k) {
    case capture::ModuleArg::Kind::kState: return "state";
    case capture::ModuleArg::Kind::kResident: return "resident";
    case capture::ModuleArg::Kind::kInput: return "input";
    case capture::ModuleArg::Kind::kScalar: return "scalar";
  }
  return "?";
}

void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  PCV_CHECK(f.good(), "cannot write ", p.string());
}

std::string buffer_name(const capture::Graph& g, int32_t id) {
  const auto& info = g.buffers.at(id);
  return info.name.empty() ? "buffer" + std::to_string(id) : info.name;
}

}  // namespace

void write_module(const std::filesystem::path& dir, const std::string& stem, const capture::Module& m,
                  const capture::Graph& g, const capture::CaptureBackend& backend, bool with_data) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / (stem + ".mlir"));
    f << m.text;
    PCV_CHECK(f.good(), "cannot write ", (dir / (stem + ".mlir")).string());
  }
  nlohmann::json args = nlohmann::json::array(), results = nlohmann::json::array();
  for (const auto& a : m.args) {
    nlohmann::json j{{"name", a.name}, {"kind", arg_kind(a.kind)}, {"dtype", capture::elem_name(a.elem)},
                     {"elems", a.elems}, {"alias_result", a.alias_result}, {"host_written", a.host_written}};
    if (a.kind == capture::ModuleArg::Kind::kScalar) j["value"] = a.value;
    if (a.buffer >= 0) j["buffer"] = buffer_name(g, a.buffer), j["buffer_id"] = a.buffer;
    if (a.kind == capture::ModuleArg::Kind::kInput) j["byte_offset"] = a.byte_offset;
    if (with_data && a.kind == capture::ModuleArg::Kind::kInput) {
      j["file"] = stem + "." + a.name + ".bin";
      write_bytes(dir / j["file"].get<std::string>(), g.nodes[size_t(a.node)].data);
    } else if (with_data && a.buffer >= 0) {
      j["file"] = stem + ".entry." + a.name + ".bin";
      write_bytes(dir / j["file"].get<std::string>(), backend.entry_bytes(g, a.buffer));
    }
    args.push_back(j);
  }
  for (const auto& r : m.results) {
    nlohmann::json j{{"name", r.name}, {"kind", r.kind == capture::ModuleResult::Kind::kState ? "state" : "host_read"},
                     {"dtype", capture::elem_name(r.elem)}, {"elems", r.elems}, {"alias_arg", r.alias_arg},
                     {"buffer", buffer_name(g, r.buffer)}, {"buffer_id", r.buffer}};
    if (r.kind == capture::ModuleResult::Kind::kHostRead) j["byte_offset"] = r.byte_offset;
    results.push_back(j);
  }
  const nlohmann::json man{{"stage", g.name}, {"module", stem + ".mlir"}, {"hash", m.hash},
                           {"ops", g.op_count()}, {"args", args}, {"results", results}};
  std::ofstream f(dir / (stem + ".json"));
  f << man.dump(1) << "\n";
  PCV_CHECK(f.good(), "cannot write ", (dir / (stem + ".json")).string());
}

}  // namespace perceiver
