// A corpus of broken and hostile files: each must be rejected with a perceiver::Error that names
// the file and the reason, without crashing, hanging, or opening any other file.
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "data/video_reader.h"
#include "media_fixtures.h"
#include "perceiver/error.h"

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

}  // namespace
}  // namespace perceiver
