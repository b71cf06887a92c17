// perceiver::media — the FFmpeg/libsndfile component of libperceiver (libperceiver_media;
// find_package(perceiver COMPONENTS media), pkg-config perceiver-media). The core library
// (perceiver::perceiver) links neither: it trains and evaluates from prepared HDF5 shards. This
// component adds what needs codecs: decoding videos as they are read (data_source: videos),
// preparing a Kinetics-layout folder into shards, the MP4/WAV/PNG media of evaluation, the
// synthetic Kinetics set and perceiver-prep's pipeline.
#pragma once

#include <cstdint>
#include <string>

namespace perceiver {

/// Plugs this component into the core library of the process: the loader's video source, the
/// preparation of a Kinetics-layout dataset_dir, evaluation's media, FFmpeg's log level. Call it
/// once at the start of main (idempotent, thread-safe). Without it the core refuses those
/// requests with one line that says so.
void register_media();

/// The versions this component runs with, e.g. "libavformat 59.27.100, libavcodec 59.37.100,
/// libswscale 6.7.100, libswresample 4.7.100, libavutil 57.28.100, libsndfile-1.2.0".
std::string media_versions();

/// What a media file holds, from its container and stream headers (the reader's safety checks
/// and limits apply: local regular files only, allowed containers and codecs).
struct MediaFileInfo {
  std::string container, video_codec, audio_codec;
  double duration_s = 0, fps = 0;
  int width = 0, height = 0;
  bool has_audio = false;
  int sample_rate = 0;
};

/// Opens `path` and reads its headers; throws perceiver::Error (perceiver/error.h) naming the
/// file and the reason.
MediaFileInfo probe_media_file(const std::string& path);

/// Writes the synthetic Kinetics-layout set `make demo` trains on (340×256 H.264 + AAC clips of
/// coloured moving shapes and chords, annotations/{train,validate}.csv) into out_dir; the same
/// seed gives the same bytes. Returns the number of clips written (train and validation).
int64_t write_synthetic_kinetics(const std::string& out_dir, int num_classes, int clips_per_class, uint64_t seed);

}  // namespace perceiver
