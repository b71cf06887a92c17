// OpenBLAS process setup (internal: the public API names no BLAS). The CPU backend calls
// init_blas(); logs name the kernel family in use.
#pragma once

#include <string>

namespace perceiver::blas {

/// Makes OpenBLAS single-threaded (our OpenMP pool splits GEMMs). Idempotent.
void init_blas();

/// The kernel family OpenBLAS chose at load time ("SkylakeX", "Haswell", ...).
std::string blas_core();

}  // namespace perceiver::blas
