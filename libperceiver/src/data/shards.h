// HDF5 shards of prepared clips (the layout is documented for h5py users in data/README.md,
// "Shards"). Shape legend: N clips in the shard, T frames, D = image_dim (H = W = D),
// S = T·sample_rate/fps audio samples.
//
// Video is chunked one frame per chunk ([1,1,D,D,3]) and deflate-compressed. The writer
// compresses chunks itself (zlib, in the caller's thread) and stores them with H5Dwrite_chunk;
// the reader fetches raw chunks with H5Dread_chunk and inflates outside HDF5. Debian's HDF5 is
// the thread-safe build, which serialises every call behind one lock: doing the (de)compression
// outside it is what lets loader and prep threads run in parallel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/kinetics_index.h"

namespace perceiver {

/// Bumped on any incompatible change of the layout; readers refuse other versions.
inline constexpr int64_t kShardFormatVersion = 1;

/// Attributes shared by every clip of a shard (and by all shards of a split).
struct ShardMeta {
  std::string split;           // "train", "validate", "test"
  double fps = 25;
  int64_t sample_rate = 48000;
  int64_t num_frames = 16;     // T
  int64_t image_dim = 224;     // D
  std::vector<std::string> class_names;
  std::string plan;            // fingerprint of the inputs and options that made the shard
  int deflate_level = 1;       // 0 stores chunks uncompressed

  int64_t audio_samples() const;  // S
  int64_t frame_bytes() const { return image_dim * image_dim * 3; }
};

/// One clip, ready to be written: its frames already compressed (encode_clip), so the costly
/// part runs in the worker that decoded it.
struct EncodedClip {
  std::vector<std::vector<uint8_t>> frame_chunks;  // [T] deflate streams (or raw frames)
  std::vector<uint8_t> audio_chunk;                // deflate stream (or raw f32 bytes) of [S]
  int32_t label = -1;
  std::string youtube_id;
  int64_t time_start = 0, time_end = 0;  // the annotation's times in the source video
  double window_start_s = 0;             // time (s) in the clip file of the first stored frame
  int32_t padded_frames = 0;             // repeats of the last frame past the end of the clip
  int64_t padded_samples = 0;            // zeros where the clip had no audio
};

/// A clip of the shard's range that could not be used (kept in the shard so that a resumed
/// run can rebuild the skip report).
struct SkippedClip {
  std::string youtube_id;
  int64_t time_start = 0, time_end = 0;
  std::string reason;
};

/// Compresses video uint8 [T,D,D,3] and audio f32 [S] (sizes checked against meta).
EncodedClip encode_clip(const ShardMeta& meta, const uint8_t* video, const float* audio);

/// Writes `path` atomically (built in memory, written to path + ".tmp", fsync'ed, renamed; a
/// write error leaves no file). The bytes depend only on the arguments: no timestamps, fixed
/// object order.
void write_shard(const std::filesystem::path& path, const ShardMeta& meta, const std::vector<EncodedClip>& clips,
                 const std::vector<SkippedClip>& skipped);

/// Per-clip fields of a shard (everything but the frames and audio).
struct ShardIndex {
  ShardMeta meta;
  std::vector<int32_t> label;            // [N]
  std::vector<std::string> youtube_id;   // [N]
  std::vector<int64_t> time_start, time_end;
  std::vector<SkippedClip> skipped;
  int64_t size() const { return int64_t(label.size()); }
};

/// An open shard. read_clip may be called from several threads at once.
class ShardReader {
 public:
  /// Opens and validates a shard (format version, attribute ranges, dataset shapes, labels);
  /// throws perceiver::Error naming the file and the attribute or dataset at fault. Readers are
  /// move-only and always open.
  static ShardReader open(const std::filesystem::path& path);
  ShardReader(ShardReader&&) noexcept;
  ShardReader& operator=(ShardReader&&) noexcept;
  ~ShardReader();

  const ShardIndex& index() const;
  const std::filesystem::path& path() const;

  /// Frames [first, first + count) of clip i into video uint8 [count,D,D,3], and the matching
  /// audio (count·S/T samples from first·S/T) into audio f32 (nullptr skips the audio).
  void read_clip(int64_t i, int64_t first, int64_t count, uint8_t* video, float* audio) const;

 private:
  struct State;
  explicit ShardReader(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

/// OUT/<split> (where the shards of a split go: perceiver-prep writes them, the loader reads
/// them) and a shard's file name in it (shard-NNNNN.h5).
std::filesystem::path shard_dir(const std::filesystem::path& output_dir, KineticsSplit split);
std::string shard_file_name(int64_t shard);

/// The skip report (OUT/skipped_<split>.tsv from perceiver-prep; LOGDIR/skipped_train.tsv from
/// a trainer that reads videos itself): a header line, then `youtube_id  time_start  time_end
/// reason` per annotation row without a clip, then per clip that could not be used. Written to
/// a temporary name and renamed.
void write_skip_report(const std::filesystem::path& path, const std::vector<SkippedClip>& missing,
                       const std::vector<SkippedClip>& skipped);
/// One line of it (tabs and line breaks in the fields become spaces).
std::string skip_report_line(const SkippedClip& clip);

}  // namespace perceiver
