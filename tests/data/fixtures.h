// Fixtures every data test shares, with no media libraries (the core's tests use them in builds
// without media too): files in build/tests/data/fixtures written under a temporary name and
// renamed, so tests running in parallel never see half-written files; shell commands; test
// patterns. media_fixtures.h adds generated clips.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fixtures {

std::filesystem::path dir();
/// A unique temporary name beside p with the same extension (a muxer picks the same format).
std::filesystem::path temp_for(const std::filesystem::path& p);
/// A file holding exactly `bytes`.
std::filesystem::path file(const std::string& name, const std::string& bytes);
/// Runs a shell command; true on exit status 0.
bool run(const std::string& cmd);
std::string read_bytes(const std::filesystem::path& p);
/// From now on glibc fills every heap block it hands out with `byte` (0 stops it; a no-op under
/// other allocators and sanitizers), so output that depends on uninitialized memory changes.
void perturb_fresh_heap_blocks(int byte);

std::vector<uint8_t> frame_code_image(int w, int h, int index);
/// Reads the index back from a decoded RGB frame of the same layout (any size).
int read_frame_code(const uint8_t* rgb, int w, int h);
std::vector<uint8_t> quadrant_image(int w, int h);
/// Interleaved [n, channels]: silence with a burst starting at click_s.
std::vector<float> click_audio(int64_t n, int rate, int channels, double click_s);
/// First sample whose magnitude exceeds `threshold`, or -1.
int64_t first_above(const std::vector<float>& x, float threshold);

}  // namespace fixtures
