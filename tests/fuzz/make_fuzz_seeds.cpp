// Writes the seed corpus of every fuzz target into OUT_DIR/<target>/ (run by the fuzz.seeds
// test, so no generated binary is committed): valid files of each kind, made with our own
// writers, plus the repository's config files. Then checks that the readers accept each valid
// seed, so that a format change cannot leave the fuzzers starting from files refused at once.
// Usage: make_fuzz_seeds OUT_DIR SOURCE_DIR
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "data/shards.h"
#include "h5_program.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "optim/optimizer.h"
#include "perceiver/config.h"
#include "perceiver/error.h"
#include "train/checkpoint.h"
#include "train/train_config.h"

// The media seeds need the media component's writer and reader (PERCEIVER_WITH_MEDIA builds).
#if PERCEIVER_WITH_MEDIA
#include "media/media_writer.h"
#include "media/video_reader.h"
#endif

namespace {

namespace fs = std::filesystem;
using namespace perceiver;
namespace h5 = fuzz::h5;

// The readers' verdict on the valid seeds: each must be accepted.
void check(bool ok, const fs::path& seed, const std::string& reader) {
  PCV_CHECK(ok, "seed ", seed.string(), " is refused by ", reader);
}

template <class F>
bool accepted(F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    std::fprintf(stderr, "  %s\n", e.what());
    return false;
  }
}

void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

[[maybe_unused]] std::string read(const fs::path& p) {  // the media seeds' (media builds only)
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * float(i + 1);
  return v;
}

size_t count(const std::vector<uint64_t>& dims) {
  size_t n = 1;
  for (uint64_t d : dims) n *= size_t(d);
  return n;
}

void safetensors_seeds(const fs::path& out) {
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  for (StDtype dtype : {StDtype::kF32, StDtype::kF16, StDtype::kBF16, StDtype::kF64}) {
    std::vector<std::vector<uint8_t>> owned;
    std::vector<StOutTensor> tensors;
    for (const auto& t : h5::model_tensors()) {
      owned.emplace_back(count(t.dims) * size_t(st_dtype_size(dtype)), uint8_t(0x3c));
      tensors.push_back({t.name, dtype, std::vector<int64_t>(t.dims.begin(), t.dims.end()), owned.back()});
    }
    const fs::path p = out / (std::string("model_") + st_dtype_name(dtype) + ".safetensors");
    fs::create_directories(out);
    write_safetensors(p.string(), tensors, dtype == StDtype::kF32 ? &meta : nullptr);
    ParamStore<float> store(h5::model_registry());
    check(accepted([&] { load_weights(store, p.string()); }), p, "load_weights");
  }
  const std::vector<uint8_t> ids(8 * 3, 1);
  write_safetensors((out / "ints.safetensors").string(), {{"ids", StDtype::kI64, {3}, ids}}, nullptr);
  write_safetensors((out / "empty.safetensors").string(), {}, &meta);
}

h5::Program checkpoint_program() {
  h5::Program p;
  p.attr_string("/", "format", "libperceiver-checkpoint").attr_int("/", "format_version", 2);
  for (const char* k : {"step", "optimizer_steps"}) p.attr_int("/", k, 3);
  for (const char* k : {"epoch", "sampler_epoch", "seed"}) p.attr_int("/", k, 0);
  p.attr_int("/", "sampler_batch", 1).attr_int("/", "world_size", 1).attr_int("/", "sampler_global_batch", 2);
  p.attr_string("/", "optimizer", "adamw").attr_string("/", "config_yaml", "batch_size: 2\noptimizer: adamw\n");
  p.attr_string("/", "created", "2026-01-01T00:00:00Z");
  for (const auto& t : h5::model_tensors()) {
    const auto space = h5::Space::simple(t.dims);
    p.dataset("/params/" + t.name, h5::kF32, space, h5::kChecksummed, bytes_of(ramp(count(t.dims), 0.5f)));
    for (const char* state : {"exp_avg", "exp_avg_sq"})
      p.dataset(std::string("/optimizer/") + state + "/" + t.name, h5::kF32, space, h5::kChecksummed,
                bytes_of(ramp(count(t.dims), 0.01f)));
  }
  return p;
}

h5::Program weights_program() {
  h5::Program p;
  p.attr_string("/", "format", "perceiver-checkpoint").attr_int("/", "format_version", 2);
  for (const auto& t : h5::model_tensors()) {
    p.dataset("/params/" + t.name, h5::kF32, h5::Space::simple(t.dims), h5::kChecksummed,
              bytes_of(ramp(count(t.dims), 0.25f)));
    p.attr_string("/params/" + t.name, "source_dtype", "F16");
  }
  p.dataset("/source/safetensors_header", h5::kVlenString, h5::Space::scalar(), h5::kContiguous,
            R"({"perceiver.w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})");
  return p;
}

// Two clips of 2 frames of 4×4 at 25 fps, 8 kHz audio (640 samples), as write_shard lays out.
h5::Program shard_program(h5::Layout media) {
  h5::Program p;
  p.attr_int("/", "format_version", 1).attr_string("/", "split", "train").attr_double("/", "fps", 25.0);
  p.attr_int("/", "sample_rate", 8000).attr_int("/", "num_frames", 2).attr_int("/", "image_dim", 4);
  p.attr_int("/", "audio_samples", 640).attr_int("/", "num_clips", 2).attr_int("/", "num_classes", 2);
  p.attr_strings("/", "class_names", {"a", "b"}).attr_string("/", "plan", "p");
  p.dataset("video", h5::kU8, h5::Space::simple({2, 2, 4, 4, 3}), media, std::string(192, '\x40'));
  p.dataset("audio", h5::kF32, h5::Space::simple({2, 640}), media, bytes_of(ramp(4, 0.1f)));
  p.dataset("label", h5::kI32, h5::Space::simple({2}), h5::kContiguous, bytes_of(std::vector<int32_t>{0, 1}));
  p.dataset("youtube_id", h5::kVlenString, h5::Space::simple({2}), h5::kContiguous, std::string("x\0y", 3));
  for (const char* k : {"time_start", "time_end", "padded_samples"})
    p.dataset(k, h5::kI64, h5::Space::simple({2}), h5::kContiguous, bytes_of(std::vector<int64_t>{0, 10}));
  p.dataset("window_start", h5::kF64, h5::Space::simple({2}), h5::kContiguous, bytes_of(std::vector<double>{0, 0}));
  p.dataset("padded_frames", h5::kI32, h5::Space::simple({2}), h5::kContiguous, bytes_of(std::vector<int32_t>{0, 0}));
  for (const char* k : {"skipped_youtube_id", "skipped_reason"})
    p.dataset(k, h5::kVlenString, h5::Space::simple({0}), h5::kContiguous, "");
  for (const char* k : {"skipped_time_start", "skipped_time_end"})
    p.dataset(k, h5::kI64, h5::Space::simple({0}), h5::kContiguous, "");
  return p;
}

// Replays a program into a file at `file` and returns its path.
fs::path replay(const std::string& program, const fs::path& file) {
  const std::vector<uint8_t> image = h5::build(reinterpret_cast<const uint8_t*>(program.data()), program.size());
  put(file, std::string(image.begin(), image.end()));
  return file;
}

void hdf5_seeds(const fs::path& out, const fs::path& scratch) {
  put(out / "checkpoint.bin", checkpoint_program().bytes());
  put(out / "weights.bin", weights_program().bytes());
  put(out / "shard_raw.bin", shard_program(h5::kChunked).bytes());
  put(out / "shard_deflate.bin", shard_program(h5::kDeflated).bytes());
  // Two hostile shapes the readers must refuse: an array where a scalar belongs, a link out.
  h5::Program array = checkpoint_program();
  array.attr("/", "step", h5::kI64, h5::Space::simple({4000}), std::string(8, '\x01'));
  put(out / "checkpoint_array_step.bin", array.bytes());
  put(out / "checkpoint_soft_link.bin", checkpoint_program().soft_link("/params/extra", "/params/perceiver.w").bytes());

  const fs::path ckpt = replay(checkpoint_program().bytes(), checkpoint_path(scratch, 1));
  ParamStore<float> store(h5::model_registry());
  OptimizerOptions o;
  o.name = "adamw";
  const auto opt = make_optimizer(o, store.registry(), store.backend());
  check(accepted([&] { load_checkpoint(ckpt, store, opt.get()); }), out / "checkpoint.bin", "load_checkpoint");
  const fs::path weights = replay(weights_program().bytes(), scratch / "weights.h5");
  check(accepted([&] { load_weights(store, weights.string()); }), out / "weights.bin", "load_weights");
  for (h5::Layout layout : {h5::kChunked, h5::kDeflated}) {
    const fs::path shard = replay(shard_program(layout).bytes(), scratch / "shard.h5");
    std::vector<uint8_t> video(4 * 4 * 3);
    std::vector<float> audio(320);
    check(accepted([&] { ShardReader::open(shard).read_clip(1, 1, 1, video.data(), audio.data()); }), out / "shard_*.bin",
          "ShardReader");
  }
}

#if PERCEIVER_WITH_MEDIA
// Media seeds: the first byte picks the extension in fuzz_media_probe.cpp (.mp4 .mkv .webm .avi .mov).
void media_seeds(const fs::path& out) {
  struct Kind {
    const char* name;
    char selector;
    const char* video;
    const char* audio;
  };
  const Kind kinds[] = {{"h264_aac.mp4", 0, "libx264", "aac"},
                        {"h264_flac.mkv", 1, "libx264", "flac"},
                        {"vp9_opus.webm", 2, "libvpx-vp9", "libopus"},
                        {"mpeg4.avi", 3, "mpeg4", ""},
                        {"h264_pcm.mov", 4, "libx264", "pcm_s16le"}};
  fs::create_directories(out);
  for (const Kind& k : kinds) {
    MediaWriterOptions o;
    o.width = o.height = 32;
    o.video_codec = k.video, o.audio_codec = k.audio;
    o.audio_channels = *k.audio ? 1 : 0;
    const fs::path tmp = out / k.name;
    {
      MediaWriter w = MediaWriter::create(tmp, o);
      std::vector<uint8_t> frame(32 * 32 * 3);
      std::vector<float> audio(1920, 0.25f);
      for (int f = 0; f < 3; ++f) {
        std::memset(frame.data(), 40 * f, frame.size());
        w.write_frame(frame.data());
        if (o.audio_channels) w.write_audio(audio.data(), 1920);
      }
      w.finish();
    }
    put(out / (std::string(k.name) + ".seed"), std::string(1, k.selector) + read(tmp));
    WindowSpec window;
    window.num_frames = 2, window.image_dim = 16;
    check(accepted([&] { VideoReader::open(tmp).read_window(window); }), tmp, "VideoReader");
    fs::remove(tmp);
  }
}
#endif

void yaml_seeds(const fs::path& out, const fs::path& source) {
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(source / "configs"))
    fs::copy_file(e.path(), out / e.path().filename(), fs::copy_options::overwrite_existing);
  fs::copy_file(source / "tests" / "train" / "tiny_video.yaml", out / "tiny_video.yaml",
                fs::copy_options::overwrite_existing);
  const fs::path main_yaml = out / "main.yaml";
  std::string arg0 = "perceiver-train", arg1 = "--config_file_path", arg2 = main_yaml.string();
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  bool help = false;
  std::string text;
  check(accepted([&] { parse_train_config(3, argv, &help, &text); }), main_yaml, "parse_train_config");
  check(accepted([&] { load_model_config((out / "tiny.yaml").string()); }), out / "tiny.yaml", "load_model_config");
  check(accepted([&] { load_model_config((out / "hf_kinetics700_config.json").string()); }),
        out / "hf_kinetics700_config.json", "load_model_config");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_fuzz_seeds OUT_DIR SOURCE_DIR\n");
    return 2;
  }
  const fs::path out = argv[1], source = argv[2];
  try {
#if PERCEIVER_WITH_MEDIA
    set_ffmpeg_log_level(16);  // AV_LOG_ERROR: no encoder statistics
#endif
    const fs::path scratch = out / "scratch";
    safetensors_seeds(out / "safetensors");
    hdf5_seeds(out / "hdf5", scratch);
#if PERCEIVER_WITH_MEDIA
    media_seeds(out / "media_probe");
#endif
    yaml_seeds(out / "yaml_config", source);
    fs::create_directories(out / "kinetics_csv");  // its corpus is committed text (corpus/kinetics_csv)
    fs::remove_all(scratch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  std::printf("fuzz seeds written to %s\n", out.c_str());
  return 0;
}
