#include "media/prep.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "data/ordered_pool.h"
#include "data/shards.h"
#include "io/atomic_file.h"
#include "media/audio_file.h"
#include "perceiver/error.h"

namespace perceiver {
namespace fs = std::filesystem;

double window_start(double duration_s, int num_frames, double fps, double position) {
  const double slack = duration_s - num_frames / fps;
  if (!(slack > 0)) return 0;
  return std::floor(std::clamp(position, 0.0, 1.0) * slack * fps + 1e-9) / fps;
}

Clip read_clip_window(const fs::path& path, const std::string& youtube_id, WindowSpec spec,
                      const ReaderOptions& reader, double position) {
  VideoReader r = VideoReader::open(path, reader);
  const MediaInfo& info = r.info();
  spec.start_s = window_start(info.duration_s, spec.num_frames, spec.fps, position);
  const auto side = spec.audio && !info.has_audio ? find_audio_side_file(path.parent_path(), youtube_id) : std::nullopt;
  if (side) spec.audio = false;
  Clip c = r.read_window(spec);
  if (side) {
    AudioFileOptions ao;
    ao.sample_rate = spec.sample_rate;
    const AudioData a = read_audio_file(*side, ao);
    c.audio = audio_window(a, spec.start_s, window_audio_samples(spec.num_frames, spec.fps, spec.sample_rate),
                           &c.padded_samples);
  }
  return c;
}

namespace {

struct ShardPlan {
  int64_t first = 0, count = 0;  // clips [first, first + count) of the index
  fs::path path;
  std::string plan;              // fingerprint stored in the shard
};

// FNV-1a over everything that determines a shard's bytes, so a rerun keeps a shard only if
// it would write the same one.
struct Fingerprint {
  uint64_t h = 1469598103934665603ull;
  Fingerprint& add(const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // separator
    return *this;
  }
  std::string hex() const {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

std::string describe_options(const PrepOptions& o, const std::vector<std::string>& classes) {
  std::string s = "v" + std::to_string(kShardFormatVersion) + " T=" + std::to_string(o.num_frames) +
                  " D=" + std::to_string(o.image_dim) + " fps=" + std::to_string(o.fps) +
                  " sr=" + std::to_string(o.sample_rate) + " z=" + std::to_string(o.deflate_level) +
                  " filter=" + std::to_string(int(ResizeFilter::kArea));
  for (const auto& c : classes) s += "|" + c;
  return s;
}

std::vector<ShardPlan> plan_shards(const KineticsIndex& idx, const PrepOptions& o, const fs::path& dir) {
  const std::string opts = describe_options(o, idx.classes);
  std::vector<ShardPlan> plans;
  for (int64_t first = 0; first < int64_t(idx.clips.size()); first += o.clips_per_shard) {
    ShardPlan p{first, std::min<int64_t>(o.clips_per_shard, int64_t(idx.clips.size()) - first),
                dir / shard_file_name(int64_t(plans.size())), ""};
    Fingerprint f;
    f.add(opts);
    for (int64_t i = p.first; i < p.first + p.count; ++i) {
      const KineticsClip& c = idx.clips[size_t(i)];
      std::error_code ec;
      const auto bytes = fs::file_size(c.path, ec);
      f.add(c.path.filename().string()).add(c.label).add(std::to_string(c.label_index)).add(std::to_string(bytes));
    }
    p.plan = f.hex();
    plans.push_back(std::move(p));
  }
  return plans;
}

// A finished shard from an earlier run, if it is intact and was made from the same plan.
std::optional<ShardIndex> reusable(const ShardPlan& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p.path, ec)) return std::nullopt;
  try {
    ShardIndex ix = ShardReader::open(p.path).index();
    if (ix.meta.plan == p.plan && ix.size() + int64_t(ix.skipped.size()) == p.count) return ix;
  } catch (const Error&) {
  }
  return std::nullopt;
}

// Removes temporaries of an interrupted run and shards beyond the plan (from a run with other
// options), so the folder holds exactly this run's shards.
void clean_shard_dir(const fs::path& dir, int64_t num_shards) {
  static const std::regex kShard(R"(shard-(\d+)\.h5)");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    const bool tmp = name.size() > 4 && name.ends_with(".tmp") && name.starts_with("shard-");
    if (tmp || (std::regex_match(name, m, kShard) && std::stoll(m[1]) >= num_shards)) fs::remove(e.path());
  }
}

struct ClipResult {
  std::optional<EncodedClip> clip;
  SkippedClip skipped;
};

ClipResult decode_one(const KineticsClip& k, const PrepOptions& o, const ShardMeta& meta) {
  ClipResult r;
  r.skipped = {k.youtube_id, k.time_start, k.time_end, ""};
  try {
    WindowSpec w;
    w.num_frames = o.num_frames, w.fps = o.fps, w.image_dim = o.image_dim, w.sample_rate = o.sample_rate;
    const Clip c = read_clip_window(k.path, k.youtube_id, w, o.reader, 0.5);
    PCV_ASSERT(int64_t(c.audio.size()) == meta.audio_samples() && c.num_frames == o.num_frames);
    EncodedClip e = encode_clip(meta, c.video.data(), c.audio.data());
    e.label = k.label_index, e.youtube_id = k.youtube_id, e.time_start = k.time_start, e.time_end = k.time_end;
    e.window_start_s = c.frame_times.empty() ? 0 : c.frame_times[0];
    e.padded_frames = c.padded_frames, e.padded_samples = c.padded_samples;
    r.clip = std::move(e);
  } catch (const std::exception& ex) {
    r.skipped.reason = ex.what();  // bad media must never stop the run
  }
  return r;
}


std::vector<SkippedClip> missing_rows(const KineticsIndex& idx) {
  std::vector<SkippedClip> out;
  for (const auto& m : idx.missing) out.push_back({m.youtube_id, m.time_start, m.time_end, m.reason});
  return out;
}

void check_options(const PrepOptions& o) {
  PCV_CHECK(o.num_frames >= 1 && o.num_frames <= 1024, "--num_frames ", o.num_frames, " must be in [1, 1024]");
  PCV_CHECK(o.image_dim >= 8 && o.image_dim <= 4096, "--image_dim ", o.image_dim, " must be in [8, 4096]");
  PCV_CHECK(o.clips_per_shard >= 1, "--clips_per_shard must be at least 1");
  PCV_CHECK(o.fps > 0 && o.sample_rate > 0, "fps and sample_rate must be positive");
  PCV_CHECK(o.deflate_level >= 0 && o.deflate_level <= 9, "deflate level ", o.deflate_level, " must be in [0, 9]");
  PCV_CHECK(fs::is_directory(o.dataset_dir), "--dataset_dir '", o.dataset_dir.string(), "' is not a directory");
  const std::string in_the_way = output_folder_problem(o.output_dir);
  PCV_CHECK(in_the_way.empty(), "--output_dir ", in_the_way);
}

}  // namespace

PrepSummary prepare_kinetics(const PrepOptions& o) {
  check_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  const KineticsIndex idx = index_kinetics(o.dataset_dir, o.split);
  PrepSummary sum;
  sum.rows = int64_t(idx.clips.size() + idx.missing.size());
  sum.missing = int64_t(idx.missing.size());
  sum.num_classes = int64_t(idx.classes.size());
  sum.shard_dir = shard_dir(o.output_dir, o.split);
  sum.report = o.output_dir / (std::string("skipped_") + split_name(o.split) + ".tsv");
  fs::create_directories(sum.shard_dir);
  const std::vector<ShardPlan> plans = plan_shards(idx, o, sum.shard_dir);
  clean_shard_dir(sum.shard_dir, int64_t(plans.size()));

  ShardMeta meta;
  meta.split = split_name(o.split), meta.fps = o.fps, meta.sample_rate = o.sample_rate;
  meta.num_frames = o.num_frames, meta.image_dim = o.image_dim, meta.class_names = idx.classes;
  meta.deflate_level = o.deflate_level;

  PrepProgress prog;
  prog.clips_total = int64_t(idx.clips.size()), prog.shards_total = int64_t(plans.size());
  prog.skipped = sum.missing;
  auto report_progress = [&](bool finished) {
    prog.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    prog.finished = finished;
    if (o.on_progress) o.on_progress(prog);
  };

  // Shards kept from an earlier run, and the clips left to decode (in order).
  std::vector<std::optional<ShardIndex>> kept(plans.size());
  std::vector<int64_t> todo;
  for (size_t s = 0; s < plans.size(); ++s) {
    kept[s] = reusable(plans[s]);
    if (kept[s]) {
      prog.clips_done += plans[s].count, prog.skipped += int64_t(kept[s]->skipped.size()), ++prog.shards_done;
      ++sum.shards_reused;
    } else {
      for (int64_t i = plans[s].first; i < plans[s].first + plans[s].count; ++i) todo.push_back(i);
    }
  }
  report_progress(false);

  const int workers = o.num_workers > 0 ? o.num_workers : int(std::max(1u, std::thread::hardware_concurrency()));
  OrderedPool<ClipResult> pool(workers, o.clips_per_shard + 2 * workers, int64_t(todo.size()),
                               [&](int64_t t) { return decode_one(idx.clips[size_t(todo[size_t(t)])], o, meta); });
  std::vector<SkippedClip> all_skipped;
  for (size_t s = 0; s < plans.size(); ++s) {
    if (kept[s]) {
      all_skipped.insert(all_skipped.end(), kept[s]->skipped.begin(), kept[s]->skipped.end());
      sum.written += kept[s]->size();
      continue;
    }
    std::vector<EncodedClip> clips;
    std::vector<SkippedClip> skipped;
    for (int64_t i = 0; i < plans[s].count; ++i) {
      ClipResult r = pool.next();
      if (r.clip) clips.push_back(std::move(*r.clip));
      else skipped.push_back(std::move(r.skipped)), ++prog.skipped;
      ++prog.clips_done;
      report_progress(false);
    }
    meta.plan = plans[s].plan;
    write_shard(plans[s].path, meta, clips, skipped);
    sum.written += int64_t(clips.size());
    all_skipped.insert(all_skipped.end(), skipped.begin(), skipped.end());
    ++prog.shards_done;
  }
  write_skip_report(sum.report, missing_rows(idx), all_skipped);
  sum.skipped = int64_t(all_skipped.size());
  sum.shards = int64_t(plans.size());
  report_progress(true);
  sum.seconds = prog.elapsed_s;
  return sum;
}

namespace {

std::string hms(double s) {
  const long long t = std::llround(std::max(0.0, s));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

std::string progress_text(const PrepProgress& p, const std::string& title, bool bar) {
  const double frac = p.clips_total ? double(p.clips_done) / double(p.clips_total) : 1.0;
  const double rate = p.elapsed_s > 0 ? double(p.clips_done) / p.elapsed_s : 0;
  std::string s = title + ": ";
  if (bar) {
    const int width = 30, filled = int(frac * width);
    s += "[" + std::string(size_t(filled), '#') + std::string(size_t(width - filled), '-') + "] ";
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "%3.0f%% %lld/%lld clips, %lld/%lld shards, %.1f clips/s, ETA %s, skipped %lld",
                100 * frac, static_cast<long long>(p.clips_done), static_cast<long long>(p.clips_total),
                static_cast<long long>(p.shards_done), static_cast<long long>(p.shards_total), rate,
                rate > 0 ? hms(double(p.clips_total - p.clips_done) / rate).c_str() : "?",
                static_cast<long long>(p.skipped));
  return s + buf;
}

}  // namespace

std::function<void(const PrepProgress&)> console_progress(std::FILE* out, const std::string& title, double period_s) {
  const bool tty = ::isatty(::fileno(out));
  auto last = std::make_shared<double>(-1e9);
  return [=](const PrepProgress& p) {
    // Redraw a terminal at most 10 times a second; log files get a line per period.
    const double every = tty ? 0.1 : period_s;
    if (!p.finished && p.elapsed_s - *last < every) return;
    *last = p.elapsed_s;
    if (tty) std::fprintf(out, "\r%s\x1b[K%s", progress_text(p, title, true).c_str(), p.finished ? "\n" : "");
    else std::fprintf(out, "%s\n", progress_text(p, title, false).c_str());
    std::fflush(out);
  };
}

}  // namespace perceiver
