// PERCEIVER_CUDA_PROFILE=1: every table op timed on the GPU (CUDA events on the backend's stream
// around the call, waited for at once), summed by op and shape (GEMMs by m×n×k, attention by
// queries × keys), and printed as a table on stderr when the process exits. Waiting after every
// op serialises host and device, so the step runs slower than without it; each op's time is its
// span on the GPU, its launches included. For finding where a step's time goes, not for timing it.
#pragma once

#include "perceiver/backend.h"

namespace perceiver::cuda {

/// Whether PERCEIVER_CUDA_PROFILE asks for the timed table (read once).
bool profiling_requested();

/// untimed_kernel_table() with every op wrapped in the timer (backend/profile/op_profile.h).
KernelTable<float> profiled_table();

}  // namespace perceiver::cuda
