// Shared by the fuzz targets: a scratch folder per process for the files the readers take by
// path, and the one outcome bad input may have besides success (perceiver::Error). Any other
// exception escapes the target and counts as a finding, like a crash.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "perceiver/error.h"

namespace fuzz {

/// <TMPDIR>/perceiver-fuzz-<pid>, created on first use.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("perceiver-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

/// Writes the bytes to scratch()/name (replacing it) and returns its path.
inline std::filesystem::path put(const std::string& name, const void* data, size_t size) {
  const auto p = scratch() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(static_cast<const char*>(data), std::streamsize(size));
  return p;
}

/// Runs f: true if it succeeded, false if it threw perceiver::Error (the expected failure).
template <class F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const perceiver::Error&) {
    return false;
  }
}

/// A property that must hold for every input: a finding when it does not.
inline void require(bool property, const char* what) {
  if (property) return;
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

}  // namespace fuzz
