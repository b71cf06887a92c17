#include "core/dynamic_library.h"

#include <dlfcn.h>

namespace perceiver {

OpenedLibrary open_first_library(const std::vector<std::string>& candidates) {
  OpenedLibrary lib;
  for (const std::string& c : candidates) {
    if ((lib.handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      lib.path = c;
      return lib;
    }
    const char* err = ::dlerror();
    lib.tried += (lib.tried.empty() ? "" : "; ") + c + " (" + (err ? err : "not loadable") + ")";
  }
  return lib;
}

}  // namespace perceiver
