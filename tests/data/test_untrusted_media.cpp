// A corpus of broken and hostile files: each must be rejected with a perceiver::Error that names
// the file and the reason, without crashing, hanging, or opening any other file.
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <random>
#include <thread>

#include "media/video_reader.h"
#include "media_fixtures.h"
#include "perceiver/error.h"

// Under AddressSanitizer freed memory is held back (quarantine), so peak RSS says nothing.
#if defined(__SANITIZE_ADDRESS__)
#define PCV_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PCV_ADDRESS_SANITIZER 1
#endif
#endif
#ifndef PCV_ADDRESS_SANITIZER
#define PCV_ADDRESS_SANITIZER 0
#endif

namespace perceiver {
namespace {

std::filesystem::path good_clip() { return fixtures::clip("seq25.mp4", fixtures::ClipSpec{}); }

// Open + decode everything; returns the error message, or "" if the file was accepted.
std::string rejection(const std::filesystem::path& p, const ReaderOptions& opts = {}) {
  try {
    auto r = VideoReader::open(p, opts);
    WindowSpec w;
    w.num_frames = int(std::max<int64_t>(1, r.info().frame_count)), w.image_dim = 32;
    r.read_window(w);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

#define EXPECT_REJECTED(file, reason, ...)                                                   \
  do {                                                                                       \
    const std::filesystem::path file_ = (file);                                              \
    const std::string msg_ = rejection(file_ __VA_OPT__(, ) __VA_ARGS__);                   \
    EXPECT_NE(msg_.find(reason), std::string::npos) << "message: '" << msg_ << "'";         \
    EXPECT_NE(msg_.find(file_.filename().string()), std::string::npos) << "message: " << msg_; \
  } while (0)

// Reports whether anything opened a file (inotify IN_OPEN), to prove a playlist was not followed.
class OpenWatch {
 public:
  explicit OpenWatch(const std::filesystem::path& p)
      : fd_(inotify_init1(IN_NONBLOCK)), wd_(inotify_add_watch(fd_, p.c_str(), IN_OPEN)) {}
  ~OpenWatch() { ::close(fd_); }
  bool valid() const { return fd_ >= 0 && wd_ >= 0; }
  bool opened() {
    alignas(inotify_event) char buf[4096];
    bool any = false;
    while (::read(fd_, buf, sizeof buf) > 0) any = true;
    return any;
  }

 private:
  int fd_, wd_;
};

// The target of the playlists: a private copy, so no other test opens it meanwhile.
std::filesystem::path playlist_target() {
  const auto p = fixtures::dir() / ("target_" + std::to_string(::getpid()) + ".mp4");
  std::filesystem::copy_file(good_clip(), p, std::filesystem::copy_options::overwrite_existing);
  return p;
}

TEST(UntrustedMedia, GoodClipIsAccepted) { EXPECT_EQ(rejection(good_clip()), ""); }

TEST(UntrustedMedia, MissingEmptyAndNonRegularFiles) {
  EXPECT_REJECTED(fixtures::dir() / "does_not_exist.mp4", "no such file");
  EXPECT_REJECTED(fixtures::file("empty.mp4", ""), "is empty");
  const auto d = fixtures::dir() / "directory.mp4";
  std::filesystem::create_directories(d);
  EXPECT_REJECTED(d, "not a regular file");
  // A FIFO would block a reader forever.
  const auto fifo = fixtures::dir() / ("fifo_" + std::to_string(::getpid()) + ".mp4");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_REJECTED(fifo, "not a regular file");
  std::filesystem::remove(fifo);
  const auto link = fixtures::dir() / ("devzero_" + std::to_string(::getpid()) + ".mp4");
  std::filesystem::create_symlink("/dev/zero", link);
  EXPECT_REJECTED(link, "not a regular file");
  std::filesystem::remove(link);
}

TEST(UntrustedMedia, RandomBytesAndText) {
  std::mt19937 rng(7);
  std::string bytes(65536, '\0');
  for (char& c : bytes) c = char(rng());
  EXPECT_REJECTED(fixtures::file("random.mp4", bytes), "Invalid data");
  std::string text;
  for (int i = 0; i < 500; ++i) text += "this is a text file, not a video\n";
  EXPECT_REJECTED(fixtures::file("text.mp4", text), "Invalid data");
}

TEST(UntrustedMedia, TruncatedFiles) {
  const std::string whole = fixtures::read_bytes(good_clip());
  // moov at the end (the muxer's default): the index is missing.
  EXPECT_REJECTED(fixtures::file("truncated.mp4", whole.substr(0, whole.size() / 2)), "moov atom not found");
  // moov first (+faststart): the index points past the end of the file.
  const auto fast = fixtures::ffmpeg_clip("faststart.mp4", "-i '" + good_clip().string() +
                                                               "' -c copy -movflags +faststart");
  const std::string f = fixtures::read_bytes(fast);
  EXPECT_REJECTED(fixtures::file("truncated_faststart.mp4", f.substr(0, f.size() * 3 / 4)), "truncated");
}

// Overwrites bytes inside the mdat box, leaving the container intact.
std::string corrupt_payload(std::string d) {
  size_t start = 0, end = 0;
  for (size_t i = 0; i + 8 <= d.size();) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data() + i);
    const size_t size = size_t(p[0]) << 24 | size_t(p[1]) << 16 | size_t(p[2]) << 8 | p[3];
    if (d.compare(i + 4, 4, "mdat") == 0) start = i + 8, end = i + size;
    if (size < 8) break;
    i += size;
  }
  EXPECT_GT(end, start + 2000);
  std::mt19937 rng(3);
  for (int k = 0; k < 20; ++k)
    for (size_t j = 0; j < 64; ++j) d[start + (end - start) * k / 20 + 100 + j] = char(rng());
  return d;
}

TEST(UntrustedMedia, CorruptedPacketsAreReportedNotConcealed) {
  const auto bad = fixtures::file("corrupt_packets.mp4", corrupt_payload(fixtures::read_bytes(good_clip())));
  EXPECT_REJECTED(bad, "avcodec_send_packet");
  // With reject_corrupt off the decoder conceals and the clip decodes.
  ReaderOptions lenient;
  lenient.reject_corrupt = false;
  EXPECT_EQ(rejection(bad, lenient), "");
}

TEST(UntrustedMedia, HlsPlaylistDisguisedAsMp4OpensNoOtherFile) {
  const auto target = playlist_target();
  const auto playlist = fixtures::file(
      "playlist_" + std::to_string(::getpid()) + ".mp4",
      "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:3\n#EXT-X-MEDIA-SEQUENCE:0\n#EXTINF:3.0,\n" +
          target.string() + "\n#EXT-X-ENDLIST\n");
  OpenWatch watch(target);
  ASSERT_TRUE(watch.valid());
  EXPECT_REJECTED(playlist, "'hls' file, which is not an allowed container");
  EXPECT_FALSE(watch.opened()) << "the reader opened the file the playlist points at";
  // Control: the watch does see opens, and plain ffprobe does follow this playlist.
  ASSERT_TRUE(fixtures::run("ffprobe -v quiet '" + playlist.string() + "'"));
  EXPECT_TRUE(watch.opened());
  std::filesystem::remove(target);
}

TEST(UntrustedMedia, ConcatListDisguisedAsMp4OpensNoOtherFile) {
  const auto target = playlist_target();
  const auto list = fixtures::file("concat_" + std::to_string(::getpid()) + ".mp4",
                                   "ffconcat version 1.0\nfile '" + target.string() + "'\n");
  OpenWatch watch(target);
  ASSERT_TRUE(watch.valid());
  EXPECT_REJECTED(list, "'concat' file, which is not an allowed container");
  EXPECT_FALSE(watch.opened());
  std::filesystem::remove(target);
}

TEST(UntrustedMedia, OtherContainersOutsideTheAllowList) {
  const auto png = fixtures::ffmpeg_clip("image.png", "-f lavfi -i testsrc=size=64x64 -frames:v 1");
  const auto disguised = fixtures::dir() / "image_as.mp4";
  std::filesystem::copy_file(png, disguised, std::filesystem::copy_options::overwrite_existing);
  EXPECT_REJECTED(disguised, "not an allowed container");
  // Audio-only containers are allowed, but a clip needs a picture.
  const auto wav = fixtures::ffmpeg_clip("tone.wav", "-f lavfi -i sine=d=0.5");
  EXPECT_REJECTED(wav, "no video stream");
}

TEST(UntrustedMedia, NamesThatLookLikeProtocolsAreJustFiles) {
  // "concat:" and "http:" are FFmpeg protocols; as our paths they only name local files.
  const auto odd = fixtures::dir() / "concat:seq25.mp4";
  std::filesystem::copy_file(good_clip(), odd, std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(rejection(odd), "");
  EXPECT_REJECTED(std::filesystem::path("http://example.com/x.mp4"), "no such file");
}

TEST(UntrustedMedia, SizeDurationAndDimensionLimits) {
  ReaderOptions small;
  small.max_file_bytes = 1000;
  EXPECT_REJECTED(good_clip(), "max_file_bytes", small);
  ReaderOptions narrow;
  narrow.max_width = 100;
  EXPECT_REJECTED(good_clip(), "max_width", narrow);
  ReaderOptions brief;
  brief.max_duration_s = 1.0;
  EXPECT_REJECTED(good_clip(), "max_duration_s", brief);
}

TEST(UntrustedMedia, TimeoutInterruptsFFmpeg) {
  ReaderOptions hurry;
  hurry.timeout_s = 0;  // already expired: the interrupt callback stops avformat_open_input
  EXPECT_REJECTED(good_clip(), "timed out", hurry);
}

// Issue 15, Medium 7: only the codecs a Kinetics-like set needs are decoded; others are refused
// by name (also while FFmpeg probes the streams).
TEST(UntrustedMedia, CodecsOutsideTheAllowListAreRefusedByName) {
  const auto ffv1 = fixtures::ffmpeg_clip("ffv1.mkv", "-f lavfi -i testsrc=size=64x48:rate=25:duration=0.4 -c:v ffv1");
  EXPECT_REJECTED(ffv1, "video codec 'ffv1' (stream 0) is not allowed (allowed: h264, hevc, vp8, vp9, av1, mpeg4, mjpeg)");
  const auto ac3 = fixtures::ffmpeg_clip(
      "h264_ac3.mp4", "-f lavfi -i testsrc=size=64x48:rate=25:duration=0.4 -f lavfi -i sine=d=0.4 -c:v libx264 "
                      "-preset ultrafast -c:a ac3 -shortest");
  EXPECT_REJECTED(ac3, "audio codec 'ac3' (stream 1) is not allowed");
  fixtures::ClipSpec raw;
  raw.video_codec = "rawvideo", raw.pixel_format = "yuyv422", raw.frames = 3, raw.audio_channels = 0;
  const auto avi = fixtures::clip("raw_small.avi", raw);
  EXPECT_REJECTED(avi, "video codec 'rawvideo'");
  ReaderOptions with_raw;
  with_raw.allowed_video_codecs.push_back("rawvideo");
  EXPECT_EQ(rejection(avi, with_raw), "");
}

// Issue 15, Low: the path was checked with stat() and then opened by FFmpeg by name; a FIFO put
// there in between made open(2) wait for a writer forever. A swapper thread replaces the path by
// a regular file and a FIFO in turn while a child process opens it again and again: every open
// must return (accepted or refused), never block.
TEST(UntrustedMedia, FifoSwappedInAfterTheCheckNeverBlocks) {
  namespace fs = std::filesystem;
  const fs::path dir = fixtures::dir() / ("swap_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "clip.mp4", master = dir / "master.mp4";
  fs::copy_file(good_clip(), master);
  fs::copy_file(master, path);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int accepted = 0, refused = 0;
    for (int i = 0; i < 300; ++i) {
      try {
        VideoReader::open(path);
        ++accepted;
      } catch (const Error&) {
        ++refused;
      } catch (...) {
        std::_Exit(4);  // anything but perceiver::Error breaks the library's promise
      }
    }
    std::fprintf(stderr, "  child: %d opens accepted, %d refused\n", accepted, refused);
    std::_Exit(0);
  }
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const fs::path reg = dir / "next.mp4", fifo = dir / "next.fifo";
    while (!stop) {
      ::link(master.c_str(), reg.c_str());
      ::rename(reg.c_str(), path.c_str());
      ::mkfifo(fifo.c_str(), 0600);
      ::rename(fifo.c_str(), path.c_str());
    }
  });
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop = true;
  swapper.join();
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "an open blocked on a FIFO swapped in after the check (child killed after 60 s)";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "4: an exception other than perceiver::Error";
  fs::remove_all(dir);
}

// Issue 15, Medium 7: the audio of a window was buffered from the first decoded audio frame to
// the window's end. With one keyframe at the start of a long clip, a window near the end decodes
// (and used to keep) minutes of audio: 4 minutes at 48 kHz is 46 MB of floats. Only the window
// is kept now. Measured as the peak memory of a child process that reads one window.
TEST(UntrustedMedia, AudioBeforeTheWindowIsNotKept) {
  const auto path = fixtures::ffmpeg_clip(
      "one_keyframe_4min.mp4",
      "-f lavfi -i color=c=gray:s=32x32:r=25:d=240 -f lavfi -i sine=f=440:r=48000:d=240 -c:v libx264 "
      "-preset ultrafast -x264-params keyint=100000:min-keyint=100000:scenecut=0 -c:a aac -b:a 16k -shortest");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 250;
    try {
      auto r = VideoReader::open(path);
      WindowSpec w;
      w.start_s = 236.0, w.num_frames = 16, w.image_dim = 32;
      rusage before{};
      getrusage(RUSAGE_SELF, &before);
      const Clip c = r.read_window(w);
      rusage after{};
      getrusage(RUSAGE_SELF, &after);
      const long grown_mb = (after.ru_maxrss - before.ru_maxrss) / 1024;  // ru_maxrss is in KiB
      std::fprintf(stderr, "  child: peak memory grew by %ld MiB; %lld padded samples\n", grown_mb,
                   static_cast<long long>(c.padded_samples));
      code = c.padded_samples == 0 && fixtures::first_above(c.audio, 0.1f) >= 0 ? int(std::min(200L, grown_mb)) : 251;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "  child: %s\n", e.what());
    }
    std::_Exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  const int code = WEXITSTATUS(status);
  ASSERT_LT(code, 250) << "the window could not be read (250) or its audio is missing (251)";
#if PCV_ADDRESS_SANITIZER
  GTEST_SKIP() << "peak memory is not measurable under AddressSanitizer (freed blocks stay in its quarantine); "
               << "the window was read, grew " << code << " MiB";
#endif
  EXPECT_LT(code, 16) << "reading one window grew the peak memory by " << code << " MiB";
}

}  // namespace
}  // namespace perceiver
