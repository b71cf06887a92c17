// What every layer call receives: the op table of the chosen backend and scratch memory.
#pragma once

#include "core/scratch.h"
#include "perceiver/backend.h"

namespace perceiver {

template <class T>
struct Context {
  explicit Context(const Backend& backend) : k(backend.kernels<T>()) {}
  const KernelTable<T>& k;  // ops; layers call nothing else for compute
  Scratch<T> scratch;       // backward temporaries
};

}  // namespace perceiver
