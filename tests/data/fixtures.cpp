// Fixtures every data test shares (no media libraries): the fixture folder, files written
// atomically, shell commands, and the test patterns (see fixtures.h).
#include "fixtures.h"

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numbers>
#include <sstream>

namespace fixtures {

std::filesystem::path dir() {
  const auto d = std::filesystem::path(PERCEIVER_BINARY_DIR) / "tests" / "data" / "fixtures";
  std::filesystem::create_directories(d);
  return d;
}

// A unique temporary name with the same extension, so the muxer is picked the same way.
std::filesystem::path temp_for(const std::filesystem::path& p) {
  return p.parent_path() / (p.stem().string() + ".tmp" + std::to_string(::getpid()) + p.extension().string());
}

std::vector<uint8_t> frame_code_image(int w, int h, int index) {
  std::vector<uint8_t> img(size_t(w) * h * 3);
  for (int x = 0; x < w; ++x) {
    const int bit = 7 - std::min(7, x * 8 / w);
    const uint8_t v = ((index >> bit) & 1) ? 235 : 16;
    for (int y = 0; y < h; ++y)
      for (int c = 0; c < 3; ++c) img[(size_t(y) * w + x) * 3 + c] = v;
  }
  return img;
}

int read_frame_code(const uint8_t* rgb, int w, int h) {
  int index = 0;
  for (int b = 0; b < 8; ++b) {
    const int x = (2 * b + 1) * w / 16;  // centre of bar b
    index = (index << 1) | (rgb[(size_t(h / 2) * w + x) * 3] > 128 ? 1 : 0);
  }
  return index;
}

std::vector<uint8_t> quadrant_image(int w, int h) {
  static const uint8_t kColours[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
  std::vector<uint8_t> img(size_t(w) * h * 3, 0);
  const int margin = (w - h) / 2;  // the square centre crop is [margin, margin + h)
  for (int y = 0; y < h; ++y)
    for (int x = margin; x < margin + h; ++x) {
      const int q = (y >= h / 2 ? 2 : 0) + (x >= w / 2 ? 1 : 0);
      for (int c = 0; c < 3; ++c) img[(size_t(y) * w + x) * 3 + c] = kColours[q][c];
    }
  return img;
}

std::vector<float> click_audio(int64_t n, int rate, int channels, double click_s) {
  std::vector<float> a(size_t(n) * channels, 0.0f);
  const int64_t start = std::llround(click_s * rate), len = rate / 50;
  for (int64_t i = 0; i < len && start + i < n; ++i) {
    const float v = 0.8f * float(std::sin(2 * std::numbers::pi * 1000.0 * double(i) / rate + std::numbers::pi / 2));
    for (int c = 0; c < channels; ++c) a[size_t(start + i) * channels + c] = v;
  }
  return a;
}

int64_t first_above(const std::vector<float>& x, float threshold) {
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(x[i]) > threshold) return int64_t(i);
  return -1;
}

std::filesystem::path file(const std::string& name, const std::string& bytes) {
  const auto path = dir() / name;
  const auto tmp = temp_for(path);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  std::filesystem::rename(tmp, path);
  return path;
}

bool run(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void perturb_fresh_heap_blocks(int byte) {
#if defined(__GLIBC__)
  mallopt(M_PERTURB, byte);
#else
  (void)byte;
#endif
}

}  // namespace fixtures
