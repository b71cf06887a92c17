// Training checkpoints (layout in checkpoint.h). Crash safety comes from the write protocol, not
// from HDF5: the file is built in memory, written under <name>.tmp, fsync'ed and renamed over its
// final name (io/atomic_file.h), so a process killed at any point leaves either no ckpt-*.h5 or
// a complete one (rename(2) is atomic within a directory), and a failed write (disk full) is an
// error with the previous checkpoints untouched. list_checkpoints only matches ckpt-<digits>.h5,
// so a leftover .tmp is never picked up; the next save of that step replaces it.
#include "train/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <regex>
#include <system_error>

#include <yaml-cpp/yaml.h>

#include "io/hdf5_file.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "libperceiver-checkpoint";

// Ranges of the attributes: far beyond any real run, and small enough that the trainer's
// products of them (clips seen = sampler_batch × global batch) cannot overflow int64.
constexpr int64_t kMaxWorldSize = int64_t(1) << 20;
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 30;
constexpr int64_t kMaxSamplerBatch = int64_t(1) << 32;
constexpr int64_t kMaxConfigYamlBytes = int64_t(1) << 20;
constexpr int64_t kMaxClassNames = 100000;  // as many as a shard may hold

// Attributes on "/" that every checkpoint must carry; newest_valid_checkpoint checks them all.
const std::vector<std::string>& int_attrs() {
  static const std::vector<std::string> keys = {"format_version", "step",          "epoch",
                                                "sampler_epoch",  "sampler_batch", "seed",
                                                "optimizer_steps", "world_size"};
  return keys;
}
const std::vector<std::string>& string_attrs() {
  static const std::vector<std::string> keys = {"format", "optimizer", "config_yaml", "created"};
  return keys;
}

std::string param_path(const std::string& name) { return "/params/" + name; }
std::string state_path(const std::string& name) { return "/optimizer/" + name; }

std::string iso_time_utc() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The first element that is NaN or infinite, or -1.
int64_t first_non_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

void check_finite(const float* x, int64_t n, const std::string& what) {
  const int64_t i = first_non_finite(x, n);
  PCV_CHECK(i < 0, what, " holds ", x[i], " at element ", i, " (a checkpoint must be finite)");
}

// A checkpoint of a diverged state would become the newest and be resumed from.
void check_state_finite(ParamStore<float>& params, Optimizer* optimizer) {
  for (const auto& e : params.registry().entries()) {
    const TensorView<float> v = params.param(e.spec.name);
    check_finite(v.data, v.numel(), "parameter '" + e.spec.name + "'");
  }
  if (!optimizer) return;
  for (const NamedTensor& t : optimizer->state_tensors())
    check_finite(t.view.data, t.view.numel(), "optimizer state '" + t.name + "'");
}

void write_tensors(H5File& f, ParamStore<float>& params, Optimizer* optimizer) {
  for (const auto& e : params.registry().entries()) {
    const TensorView<float> v = params.param(e.spec.name);
    f.write<float>(param_path(e.spec.name), v.data, v.shape.dims());
  }
  if (!optimizer) return;
  for (const NamedTensor& t : optimizer->state_tensors()) f.write<float>(state_path(t.name), t.view.data, t.view.shape.dims());
}

void write_attrs(H5File& f, const TrainingState& s, Optimizer* optimizer) {
  f.set_attr("/", "format", std::string(kFormat));
  f.set_attr("/", "format_version", kCheckpointFormatVersion);
  f.set_attr("/", "step", s.step);
  f.set_attr("/", "epoch", s.epoch);
  f.set_attr("/", "sampler_epoch", s.sampler_epoch);
  f.set_attr("/", "sampler_batch", s.sampler_batch);
  // HDF5 attributes here are int64; the seed's bits round-trip exactly through the cast.
  f.set_attr("/", "seed", static_cast<int64_t>(s.seed));
  f.set_attr("/", "optimizer", optimizer ? optimizer->name() : s.optimizer);
  f.set_attr("/", "optimizer_steps", optimizer ? optimizer->step_count() : int64_t(0));
  f.set_attr("/", "world_size", s.world_size);
  f.set_attr("/", "sampler_global_batch", s.sampler_global_batch);
  f.set_attr("/", "config_yaml", s.config_yaml);
  if (!s.model_yaml.empty()) f.set_attr("/", "model_yaml", s.model_yaml);
  if (!s.class_names.empty()) f.set_attr("/", "class_names", s.class_names);
  f.set_attr("/", "created", iso_time_utc());
}

// Drops the "file.cpp:line: " prefix of a perceiver::Error so warnings read as sentences.
std::string reason(const std::exception& e) {
  static const std::regex prefix(R"(^[\w.+-]+:\d+: )");
  return std::regex_replace(e.what(), prefix, "", std::regex_constants::format_first_only);
}

// One line per skipped file, naming it once (most reasons already start with the path).
std::string skip_warning(const fs::path& p, const std::exception& e) {
  const std::string why = reason(e);
  if (why.find(p.string()) != std::string::npos) return "skipping checkpoint: " + why;
  return "skipping checkpoint '" + p.string() + "': " + why;
}

// Throws naming the attribute if the file lacks one of the required attributes, has one of the
// wrong type, or is not a libperceiver checkpoint.
void check_attrs(const H5File& f) {
  for (const auto& k : string_attrs()) {
    PCV_CHECK(f.has_attr("/", k), "'", f.path(), "': missing attribute '", k, "'");
    f.attr_string("/", k);
  }
  for (const auto& k : int_attrs()) {
    PCV_CHECK(f.has_attr("/", k), "'", f.path(), "': missing attribute '", k, "'");
    f.attr_int("/", k);
  }
  const std::string format = f.attr_string("/", "format");
  PCV_CHECK(format == kFormat, "'", f.path(), "': attribute format is '", format, "', expected '", kFormat, "'");
}

int64_t check_version(const H5File& f) {
  const int64_t v = f.attr_int("/", "format_version");
  PCV_CHECK(v <= kCheckpointFormatVersion, "'", f.path(), "': checkpoint format version ", v,
            " is newer than this build reads (", kCheckpointFormatVersion,
            ")\nHINT: resume with the perceiver-train that wrote it, or start a new --logdir");
  PCV_CHECK(v >= 1, "'", f.path(), "': bad checkpoint format version ", v);
  return v;
}

void check_tensor(const H5File& f, const std::string& path, const Shape& expected, const char* what) {
  PCV_CHECK(f.has(path), "'", f.path(), "': missing ", what, " '", path, "'");
  const Shape stored(f.shape(path));
  PCV_CHECK(stored == expected, "'", f.path(), "': ", what, " '", path, "' has shape ", stored.str(),
            ", the model expects ", expected.str());
}

// A resumed run must be the same model: extra parameters mean a different config.
void check_no_extra_params(const H5File& f, const ParamRegistry& reg) {
  if (!f.has("/params")) return;
  for (const auto& name : f.list("/params"))
    PCV_CHECK(reg.contains(name), "'", f.path(), "': parameter '", name,
              "' is not in the model\nHINT: the checkpoint was written with a different model config");
}

void check_optimizer(const H5File& f, Optimizer& opt) {
  const std::string stored = f.attr_string("/", "optimizer");
  PCV_CHECK(stored == opt.name(), "'", f.path(), "': written by optimizer '", stored, "', this run uses '",
            opt.name(), "'\nHINT: pass --optimizer ", stored, " or start a new --logdir");
  for (const NamedTensor& t : opt.state_tensors()) check_tensor(f, state_path(t.name), t.view.shape, "optimizer state");
}

int64_t attr_in_range(const H5File& f, const char* key, int64_t lo, int64_t hi) {
  const int64_t v = f.attr_int("/", key);
  PCV_CHECK(v >= lo && v <= hi, "'", f.path(), "': attribute ", key, " is ", v, ", outside [", lo, ", ", hi, "]");
  return v;
}

// Checkpoints written before the sampler_global_batch attribute: batch_size of the stored
// config × ranks.
int64_t global_batch_from_config(const H5File& f, const TrainingState& s) {
  int64_t batch = 0;
  try {
    const YAML::Node cfg = YAML::Load(s.config_yaml);
    PCV_CHECK(cfg.IsMap() && cfg["batch_size"], "'", f.path(), "': no sampler_global_batch attribute and no ",
              "batch_size in config_yaml");
    batch = cfg["batch_size"].as<int64_t>();
  } catch (const YAML::Exception& e) {
    PCV_FAIL("'", f.path(), "': attribute config_yaml is not valid YAML (", e.what(), ")");
  }
  PCV_CHECK(batch >= 1 && batch <= kMaxGlobalBatch / s.world_size, "'", f.path(), "': batch_size ", batch,
            " in config_yaml is outside [1, ", kMaxGlobalBatch / s.world_size, "]");
  return batch * s.world_size;
}

TrainingState read_state(const H5File& f) {
  check_attrs(f);
  check_version(f);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  TrainingState s;
  s.step = attr_in_range(f, "step", 0, kMax);
  s.epoch = attr_in_range(f, "epoch", 0, kMax);
  s.sampler_epoch = attr_in_range(f, "sampler_epoch", 0, kMax);
  s.sampler_batch = attr_in_range(f, "sampler_batch", 0, kMaxSamplerBatch);
  s.seed = static_cast<uint64_t>(f.attr_int("/", "seed"));
  s.world_size = attr_in_range(f, "world_size", 1, kMaxWorldSize);
  attr_in_range(f, "optimizer_steps", 0, kMax);
  s.optimizer = f.attr_string("/", "optimizer");
  s.config_yaml = f.attr_string("/", "config_yaml");
  PCV_CHECK(int64_t(s.config_yaml.size()) <= kMaxConfigYamlBytes, "'", f.path(), "': attribute config_yaml has ",
            s.config_yaml.size(), " bytes (at most ", kMaxConfigYamlBytes, ")");
  if (f.has_attr("/", "model_yaml")) {  // absent in checkpoints written before it was stored
    s.model_yaml = f.attr_string("/", "model_yaml");
    PCV_CHECK(int64_t(s.model_yaml.size()) <= kMaxConfigYamlBytes, "'", f.path(), "': attribute model_yaml has ",
              s.model_yaml.size(), " bytes (at most ", kMaxConfigYamlBytes, ")");
  }
  if (f.has_attr("/", "class_names")) s.class_names = f.attr_strings("/", "class_names", kMaxClassNames);
  s.sampler_global_batch = f.has_attr("/", "sampler_global_batch")
                               ? attr_in_range(f, "sampler_global_batch", 1, kMaxGlobalBatch)
                               : global_batch_from_config(f, s);
  return s;
}

// The checkpoint's tensors: every dataset under /params and /optimizer/<state>.
std::vector<std::string> tensor_paths(const H5File& f) {
  std::vector<std::string> out;
  if (f.has("/params"))
    for (const auto& n : f.list("/params")) out.push_back(param_path(n));
  if (f.has("/optimizer"))
    for (const auto& state : f.list("/optimizer"))
      for (const auto& n : f.list(state_path(state))) out.push_back(state_path(state) + "/" + n);
  return out;
}

// Reads one tensor, verifying its checksum (format 2 files must have one) and that it is finite.
std::vector<float> read_verified(const H5File& f, const std::string& path, int64_t version) {
  PCV_CHECK(version < 2 || f.has_checksum(path), "'", f.path(), "': tensor '", path,
            "' has no checksum (format version ", version, " stores one with every tensor)");
  std::vector<float> v = f.read<float>(path);  // sized by what the file stores, not by its claim
  const int64_t bad = first_non_finite(v.data(), int64_t(v.size()));
  PCV_CHECK(bad < 0, "'", f.path(), "': tensor '", path, "' holds ", v[size_t(std::max<int64_t>(bad, 0))],
            " at element ", bad, " (corrupt checkpoint?)");
  return v;
}

// ckpt-<digits>.h5 only: *.tmp and anything else in the folder is ignored.
std::optional<int64_t> checkpoint_step(const fs::path& p) {
  static const std::regex pattern(R"(ckpt-(\d{1,18})\.h5)");
  std::smatch m;
  const std::string name = p.filename().string();
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  return std::stoll(m[1].str());
}

}  // namespace

fs::path save_checkpoint(const fs::path& path, ParamStore<float>& params, Optimizer* optimizer,
                         const TrainingState& state) {
  try {
    PCV_CHECK(state.sampler_global_batch > 0, "TrainingState::sampler_global_batch must be positive, got ",
              state.sampler_global_batch);
    check_state_finite(params, optimizer);
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    fs::create_directories(dir);
    H5File f = H5File::create_in_memory(path.string());
    write_tensors(f, params, optimizer);
    write_attrs(f, state, optimizer);
    f.commit(TempName::kFixed);
  } catch (const std::exception& e) {
    PCV_FAIL("cannot write checkpoint '", path.string(), "': ", reason(e));
  }
  return path;
}

TrainingState load_checkpoint(const fs::path& path, ParamStore<float>& params, Optimizer* optimizer) {
  const H5File f = H5File::open(path.string());
  const TrainingState state = read_state(f);
  const int64_t version = check_version(f);
  // Validate everything, and read and verify every tensor, before writing anything, so a bad
  // file leaves the model untouched.
  const auto& entries = params.registry().entries();
  for (const auto& e : entries) check_tensor(f, param_path(e.spec.name), e.spec.shape, "parameter");
  check_no_extra_params(f, params.registry());
  if (optimizer) check_optimizer(f, *optimizer);
  std::vector<std::vector<float>> values;
  for (const auto& e : entries) values.push_back(read_verified(f, param_path(e.spec.name), version));
  if (optimizer)
    for (const NamedTensor& t : optimizer->state_tensors()) values.push_back(read_verified(f, state_path(t.name), version));

  size_t k = 0;
  for (const auto& e : entries) {
    TensorView<float> v = params.param(e.spec.name);
    std::copy(values[k].begin(), values[k].end(), v.data), ++k;
  }
  if (optimizer) {
    for (NamedTensor& t : optimizer->state_tensors()) std::copy(values[k].begin(), values[k].end(), t.view.data), ++k;
    optimizer->set_step_count(f.attr_int("/", "optimizer_steps"));
  }
  return state;
}

TrainingState read_checkpoint_state(const fs::path& path) { return read_state(H5File::open(path.string())); }

fs::path checkpoint_path(const fs::path& logdir, int64_t step) {
  PCV_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%08lld.h5", static_cast<long long>(step));
  return logdir / "checkpoints" / name;
}

std::optional<ModelConfig> stored_model_config(const fs::path& path) {
  const TrainingState s = read_checkpoint_state(path);
  if (s.model_yaml.empty()) return std::nullopt;
  return model_config_from_yaml_text(s.model_yaml, path.string() + " (attribute model_yaml)");
}

std::vector<fs::path> list_checkpoints(const fs::path& logdir) {
  const fs::path dir = logdir / "checkpoints";
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file(ec)) continue;
    if (auto step = checkpoint_step(entry.path())) found.emplace_back(*step, entry.path());
  }
  // Newest first; the name breaks ties (ckpt-1.h5 vs ckpt-00000001.h5) so the order is stable.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  std::vector<fs::path> out;
  for (auto& [step, p] : found) out.push_back(std::move(p));
  return out;
}

std::optional<fs::path> newest_valid_checkpoint(const fs::path& logdir, std::vector<std::string>* warnings) {
  // A newer format version is not skipped: load_checkpoint reports it with a HINT, rather than
  // silently resuming from (and later pruning towards) an older file.
  for (const fs::path& p : list_checkpoints(logdir)) {
    try {
      const H5File f = H5File::open(p.string());
      check_attrs(f);
      const int64_t version = f.attr_int("/", "format_version");
      if (version > kCheckpointFormatVersion) return p;
      read_state(f);
      for (const std::string& t : tensor_paths(f)) read_verified(f, t, version);
      return p;
    } catch (const std::exception& e) {
      if (warnings) warnings->push_back(skip_warning(p, e));
    }
  }
  return std::nullopt;
}

void prune_checkpoints(const fs::path& logdir, int64_t keep, const fs::path& written) {
  if (keep <= 0) return;
  const std::optional<int64_t> newest = checkpoint_step(written);
  PCV_CHECK(newest, "prune_checkpoints: '", written.string(), "' is not a checkpoint name");
  int64_t kept = 0;
  for (const fs::path& p : list_checkpoints(logdir)) {  // newest first
    const int64_t step = *checkpoint_step(p);
    if (step > *newest || (step == *newest && p.filename() == written.filename())) continue;
    if (++kept < keep) continue;
    std::error_code ec;
    fs::remove(p, ec);
    PCV_CHECK(!ec, "cannot delete old checkpoint '", p.string(), "': ", ec.message());
  }
}

std::vector<fs::path> start_afresh(const fs::path& logdir, bool overwrite, bool remove) {
  const std::vector<fs::path> found = list_checkpoints(logdir);
  if (found.empty()) return {};
  std::string names;
  for (size_t i = 0; i < found.size() && i < 3; ++i) names += (i ? ", " : "") + found[i].filename().string();
  if (found.size() > 3) names += ", ...";
  PCV_CHECK(overwrite, "--resume never: '", (logdir / "checkpoints").string(), "' already holds ", found.size(),
            " checkpoint(s) (", names, ") that this run would mix with its own\nHINT: --resume auto continues ",
            "from them, --overwrite deletes them, or choose another --logdir");
  if (!remove) return found;
  for (const fs::path& p : found) {
    std::error_code ec;
    fs::remove(p, ec);
    PCV_CHECK(!ec, "--overwrite: cannot delete '", p.string(), "': ", ec.message());
  }
  return found;
}

}  // namespace perceiver
