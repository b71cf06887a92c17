#include "data/shards.h"

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "io/hdf5_file.h"
#include "perceiver/error.h"

namespace perceiver {
namespace fs = std::filesystem;

int64_t ShardMeta::audio_samples() const { return std::llround(double(num_frames) * double(sample_rate) / fps); }

namespace {

// Bounds of the shard attributes: beyond anything perceiver-prep writes, and small enough that
// the buffers sized from them (a frame, a clip's audio) stay allocatable.
constexpr int64_t kMaxFrames = 10000;
constexpr int64_t kMaxImageDim = 8192;
constexpr int64_t kMaxAudioSamples = int64_t(1) << 26;
constexpr int64_t kMaxClips = int64_t(1) << 24;
constexpr int64_t kMaxClasses = 100000;

std::vector<uint8_t> deflate_bytes(const void* data, size_t n, int level) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (level <= 0) return {p, p + n};
  uLongf out_n = compressBound(uLong(n));
  std::vector<uint8_t> out(out_n);
  PCV_CHECK(compress2(out.data(), &out_n, p, uLong(n), level) == Z_OK, "zlib compress2 failed");
  out.resize(out_n);
  return out;
}

void inflate_bytes(const std::vector<uint8_t>& in, void* out, size_t n, const std::string& what) {
  uLongf out_n = uLongf(n);
  const int rc = uncompress(static_cast<Bytef*>(out), &out_n, in.data(), uLong(in.size()));
  PCV_CHECK(rc == Z_OK && out_n == n, what, ": corrupt compressed chunk (zlib error ", rc, ")");
}

// ---- writing ----

H5Handle dataset_props(const std::vector<hsize_t>& chunk, int level) {
  H5Handle dcpl(PCV_H5(H5Pcreate(H5P_DATASET_CREATE), "dcpl"), H5Pclose);
  // Object headers otherwise record creation/modification times, so equal inputs would give
  // different bytes.
  PCV_H5(H5Pset_obj_track_times(dcpl.get(), false), "track times");
  if (!chunk.empty()) {
    PCV_H5(H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()), "chunk");
    if (level > 0) PCV_H5(H5Pset_deflate(dcpl.get(), unsigned(level)), "deflate");
  }
  return dcpl;
}

struct ShardFileWriter {
  hid_t file;
  std::string path;

  H5Handle create(const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                  const std::vector<hsize_t>& chunk, int level) {
    std::vector<hsize_t> max = dims;
    if (!chunk.empty()) max[0] = H5S_UNLIMITED;  // lets an empty shard still be chunked
    H5Handle space(PCV_H5(H5Screate_simple(int(dims.size()), dims.data(), max.data()), path, " ", name), H5Sclose);
    H5Handle dcpl = dataset_props(chunk, level);
    return {PCV_H5(H5Dcreate2(file, name.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                       path, ": create ", name),
            H5Dclose};
  }

  template <class T>
  void column(const std::string& name, hid_t type, const std::vector<T>& v) {
    H5Handle ds = create(name, type, {hsize_t(v.size())}, {}, 0);
    if (!v.empty()) PCV_H5(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), path, " ", name);
  }

  void strings(const std::string& name, const std::vector<std::string>& v) {
    H5Handle type = h5_vlen_string_type();
    std::vector<const char*> ptrs;
    for (const auto& s : v) ptrs.push_back(s.c_str());
    column(name, type.get(), ptrs);
  }

  void attr(const std::string& key, hid_t type, const void* value, hsize_t count = 0) {
    H5Handle space(count ? H5Screate_simple(1, &count, nullptr) : H5Screate(H5S_SCALAR), H5Sclose);
    H5Handle a(PCV_H5(H5Acreate2(file, key.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), path, " ", key),
               H5Aclose);
    PCV_H5(H5Awrite(a.get(), type, value), path, " attribute ", key);
  }
  void attr(const std::string& key, int64_t v) { attr(key, H5T_NATIVE_INT64, &v); }
  void attr(const std::string& key, double v) { attr(key, H5T_NATIVE_DOUBLE, &v); }
  void attr(const std::string& key, const std::string& v) {
    H5Handle type = h5_vlen_string_type();
    const char* p = v.c_str();
    attr(key, type.get(), &p);
  }
  void attr(const std::string& key, const std::vector<std::string>& v) {
    H5Handle type = h5_vlen_string_type();
    std::vector<const char*> ptrs;
    for (const auto& s : v) ptrs.push_back(s.c_str());
    if (ptrs.empty()) ptrs.push_back("");  // a zero-length attribute is not allowed
    attr(key, type.get(), ptrs.data(), hsize_t(ptrs.size()));
  }
};

void write_meta(ShardFileWriter& w, const ShardMeta& m, int64_t n) {
  w.attr("format_version", kShardFormatVersion);
  w.attr("split", m.split);
  w.attr("fps", m.fps);
  w.attr("sample_rate", m.sample_rate);
  w.attr("num_frames", m.num_frames);
  w.attr("image_dim", m.image_dim);
  w.attr("audio_samples", m.audio_samples());
  w.attr("num_clips", n);
  w.attr("num_classes", int64_t(m.class_names.size()));
  w.attr("class_names", m.class_names);
  w.attr("plan", m.plan);
}

void write_media(ShardFileWriter& w, const ShardMeta& m, const std::vector<EncodedClip>& clips) {
  const hsize_t n = clips.size(), t = hsize_t(m.num_frames), d = hsize_t(m.image_dim), s = hsize_t(m.audio_samples());
  H5Handle video = w.create("video", H5T_STD_U8LE, {n, t, d, d, 3}, {1, 1, d, d, 3}, m.deflate_level);
  H5Handle audio = w.create("audio", H5T_IEEE_F32LE, {n, s}, {1, s}, m.deflate_level);
  for (hsize_t i = 0; i < n; ++i) {
    const EncodedClip& c = clips[i];
    PCV_ASSERT(c.frame_chunks.size() == t, "clip with ", c.frame_chunks.size(), " frames");
    for (hsize_t f = 0; f < t; ++f) {
      const hsize_t off[5] = {i, f, 0, 0, 0};
      const auto& ch = c.frame_chunks[f];
      PCV_H5(H5Dwrite_chunk(video.get(), H5P_DEFAULT, 0, off, ch.size(), ch.data()), w.path, " video chunk");
    }
    const hsize_t off[2] = {i, 0};
    PCV_H5(H5Dwrite_chunk(audio.get(), H5P_DEFAULT, 0, off, c.audio_chunk.size(), c.audio_chunk.data()),
               w.path, " audio chunk");
  }
}

template <class F>
auto collect(const std::vector<EncodedClip>& clips, F f) {
  std::vector<decltype(f(clips[0]))> v;
  for (const auto& c : clips) v.push_back(f(c));
  return v;
}

void write_columns(ShardFileWriter& w, const std::vector<EncodedClip>& clips, const std::vector<SkippedClip>& skipped) {
  w.column("label", H5T_NATIVE_INT32, collect(clips, [](const EncodedClip& c) { return c.label; }));
  w.strings("youtube_id", collect(clips, [](const EncodedClip& c) { return c.youtube_id; }));
  w.column("time_start", H5T_NATIVE_INT64, collect(clips, [](const EncodedClip& c) { return c.time_start; }));
  w.column("time_end", H5T_NATIVE_INT64, collect(clips, [](const EncodedClip& c) { return c.time_end; }));
  w.column("window_start", H5T_NATIVE_DOUBLE, collect(clips, [](const EncodedClip& c) { return c.window_start_s; }));
  w.column("padded_frames", H5T_NATIVE_INT32, collect(clips, [](const EncodedClip& c) { return c.padded_frames; }));
  w.column("padded_samples", H5T_NATIVE_INT64, collect(clips, [](const EncodedClip& c) { return c.padded_samples; }));
  std::vector<std::string> ids, reasons;
  std::vector<int64_t> starts, ends;
  for (const auto& s : skipped) {
    ids.push_back(s.youtube_id), reasons.push_back(s.reason);
    starts.push_back(s.time_start), ends.push_back(s.time_end);
  }
  w.strings("skipped_youtube_id", ids);
  w.column("skipped_time_start", H5T_NATIVE_INT64, starts);
  w.column("skipped_time_end", H5T_NATIVE_INT64, ends);
  w.strings("skipped_reason", reasons);
}

}  // namespace

EncodedClip encode_clip(const ShardMeta& meta, const uint8_t* video, const float* audio) {
  EncodedClip c;
  const size_t fb = size_t(meta.frame_bytes());
  for (int64_t f = 0; f < meta.num_frames; ++f)
    c.frame_chunks.push_back(deflate_bytes(video + size_t(f) * fb, fb, meta.deflate_level));
  c.audio_chunk = deflate_bytes(audio, size_t(meta.audio_samples()) * sizeof(float), meta.deflate_level);
  return c;
}

void write_shard(const fs::path& path, const ShardMeta& meta, const std::vector<EncodedClip>& clips,
                 const std::vector<SkippedClip>& skipped) {
  H5File file = H5File::create_in_memory(path.string(), /*track_times=*/false, /*chunk_index_k=*/32);
  ShardFileWriter w{file.id(), path.string()};
  write_meta(w, meta, int64_t(clips.size()));
  write_media(w, meta, clips);
  write_columns(w, clips, skipped);
  file.commit(TempName::kFixed);
}

// ---- reading ----

struct ShardReader::State {
  explicit State(H5File f) : file(std::move(f)) {}
  fs::path path;
  H5File file;
  H5Handle video, audio;
  bool compressed = false;
  ShardIndex index;
};

namespace {

int64_t attr_in_range(const H5File& f, const char* key, int64_t lo, int64_t hi) {
  PCV_CHECK(f.has_attr("/", key), f.path(), ": not a shard (no attribute '", key, "')");
  const int64_t v = f.attr_int("/", key);
  PCV_CHECK(v >= lo && v <= hi, f.path(), ": shard attribute ", key, " is ", v, ", outside [", lo, ", ", hi, "]");
  return v;
}

ShardMeta read_meta(const H5File& f) {
  const std::string& path = f.path();
  const int64_t version = attr_in_range(f, "format_version", 0, std::numeric_limits<int64_t>::max());
  PCV_CHECK(version == kShardFormatVersion, path, ": shard format version ", version, ", this build reads version ",
            kShardFormatVersion, ". HINT: re-run perceiver-prep with this build");
  ShardMeta m;
  m.split = f.attr_string("/", "split");
  m.fps = f.attr_double("/", "fps");
  PCV_CHECK(std::isfinite(m.fps) && m.fps >= 1 && m.fps <= 1000, path, ": shard attribute fps is ", m.fps,
            ", outside [1, 1000]");
  m.sample_rate = attr_in_range(f, "sample_rate", 1000, 384000);
  m.num_frames = attr_in_range(f, "num_frames", 1, kMaxFrames);
  m.image_dim = attr_in_range(f, "image_dim", 1, kMaxImageDim);
  PCV_CHECK(m.audio_samples() <= kMaxAudioSamples, path, ": ", m.num_frames, " frames at ", m.fps, " fps and ",
            m.sample_rate, " Hz make ", m.audio_samples(), " audio samples per clip (at most ", kMaxAudioSamples, ")");
  const int64_t classes = attr_in_range(f, "num_classes", 0, kMaxClasses);
  m.class_names = f.attr_strings("/", "class_names", kMaxClasses);
  if (classes == 0) m.class_names.clear();  // the writer stores [""]: a zero-length attribute is not allowed
  PCV_CHECK(int64_t(m.class_names.size()) == classes, path, ": num_classes is ", classes, " but class_names holds ",
            m.class_names.size(), " names");
  m.plan = f.attr_string("/", "plan");
  return m;
}

template <class T>
std::vector<T> read_column(const H5File& f, const char* name, int64_t n) {
  const std::vector<int64_t> d = f.shape(name);
  PCV_CHECK(d.size() == 1 && d[0] == n, f.path(), ": dataset '", name, "' should have ", n, " elements");
  std::vector<T> v(static_cast<size_t>(n));
  f.read_into<T>(name, v.data(), n);
  return v;
}

std::vector<std::string> read_string_column(const H5File& f, const char* name, int64_t n) {
  std::vector<std::string> v = f.read_strings(name);
  PCV_CHECK(int64_t(v.size()) == n, f.path(), ": dataset '", name, "' should have ", n, " elements");
  return v;
}

void read_columns(const H5File& f, ShardIndex& ix) {
  const int64_t n = attr_in_range(f, "num_clips", 0, kMaxClips);
  const int64_t classes = int64_t(ix.meta.class_names.size());
  ix.label = read_column<int32_t>(f, "label", n);
  for (int64_t i = 0; i < n; ++i)
    PCV_CHECK(ix.label[size_t(i)] >= -1 && ix.label[size_t(i)] < classes, f.path(), ": clip ", i, " has label ",
              ix.label[size_t(i)], ", outside [-1, ", classes, ")");
  ix.youtube_id = read_string_column(f, "youtube_id", n);
  ix.time_start = read_column<int64_t>(f, "time_start", n);
  ix.time_end = read_column<int64_t>(f, "time_end", n);
  const std::vector<int64_t> sd = f.shape("skipped_reason");
  PCV_CHECK(sd.size() == 1 && sd[0] <= kMaxClips, f.path(), ": dataset 'skipped_reason' is not a list of reasons");
  const int64_t ns = sd[0];
  const auto sid = read_string_column(f, "skipped_youtube_id", ns);
  const auto sreason = read_string_column(f, "skipped_reason", ns);
  const auto sstart = read_column<int64_t>(f, "skipped_time_start", ns);
  const auto send = read_column<int64_t>(f, "skipped_time_end", ns);
  for (int64_t i = 0; i < ns; ++i)
    ix.skipped.push_back({sid[size_t(i)], sstart[size_t(i)], send[size_t(i)], sreason[size_t(i)]});
}

std::vector<hsize_t> dims_of(hid_t ds) {
  H5Handle space(H5Dget_space(ds), H5Sclose);
  std::vector<hsize_t> d(size_t(std::max(0, H5Sget_simple_extent_ndims(space.get()))));
  H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
  return d;
}

// Only chunks written by write_shard (deflate or nothing) can be fetched raw; anything else
// (e.g. after h5repack) is an error rather than a silent slow path.
bool check_layout(hid_t ds, const std::vector<hsize_t>& chunk, const std::string& path, const char* name) {
  H5Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  std::vector<hsize_t> c(chunk.size());
  PCV_CHECK(H5Pget_layout(dcpl.get()) == H5D_CHUNKED && H5Pget_chunk(dcpl.get(), int(c.size()), c.data()) == int(c.size()) &&
                c == chunk,
            path, ": '", name, "' is not chunked as written by perceiver-prep");
  const int nf = H5Pget_nfilters(dcpl.get());
  unsigned flags = 0;
  size_t nelem = 0;
  PCV_CHECK(nf == 0 || (nf == 1 && H5Pget_filter2(dcpl.get(), 0, &flags, &nelem, nullptr, 0, nullptr, nullptr) ==
                                       H5Z_FILTER_DEFLATE),
            path, ": '", name, "' uses filters other than deflate");
  return nf == 1;
}

}  // namespace

ShardReader::ShardReader(std::unique_ptr<State> s) : s_(std::move(s)) {}
ShardReader::ShardReader(ShardReader&&) noexcept = default;
ShardReader& ShardReader::operator=(ShardReader&&) noexcept = default;
ShardReader::~ShardReader() = default;
const ShardIndex& ShardReader::index() const { return s_->index; }
const fs::path& ShardReader::path() const { return s_->path; }

ShardReader ShardReader::open(const fs::path& path) {
  auto s = std::make_unique<State>(H5File::open(path.string()));
  s->path = path;
  const std::string p = path.string();
  const H5File& f = s->file;
  ShardIndex& ix = s->index;
  ix.meta = read_meta(f);
  read_columns(f, ix);
  const ShardMeta& m = ix.meta;
  const hsize_t n = hsize_t(ix.size()), t = hsize_t(m.num_frames), d = hsize_t(m.image_dim),
                sa = hsize_t(m.audio_samples());
  s->video = f.dataset("video");
  s->audio = f.dataset("audio");
  PCV_CHECK(dims_of(s->video.get()) == (std::vector<hsize_t>{n, t, d, d, 3}), p, ": 'video' has the wrong shape");
  PCV_CHECK(dims_of(s->audio.get()) == (std::vector<hsize_t>{n, sa}), p, ": 'audio' has the wrong shape");
  s->compressed = check_layout(s->video.get(), {1, 1, d, d, 3}, p, "video");
  PCV_CHECK(check_layout(s->audio.get(), {1, sa}, p, "audio") == s->compressed, p, ": video and audio compression differ");
  return ShardReader(std::move(s));
}

namespace {

// Reads one raw chunk (under HDF5's lock) and inflates it (outside it).
void read_chunk(hid_t ds, const hsize_t* offset, bool compressed, void* out, size_t n, const std::string& path) {
  h5_silence_errors();  // loader threads
  hsize_t stored = 0;
  PCV_H5(H5Dget_chunk_storage_size(ds, offset, &stored), path, ": cannot size a chunk");
  // zlib's worst case is n + n/1000 + 12 bytes: a larger chunk is a corrupt index, not data.
  PCV_CHECK(stored <= compressBound(uLong(n)), path, ": a chunk claims ", stored, " bytes for ", n, " bytes of data");
  std::vector<uint8_t> raw(stored);
  uint32_t mask = 0;
  PCV_H5(H5Dread_chunk(ds, H5P_DEFAULT, offset, &mask, raw.data()), path, ": reading a chunk");
  if (compressed && !(mask & 1u)) {
    inflate_bytes(raw, out, n, path);
  } else {
    PCV_CHECK(raw.size() == n, path, ": chunk of ", raw.size(), " bytes, expected ", n);
    std::memcpy(out, raw.data(), n);
  }
}

}  // namespace

void ShardReader::read_clip(int64_t i, int64_t first, int64_t count, uint8_t* video, float* audio) const {
  const ShardMeta& m = s_->index.meta;
  const std::string p = s_->path.string();
  PCV_CHECK(i >= 0 && i < s_->index.size(), p, ": clip ", i, " out of range [0, ", s_->index.size(), ")");
  PCV_CHECK(first >= 0 && count > 0 && first + count <= m.num_frames, p, ": frames [", first, ", ", first + count,
            ") outside the stored ", m.num_frames);
  const size_t fb = size_t(m.frame_bytes());
  for (int64_t f = 0; f < count; ++f) {
    const hsize_t off[5] = {hsize_t(i), hsize_t(first + f), 0, 0, 0};
    read_chunk(s_->video.get(), off, s_->compressed, video + size_t(f) * fb, fb, p);
  }
  if (!audio) return;
  const int64_t s = m.audio_samples();
  std::vector<float> all(static_cast<size_t>(s));
  const hsize_t off[2] = {hsize_t(i), 0};
  read_chunk(s_->audio.get(), off, s_->compressed, all.data(), all.size() * sizeof(float), p);
  const int64_t a0 = first * s / m.num_frames, a1 = (first + count) * s / m.num_frames;
  std::memcpy(audio, all.data() + a0, size_t(a1 - a0) * sizeof(float));
}

// ---- layout of a prepared folder, skip reports ----

fs::path shard_dir(const fs::path& output_dir, KineticsSplit split) { return output_dir / split_name(split); }

std::string shard_file_name(int64_t shard) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05lld.h5", static_cast<long long>(shard));
  return buf;
}

namespace {

// One line of the skip report: TSV fields hold no tabs or line breaks.
std::string tsv_field(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

std::string skip_report_line(const SkippedClip& s) {
  std::ostringstream os;
  os << tsv_field(s.youtube_id) << '\t' << s.time_start << '\t' << s.time_end << '\t' << tsv_field(s.reason) << '\n';
  return os.str();
}

void write_skip_report(const fs::path& path, const std::vector<SkippedClip>& missing,
                       const std::vector<SkippedClip>& skipped) {
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << "youtube_id\ttime_start\ttime_end\treason\n";
    for (const auto& m : missing) out << skip_report_line(m);
    for (const auto& k : skipped) out << skip_report_line(k);
    PCV_CHECK(out.flush(), "cannot write '", tmp, "'");
  }
  fs::rename(tmp, path);
}

}  // namespace perceiver
