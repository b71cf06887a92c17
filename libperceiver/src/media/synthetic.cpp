// Synthetic Kinetics generator: render frames and audio per clip, encode with MediaWriter, write
// the annotation CSVs. Everything random comes from one Philox stream per clip keyed by
// (seed, clip number), so clips do not depend on each other or on the order they are made in.
#include "media/synthetic.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>

#include "core/rng.h"
#include "media/media_writer.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

// RngPurpose has no entry for data generation; a value of our own keeps these streams apart
// from init, masking, shuffling and augmentation.
constexpr auto kSyntheticPurpose = RngPurpose(200);
constexpr double kPi = std::numbers::pi;

const char* const kHueNames[12] = {"red",  "orange", "yellow", "lime",   "green",  "teal",
                                   "cyan", "azure",  "blue",   "violet", "magenta", "rose"};
const char* const kShapeNames[4] = {"circle", "square", "diamond", "triangle"};

void hsv_to_rgb(double h, double s, double v, uint8_t out[3]) {
  const double c = v * s, hp = h * 6.0, x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  switch (int(hp) % 6) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
  }
  const double m = v - c;
  out[0] = uint8_t(std::lround((r + m) * 255)), out[1] = uint8_t(std::lround((g + m) * 255));
  out[2] = uint8_t(std::lround((b + m) * 255));
}

/// Per-clip random appearance and sound, drawn from the clip's stream.
struct ClipParams {
  double bg_top[3], bg_bottom[3];  // background gradient, 0..255
  double x0, y0, radius, wobble_phase;
  double tone_phase[2], amplitude, noise;
  double channel_gain[2];
};

ClipParams draw_clip_params(RngStream& rng, const SyntheticOptions& o) {
  ClipParams p{};
  for (int c = 0; c < 3; ++c) {
    p.bg_top[c] = 10 + 60 * rng.uniform();
    p.bg_bottom[c] = 10 + 60 * rng.uniform();
  }
  // 14-20% of the short side (9-13 px in the demo's 64x64 frames): large enough that the demo
  // model finds the shape in its minutes of training (at 10-16% an older demo model drew the
  // background only), small enough that the edges, where its errors are, stay short.
  p.radius = std::min(o.width, o.height) * (0.14 + 0.06 * rng.uniform());
  p.x0 = p.radius + (o.width - 2 * p.radius) * rng.uniform();
  p.y0 = p.radius + (o.height - 2 * p.radius) * rng.uniform();
  p.wobble_phase = 2 * kPi * rng.uniform();
  p.tone_phase[0] = 2 * kPi * rng.uniform();
  p.tone_phase[1] = 2 * kPi * rng.uniform();
  p.amplitude = 0.2 + 0.3 * rng.uniform();
  p.noise = 0.005 + 0.015 * rng.uniform();
  p.channel_gain[0] = 0.8 + 0.2 * rng.uniform();
  p.channel_gain[1] = 0.8 + 0.2 * rng.uniform();
  return p;
}

// Bounces a coordinate between lo and hi (a triangle wave), so the shape stays in the picture.
double reflect(double x, double lo, double hi) {
  const double span = hi - lo;
  if (span <= 0) return lo;
  double t = std::fmod(x - lo, 2 * span);
  if (t < 0) t += 2 * span;
  return lo + (t <= span ? t : 2 * span - t);
}

// Signed distance (pixels) from (dx, dy) to the edge of a shape of radius r; < 0 inside (exact
// inside and along the sides; polygon corners come out slightly rounded by the soft edge).
double shape_distance(int shape, double dx, double dy, double r) {
  switch (shape) {
    case 0: return std::hypot(dx, dy) - r;
    case 1: return std::max(std::fabs(dx), std::fabs(dy)) - 0.85 * r;
    case 2: return (std::fabs(dx) + std::fabs(dy)) / std::numbers::sqrt2 - 0.8 * r;
    default:  // upright equilateral triangle inscribed in the circle of radius r (y points down)
      return std::max(dy, 0.5 * std::numbers::sqrt3 * std::fabs(dx) - 0.5 * dy) - 0.5 * r;
  }
}

// One RGB frame [H, W, 3] at time t: gradient background, then the anti-aliased shape.
void render_frame(const SyntheticClass& k, const ClipParams& p, const SyntheticOptions& o, double t,
                  std::vector<uint8_t>& rgb) {
  const int w = o.width, h = o.height;
  for (int y = 0; y < h; ++y) {
    const double a = double(y) / std::max(1, h - 1);
    uint8_t row[3];
    for (int c = 0; c < 3; ++c) row[c] = uint8_t(std::lround(p.bg_top[c] * (1 - a) + p.bg_bottom[c] * a));
    for (int x = 0; x < w; ++x) std::copy(row, row + 3, &rgb[(size_t(y) * w + x) * 3]);
  }
  // Straight motion at the class's direction and speed, plus a small per-clip wobble.
  const double wobble = 0.15 * p.radius * std::sin(2 * kPi * 0.7 * t + p.wobble_phase);
  const double cx = reflect(p.x0 + std::cos(k.direction_rad) * k.speed_px_s * t + wobble, p.radius, w - p.radius);
  const double cy = reflect(p.y0 + std::sin(k.direction_rad) * k.speed_px_s * t, p.radius, h - p.radius);
  // The edge ramps over `edge` pixels, as a camera's optics and motion soften real edges.
  const double edge = std::max(1.0, o.edge_softness * std::min(w, h));
  const double reach = p.radius + edge + 2;
  const int x_lo = std::max(0, int(cx - reach)), x_hi = std::min(w - 1, int(cx + reach));
  const int y_lo = std::max(0, int(cy - reach)), y_hi = std::min(h - 1, int(cy + reach));
  for (int y = y_lo; y <= y_hi; ++y) {
    for (int x = x_lo; x <= x_hi; ++x) {
      const double d = shape_distance(k.shape, x + 0.5 - cx, y + 0.5 - cy, p.radius);
      const double alpha = std::clamp(0.5 - d / edge, 0.0, 1.0);
      if (alpha <= 0) continue;
      uint8_t* px = &rgb[(size_t(y) * w + x) * 3];
      for (int c = 0; c < 3; ++c) px[c] = uint8_t(std::lround(px[c] * (1 - alpha) + k.rgb[c] * alpha));
    }
  }
}

// Interleaved audio [n, channels]: the class chord with per-clip phase and loudness, white
// noise, and 5 ms fades so the clip starts and ends without a click.
std::vector<float> render_audio(const SyntheticClass& k, const ClipParams& p, const SyntheticOptions& o,
                                int64_t n, RngStream& rng) {
  const int ch = o.audio_channels;
  std::vector<float> out(size_t(n) * ch);
  const double fade = 0.005 * o.sample_rate;
  for (int64_t i = 0; i < n; ++i) {
    const double t = double(i) / o.sample_rate;
    double s = std::sin(2 * kPi * k.tone_hz[0] * t + p.tone_phase[0]) +
               0.6 * std::sin(2 * kPi * k.tone_hz[1] * t + p.tone_phase[1]);
    s *= p.amplitude / 1.6 * std::min({1.0, i / fade, (n - 1 - i) / fade});
    for (int c = 0; c < ch; ++c)
      out[size_t(i) * ch + c] = float(s * p.channel_gain[c] + p.noise * (2 * rng.uniform() - 1));
  }
  return out;
}

std::string make_youtube_id(RngStream& rng) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string id(11, ' ');
  for (char& c : id) c = kAlphabet[rng.below(64)];
  return id;
}

// Labels are quoted when they hold spaces or CSV specials, as in the official annotation files.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(" ,\"()") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string clip_file_name(const std::string& id, int start, int end) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "_%06d_%06d.mp4", start, end);
  return id + buf;
}

void write_clip(const std::filesystem::path& path, const SyntheticClass& k, RngStream& rng,
                const SyntheticOptions& o) {
  const ClipParams p = draw_clip_params(rng, o);
  const int64_t samples_per_frame = o.sample_rate / o.fps;
  const std::vector<float> audio = render_audio(k, p, o, samples_per_frame * o.num_frames, rng);
  MediaWriterOptions w;
  w.width = o.width, w.height = o.height, w.fps = o.fps;
  w.crf = o.crf, w.preset = o.preset, w.gop = o.gop;
  w.audio_channels = o.audio_channels, w.sample_rate = o.sample_rate;
  const std::filesystem::path tmp = path.string() + ".tmp.mp4";
  {
    MediaWriter writer = MediaWriter::create(tmp, w);
    std::vector<uint8_t> rgb(size_t(o.width) * o.height * 3);
    for (int f = 0; f < o.num_frames; ++f) {  // audio alongside video keeps the muxer interleaving
      render_frame(k, p, o, double(f) / o.fps, rgb);
      writer.write_frame(rgb.data());
      writer.write_audio(audio.data() + size_t(f) * samples_per_frame * o.audio_channels, samples_per_frame);
    }
    writer.finish();
  }
  std::filesystem::rename(tmp, path);
}

void check_options(int num_classes, int clips_per_class, const SyntheticOptions& o) {
  PCV_CHECK(num_classes >= 1 && num_classes <= 10000, "synthetic set: classes must be in [1, 10000], got ",
            num_classes);
  PCV_CHECK(clips_per_class >= 1, "synthetic set: clips per class must be >= 1, got ", clips_per_class);
  PCV_CHECK(o.width >= 16 && o.height >= 16 && o.width % 2 == 0 && o.height % 2 == 0,
            "synthetic set: width and height must be even and >= 16");
  PCV_CHECK(o.fps > 0 && o.sample_rate % o.fps == 0, "synthetic set: sample_rate must be a multiple of fps");
  PCV_CHECK(o.audio_channels == 1 || o.audio_channels == 2, "synthetic set: audio_channels must be 1 or 2");
  PCV_CHECK(o.num_frames >= 1, "synthetic set: num_frames must be >= 1");
  PCV_CHECK(o.edge_softness >= 0 && o.edge_softness <= 0.25, "synthetic set: edge_softness must be in [0, 0.25], got ",
            o.edge_softness);
}

}  // namespace

std::vector<SyntheticClass> synthetic_classes(int num_classes) {
  std::vector<SyntheticClass> out(static_cast<size_t>(num_classes));
  const int digits = std::max(2, int(std::to_string(std::max(0, num_classes - 1)).size()));
  for (int k = 0; k < num_classes; ++k) {
    SyntheticClass& c = out[size_t(k)];
    const double hue = double(k) / num_classes;
    hsv_to_rgb(hue, 0.85, 0.95, c.rgb);
    c.shape = k % 4;
    // Golden-ratio steps spread directions and speeds evenly for any K.
    c.direction_rad = 2 * kPi * std::fmod(k * 0.6180339887, 1.0);
    c.speed_px_s = 30 + 90 * std::fmod(k * 0.7548776662 + 0.5, 1.0);
    // Roots from 220 Hz to 3.5 kHz on a log scale; the fifth (3:2) above makes a chord.
    c.tone_hz[0] = 220.0 * std::pow(16.0, double(k) / num_classes);
    c.tone_hz[1] = 1.5 * c.tone_hz[0];
    std::ostringstream label;
    label << "class " << std::string(size_t(digits - int(std::to_string(k).size())), '0') << k << ' '
          << kHueNames[int(std::lround(hue * 12)) % 12] << ' ' << kShapeNames[c.shape];
    c.label = label.str();
  }
  return out;
}

SyntheticSummary make_synthetic_kinetics(const std::filesystem::path& out_dir, int num_classes,
                                         int clips_per_class, uint64_t seed, const SyntheticOptions& o) {
  check_options(num_classes, clips_per_class, o);
  SyntheticSummary summary;
  summary.classes = synthetic_classes(num_classes);
  const int val_per_class = o.val_clips_per_class >= 0 ? o.val_clips_per_class : std::max(1, clips_per_class / 5);
  const int clip_seconds = int(std::ceil(double(o.num_frames) / o.fps));
  std::filesystem::create_directories(out_dir / "annotations");
  uint64_t clip_number = 0;  // the RNG step: clip i of the whole set
  for (const char* split : {"train", "val"}) {
    const bool train = std::string(split) == "train";
    const int per_class = train ? clips_per_class : val_per_class;
    const auto csv_path = out_dir / "annotations" / (train ? "train.csv" : "validate.csv");
    std::ofstream csv(csv_path.string() + ".tmp", std::ios::binary);
    csv << "label,youtube_id,time_start,time_end,split\n";
    for (const SyntheticClass& k : summary.classes) {
      const auto dir = out_dir / split / k.label;
      std::filesystem::create_directories(dir);
      for (int i = 0; i < per_class; ++i) {
        RngStream rng(seed, kSyntheticPurpose, clip_number++);
        const std::string id = make_youtube_id(rng);
        const int start = int(rng.below(600));
        write_clip(dir / clip_file_name(id, start, start + clip_seconds), k, rng, o);
        csv << csv_field(k.label) << ',' << id << ',' << start << ',' << start + clip_seconds << ',' << split
            << '\n';
        (train ? summary.train_clips : summary.val_clips) += 1;
      }
    }
    csv.close();
    PCV_CHECK(!csv.fail(), "cannot write '", csv_path.string(), "'");
    std::filesystem::rename(csv_path.string() + ".tmp", csv_path);
  }
  return summary;
}

}  // namespace perceiver
