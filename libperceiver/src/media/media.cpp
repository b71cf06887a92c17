// The component's public entry points (perceiver/media.h): registration with the core's media
// hooks (data/media_hooks.h), versions, probing and the synthetic set.
#include "perceiver/media.h"

#include <cstdio>

#include <sndfile.h>

#include "data/loader.h"
#include "data/media_hooks.h"
#include "media/ffmpeg_ptr.h"
#include "media/prep.h"
#include "media/reconstruction_media.h"
#include "media/synthetic.h"
#include "media/video_reader.h"
#include "media/video_source.h"

extern "C" {
#include <libavutil/log.h>
}

namespace perceiver {
namespace {

// A Kinetics-layout dataset_dir prepared for a trainer or an evaluation (data/prepared_dataset.h).
void prepare_for_run(const PrepareRequest& r) {
  PrepOptions po;
  po.dataset_dir = r.dataset_dir;
  po.output_dir = r.output_dir;
  po.split = parse_split(r.split);
  po.num_frames = int(r.num_frames);
  po.image_dim = int(r.image_dim);
  po.num_workers = int(r.num_workers);
  po.on_progress = console_progress(stdout, "preparing " + r.split + " shards");
  const PrepSummary sum = prepare_kinetics(po);  // resumable: finished shards are kept
  std::printf("prepared %s: %ld clips in %ld shards (%ld skipped, %ld missing; report %s)\n", r.split.c_str(),
              long(sum.written), long(sum.shards), long(sum.skipped), long(sum.missing), sum.report.c_str());
}

std::string version_text(const char* name, unsigned v) {
  return std::string(name) + " " + std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) + "." +
         std::to_string(v & 0xff);
}

}  // namespace

void register_media() {
  MediaHooks h;
  h.video_source = [](const LoaderOptions& o) { return open_video_source(o); };
  h.prepare = prepare_for_run;
  h.write_reconstruction = [](const ReconstructionMedia& m) {
    write_reconstruction_media(m.stem, m.video, m.recon_video, m.recon_audio, m.frames, m.height, m.width,
                               m.audio_samples, m.fps, m.sample_rate);
  };
  h.set_log_level = [](MediaLogLevel l) { set_ffmpeg_log_level(l == MediaLogLevel::kQuiet ? AV_LOG_QUIET : AV_LOG_ERROR); };
  set_media_hooks(std::move(h));
}

std::string media_versions() {
  char sndfile[128] = "";
  sf_command(nullptr, SFC_GET_LIB_VERSION, sndfile, sizeof sndfile);
  return version_text("libavformat", avformat_version()) + ", " + version_text("libavcodec", avcodec_version()) +
         ", " + version_text("libswscale", swscale_version()) + ", " +
         version_text("libswresample", swresample_version()) + ", " + version_text("libavutil", avutil_version()) +
         ", " + sndfile;
}

MediaFileInfo probe_media_file(const std::string& path) {
  const VideoReader r = VideoReader::open(path);
  const MediaInfo& i = r.info();
  MediaFileInfo o;
  o.container = i.container, o.video_codec = i.video_codec, o.audio_codec = i.audio_codec;
  o.duration_s = i.duration_s, o.fps = i.fps, o.width = i.width, o.height = i.height;
  o.has_audio = i.has_audio, o.sample_rate = i.sample_rate;
  return o;
}

int64_t write_synthetic_kinetics(const std::string& out_dir, int num_classes, int clips_per_class, uint64_t seed) {
  const SyntheticSummary s = make_synthetic_kinetics(out_dir, num_classes, clips_per_class, seed);
  return int64_t(s.train_clips) + s.val_clips;
}

}  // namespace perceiver
