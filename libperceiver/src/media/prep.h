// The prep pipeline (perceiver-prep): Kinetics-layout videos → HDF5 shards (data/shards.h, in
// the core: the shard writer, the layout of OUT and the skip report are shared with the loader).
// Clips are planned into shards in annotation order (shard s holds the usable clips among
// clips [s·K, (s+1)·K) of the index), decoded by a bounded pool of workers, and written in
// order, so the output bytes do not depend on the number of workers or on timing. A finished
// shard whose plan fingerprint matches is kept on a rerun; anything else is redone.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "data/kinetics_index.h"
#include "data/shards.h"
#include "media/video_reader.h"

namespace perceiver {

struct PrepProgress {
  int64_t clips_done = 0, clips_total = 0;  // clips decoded (or reused) of those found
  int64_t skipped = 0;                      // unusable so far (missing included)
  int64_t shards_done = 0, shards_total = 0;
  double elapsed_s = 0;
  bool finished = false;
};

struct PrepOptions {
  std::filesystem::path dataset_dir, output_dir;
  KineticsSplit split = KineticsSplit::kTrain;
  int num_frames = 16;      // T
  int image_dim = 224;      // D (short-side resize + centre crop)
  double fps = 25;
  int sample_rate = 48000;
  int num_workers = 0;      // decode threads; 0: one per hardware thread
  int clips_per_shard = 32; // K
  int deflate_level = 1;    // 0 stores frames uncompressed
  ReaderOptions reader;     // limits and per-file timeout for untrusted media
  /// Called from the calling thread after each clip and at the end (console_progress prints).
  std::function<void(const PrepProgress&)> on_progress;
};

struct PrepSummary {
  int64_t rows = 0;           // annotation rows
  int64_t written = 0;        // clips in the shards
  int64_t skipped = 0;        // clips that could not be decoded (listed in the report)
  int64_t missing = 0;        // rows without a clip file, or duplicates (listed in the report)
  int64_t shards = 0, shards_reused = 0;
  int64_t num_classes = 0;
  std::filesystem::path shard_dir, report;
  double seconds = 0;
};

/// Runs the pipeline. Bad clips are skipped and reported; only bad options, an unreadable
/// annotation file or an unwritable output throw perceiver::Error.
PrepSummary prepare_kinetics(const PrepOptions& opts);

/// A progress printer: a bar with rate and ETA redrawn in place when `out` is a terminal, plain
/// lines every `period_s` seconds otherwise.
std::function<void(const PrepProgress&)> console_progress(std::FILE* out, const std::string& title,
                                                          double period_s = 10);

/// Start of a window of T frames at `fps` in a clip of `duration_s`: `position` 0 is the start,
/// 0.5 the centre, 1 the end; snapped down to a frame boundary; 0 when the clip is too short.
double window_start(double duration_s, int num_frames, double fps, double position);

/// Decodes one window of a clip (spec.start_s is ignored: the window sits at `position`, as in
/// window_start). When the clip has no audio stream the audio comes from a side file
/// <youtube_id>.wav/.flac next to it, if there is one.
Clip read_clip_window(const std::filesystem::path& path, const std::string& youtube_id, WindowSpec spec,
                      const ReaderOptions& reader, double position = 0.5);

}  // namespace perceiver
