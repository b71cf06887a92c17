// Kernel bodies shared by the CUDA kernels and the host compiler. Every function in bodies/ is
// `PCV_HD`: nvcc compiles it for the device (and the host), g++ compiles it as an ordinary
// inline function, so tests/backend/test_cuda_bodies.cpp runs the very index arithmetic and
// formulas of the GPU kernels against the CPU backend on a machine without a GPU. What these
// bodies cannot check (shared memory, warp shuffles, launch shapes) is left to the gpu suite.
//
// Rules for a body: scalar variables only (no local arrays: with -warn-lmem-usage made fatal a
// dynamically indexed array fails the build), no calls into non-PCV_HD code (EmbedDims'
// member functions are host functions: bodies read the fields), float math through the hd_*
// wrappers below so both compilers pick the single-precision function.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PCV_HD __host__ __device__ __forceinline__
#else
#define PCV_HD inline
#endif

namespace perceiver::cuda::body {

#if defined(__CUDA_ARCH__)
PCV_HD float hd_exp(float x) { return expf(x); }
PCV_HD double hd_exp(double x) { return exp(x); }
PCV_HD double hd_log(double x) { return log(x); }
PCV_HD float hd_log(float x) { return logf(x); }
PCV_HD float hd_sqrt(float x) { return sqrtf(x); }
PCV_HD double hd_sqrt(double x) { return sqrt(x); }
PCV_HD float hd_erf(float x) { return erff(x); }
PCV_HD float hd_tanh(float x) { return tanhf(x); }
PCV_HD bool hd_isfinite(double x) { return isfinite(x); }
#else
PCV_HD float hd_exp(float x) { return std::exp(x); }
PCV_HD double hd_exp(double x) { return std::exp(x); }
PCV_HD double hd_log(double x) { return std::log(x); }
PCV_HD float hd_log(float x) { return std::log(x); }
PCV_HD float hd_sqrt(float x) { return std::sqrt(x); }
PCV_HD double hd_sqrt(double x) { return std::sqrt(x); }
PCV_HD float hd_erf(float x) { return std::erf(x); }
PCV_HD float hd_tanh(float x) { return std::tanh(x); }
PCV_HD bool hd_isfinite(double x) { return std::isfinite(x); }
#endif

PCV_HD float hd_max(float a, float b) { return a > b ? a : b; }
PCV_HD int64_t hd_min(int64_t a, int64_t b) { return a < b ? a : b; }

}  // namespace perceiver::cuda::body
