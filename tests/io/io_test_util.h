// Helpers shared by the IO tests: a scratch directory per test, whole-file reads and writes,
// running a command, and catching a perceiver::Error's message.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "perceiver/error.h"

namespace perceiver::iotest {

namespace fs = std::filesystem;

/// <build>/fixtures/io/<suite>.<test>/, emptied: each test writes only its own files.
inline fs::path test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d =
      fs::path(PERCEIVER_BINARY_DIR) / "fixtures" / "io" / (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `cmd` through the shell with stderr merged into `*output`; returns the exit code
/// (-1 if it did not exit normally).
inline int run_command(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    if (output) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// The message of the perceiver::Error `f` throws, or "" (and a test failure) if it does not.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a perceiver::Error";
  return "";
}

}  // namespace perceiver::iotest
