// Training checkpoints (layout in checkpoint.h). Crash safety comes from the write protocol, not
// from HDF5: the file is built under <name>.tmp, flushed, closed, fsync'ed and then renamed over
// its final name, so a process killed at any point leaves either no ckpt-*.h5 or a complete one
// (rename(2) is atomic within a directory). list_checkpoints only matches ckpt-<digits>.h5, so a
// leftover .tmp is never picked up; the next save of that step truncates it.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <regex>
#include <system_error>

#include <yaml-cpp/yaml.h>

#include "io/hdf5_file.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "libperceiver-checkpoint";

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

// H5Fflush hands the data to the OS; fsync makes it durable before the rename publishes it, so
// a power loss cannot leave a renamed but empty file either.
void fsync_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  PCV_CHECK(fd >= 0, "cannot open '", p.string(), "' to sync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  PCV_CHECK(rc == 0, "fsync failed on '", p.string(), "'");
}

// Makes the rename itself durable. Best effort: the file is complete either way, and some
// file systems refuse fsync on directories.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
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
  PCV_CHECK(s.sampler_global_batch > 0, "checkpoint '", f.path(), "': TrainingState::sampler_global_batch must be ",
            "positive, got ", s.sampler_global_batch);
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
  f.set_attr("/", "created", iso_time_utc());
}

void write_file(const fs::path& tmp, ParamStore<float>& params, Optimizer* optimizer, const TrainingState& state) {
  H5File f = H5File::create(tmp.string());
  write_tensors(f, params, optimizer);
  // Attributes last: a file is only valid with all of them (belt and braces with the rename).
  write_attrs(f, state, optimizer);
  f.flush();
}  // H5File closes here, before the rename.

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

void check_version(const H5File& f) {
  const int64_t v = f.attr_int("/", "format_version");
  PCV_CHECK(v <= kCheckpointFormatVersion, "'", f.path(), "': checkpoint format version ", v,
            " is newer than this build reads (", kCheckpointFormatVersion,
            ")\nHINT: resume with the perceiver-train that wrote it, or start a new --logdir");
  PCV_CHECK(v >= 1, "'", f.path(), "': bad checkpoint format version ", v);
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

TrainingState read_state(const H5File& f) {
  TrainingState s;
  s.step = f.attr_int("/", "step");
  s.epoch = f.attr_int("/", "epoch");
  s.sampler_epoch = f.attr_int("/", "sampler_epoch");
  s.sampler_batch = f.attr_int("/", "sampler_batch");
  s.seed = static_cast<uint64_t>(f.attr_int("/", "seed"));
  s.world_size = f.attr_int("/", "world_size");
  s.optimizer = f.attr_string("/", "optimizer");
  s.config_yaml = f.attr_string("/", "config_yaml");
  if (f.has_attr("/", "sampler_global_batch")) {
    s.sampler_global_batch = f.attr_int("/", "sampler_global_batch");
  } else {  // written before the attribute existed: batch_size of the stored config × ranks
    const YAML::Node cfg = YAML::Load(s.config_yaml);
    PCV_CHECK(cfg.IsMap() && cfg["batch_size"], "'", f.path(), "': no sampler_global_batch attribute and no ",
              "batch_size in config_yaml");
    s.sampler_global_batch = cfg["batch_size"].as<int64_t>() * std::max<int64_t>(1, s.world_size);
  }
  PCV_CHECK(s.sampler_global_batch > 0, "'", f.path(), "': attribute sampler_global_batch must be positive, got ",
            s.sampler_global_batch);
  return s;
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
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  fs::create_directories(dir);
  fs::path tmp = path;
  tmp += ".tmp";
  try {
    write_file(tmp, params, optimizer, state);
    fsync_file(tmp);
    fs::rename(tmp, path);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    PCV_FAIL("cannot write checkpoint '", path.string(), "': ", reason(e));
  }
  fsync_dir(dir);
  return path;
}

TrainingState load_checkpoint(const fs::path& path, ParamStore<float>& params, Optimizer* optimizer) {
  const H5File f = H5File::open(path.string());
  check_attrs(f);
  check_version(f);
  // Validate everything before writing anything, so a bad file leaves the model untouched.
  const auto& entries = params.registry().entries();
  for (const auto& e : entries) check_tensor(f, param_path(e.spec.name), e.spec.shape, "parameter");
  check_no_extra_params(f, params.registry());
  if (optimizer) check_optimizer(f, *optimizer);

  for (const auto& e : entries) {
    TensorView<float> v = params.param(e.spec.name);
    f.read_into<float>(param_path(e.spec.name), v.data, v.numel());
  }
  if (optimizer) {
    for (NamedTensor& t : optimizer->state_tensors())
      f.read_into<float>(state_path(t.name), t.view.data, t.view.numel());
    optimizer->set_step_count(f.attr_int("/", "optimizer_steps"));
  }
  return read_state(f);
}

fs::path checkpoint_path(const fs::path& logdir, int64_t step) {
  PCV_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%08lld.h5", static_cast<long long>(step));
  return logdir / "checkpoints" / name;
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
      return p;
    } catch (const std::exception& e) {
      if (warnings) warnings->push_back(skip_warning(p, e));
    }
  }
  return std::nullopt;
}

void prune_checkpoints(const fs::path& logdir, int64_t keep) {
  if (keep <= 0) return;
  const auto all = list_checkpoints(logdir);
  for (size_t i = size_t(keep); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i], ec);
    PCV_CHECK(!ec, "cannot delete old checkpoint '", all[i].string(), "': ", ec.message());
  }
}

}  // namespace perceiver
