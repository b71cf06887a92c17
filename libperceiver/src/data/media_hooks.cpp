#include "data/media_hooks.h"

#include <mutex>
#include <vector>

#include "perceiver/error.h"

// Set for this file by data/sources.cmake: whether the build has the media component at all
// (only the message differs: rebuild, or register it).
#ifndef PERCEIVER_WITH_MEDIA
#define PERCEIVER_WITH_MEDIA 0
#endif

namespace perceiver {
namespace {

std::mutex g_mutex;
std::unique_ptr<const MediaHooks> g_hooks;  // replaced, never freed while a caller may hold it

}  // namespace

void set_media_hooks(MediaHooks hooks) {
  PCV_CHECK(hooks.video_source && hooks.prepare && hooks.write_reconstruction && hooks.set_log_level,
            "set_media_hooks: every hook must be set");
  std::lock_guard lock(g_mutex);
  // The old hooks stay alive: a thread may still be calling one of them (registration happens
  // once per process in practice, so this leaks at most a few bytes).
  static std::vector<std::unique_ptr<const MediaHooks>> retired;
  if (g_hooks) retired.push_back(std::move(g_hooks));
  g_hooks = std::make_unique<const MediaHooks>(std::move(hooks));
}

const MediaHooks* media_hooks() {
  std::lock_guard lock(g_mutex);
  return g_hooks.get();
}

std::string no_media_message(const std::string& what, const std::string& alternative) {
  std::string s = what;
#if PERCEIVER_WITH_MEDIA
  s += ", but this program has no media support: it did not register the media component (link perceiver::media "
       "and call perceiver::register_media() from perceiver/media.h)";
#else
  s += ", but this build has no media support (FFmpeg, libsndfile): rebuild with -DPERCEIVER_WITH_MEDIA=ON (Debian "
       "packages libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev libsndfile1-dev)";
#endif
  if (!alternative.empty()) s += "; " + alternative;
  return s;
}

const MediaHooks& require_media(const std::string& what, const std::string& alternative) {
  const MediaHooks* h = media_hooks();
  if (!h) PCV_FAIL(no_media_message(what, alternative));
  return *h;
}

void set_media_log_level(MediaLogLevel level) {
  if (const MediaHooks* h = media_hooks()) h->set_log_level(level);
}

}  // namespace perceiver
