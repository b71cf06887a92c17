// Launchers shared between the CUDA backend's files (kernels in .cu files, callers in .cpp
// files compiled by g++). Every pointer is device memory; everything runs on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace perceiver::cuda {

/// dst (bf16, packed [batch, rows, cols]) = src (float, rows `ld` apart, matrices `stride` apart).
void convert_to_bf16(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols, const float* src, int64_t ld,
                     int64_t stride, void* dst);

/// c ← beta·c over a strided batch of [rows, cols] matrices (beta == 0 writes zeros).
void scale_matrix(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols, float beta, float* c, int64_t ldc,
                  int64_t stride);

}  // namespace perceiver::cuda
