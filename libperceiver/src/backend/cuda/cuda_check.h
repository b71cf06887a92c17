// Error checks for CUDA runtime, cuBLASLt and NCCL calls: each failure throws perceiver::Error
// naming the call, the file and line, and the library's own name and description of the code.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "perceiver/error.h"

#define PCV_CUDA_CHECK(call)                                                                          \
  do {                                                                                                \
    const cudaError_t pcv_err_ = (call);                                                              \
    if (pcv_err_ != cudaSuccess)                                                                      \
      ::perceiver::detail::throw_error(__FILE__, __LINE__, "", #call, " failed: ", cudaGetErrorName(pcv_err_), \
                                       " (", cudaGetErrorString(pcv_err_), ")");                      \
  } while (0)

#define PCV_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                \
    const cublasStatus_t pcv_st_ = (call);                                                            \
    if (pcv_st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      ::perceiver::detail::throw_error(__FILE__, __LINE__, "", #call, " failed: ", cublasLtGetStatusName(pcv_st_), \
                                       " (", cublasLtGetStatusString(pcv_st_), ")");                  \
  } while (0)

/// After a kernel launch (launches return no status): names the kernel whose launch failed.
#define PCV_CUDA_CHECK_LAUNCH(kernel_name)                                                            \
  do {                                                                                                \
    const cudaError_t pcv_err_ = cudaGetLastError();                                                  \
    if (pcv_err_ != cudaSuccess)                                                                      \
      ::perceiver::detail::throw_error(__FILE__, __LINE__, "", "launch of ", kernel_name, " failed: ",  \
                                       cudaGetErrorName(pcv_err_), " (", cudaGetErrorString(pcv_err_), ")"); \
  } while (0)
