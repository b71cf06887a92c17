// The loader's video source (LoaderSource::kVideos, `data_source: videos`): the clips of a
// Kinetics-layout folder, decoded as they are read. register_media() hands it to the core's
// loader (data/media_hooks.h).
#pragma once

#include <memory>

#include "data/loader.h"
#include "media/video_reader.h"

namespace perceiver {

/// Opens the index of o.dataset_dir for o.split (throws when it holds no clips). A clip that
/// fails to decode is returned as unusable (as perceiver-prep skips it), never thrown.
std::unique_ptr<ClipSource> open_video_source(const LoaderOptions& o, const ReaderOptions& reader = {});

}  // namespace perceiver
