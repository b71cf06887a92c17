// Opening a shared library at run time, for the parts that are loaded only when asked for: the
// Neuron runtime (libnrt), and the CUDA backend's own library in a shared build.
#pragma once

#include <string>
#include <vector>

namespace perceiver {

struct OpenedLibrary {
  void* handle = nullptr;  // the dlopen handle; null when no candidate loaded
  std::string path;        // the candidate that loaded
  std::string tried;       // when none did: each candidate with the loader's error, "a (why); b (why)"
};

/// dlopen (RTLD_NOW | RTLD_LOCAL) of the first of `candidates` that loads; it is never closed.
OpenedLibrary open_first_library(const std::vector<std::string>& candidates);

}  // namespace perceiver
