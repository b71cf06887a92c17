# The CUDA toolchain of the CUDA backend (PERCEIVER_WITH_CUDA=ON; libperceiver/src/backend/cuda).
# Kernels are built for sm_86 (A10G, G5 nodes) and sm_90 (H100, P5 nodes), with PTX of both for
# newer GPUs. ptxas reports register spills and local-memory use as errors for both
# architectures (every kernel is meant to stay in registers and shared memory);
# PERCEIVER_CUDA_RESOURCE_USAGE=ON prints each kernel's registers and memory at build time.
#
# CMake 3.25 predates CUDA 13: check_language/enable_language and find_package(CUDAToolkit) work,
# but CMake does not know nvcc 13's C++ dialect flags (CUDA_STANDARD 20 fails at generate time),
# so the CUDA target passes -std=c++20 itself (libperceiver/src/backend/cuda/sources.cmake).
set(CMAKE_CUDA_ARCHITECTURES "86;90" CACHE STRING "GPU architectures of the CUDA backend")
option(PERCEIVER_CUDA_RESOURCE_USAGE "Print registers and memory of every CUDA kernel (nvcc --resource-usage)" OFF)

if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)  # the toolkit's usual place, not always on PATH
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "PERCEIVER_WITH_CUDA=ON but no CUDA compiler (nvcc) was found. HINT: pass "
                      "-DCMAKE_CUDA_COMPILER=/path/to/nvcc, or configure with -DPERCEIVER_WITH_CUDA=OFF")
endif()
enable_language(CUDA)
find_package(CUDAToolkit 12.0 REQUIRED)
# CMake adds a static CUDA runtime to CUDA targets by default; the library loads the shared one
# (libcudart, which loads the driver only when asked, so programs start on machines without one).
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)

# NCCL ships with the toolkit here (/usr/local/cuda/lib) or as libnccl-dev; no CMake package.
find_path(PERCEIVER_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(PERCEIVER_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
if(NOT PERCEIVER_NCCL_INCLUDE_DIR OR NOT PERCEIVER_NCCL_LIBRARY)
  message(FATAL_ERROR "PERCEIVER_WITH_CUDA=ON needs NCCL (nccl.h, libnccl) for the gradient allreduce across GPUs; "
                      "not found beside the CUDA toolkit ${CUDAToolkit_LIBRARY_DIR}. HINT: install NCCL "
                      "(libnccl-dev) or set PERCEIVER_NCCL_INCLUDE_DIR and PERCEIVER_NCCL_LIBRARY")
endif()
add_library(perceiver_nccl UNKNOWN IMPORTED)
set_target_properties(perceiver_nccl PROPERTIES IMPORTED_LOCATION ${PERCEIVER_NCCL_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${PERCEIVER_NCCL_INCLUDE_DIR})
message(STATUS "CUDA backend: nvcc ${CMAKE_CUDA_COMPILER_VERSION} for sm ${CMAKE_CUDA_ARCHITECTURES}, "
               "toolkit ${CUDAToolkit_VERSION} (${CUDAToolkit_LIBRARY_DIR}), NCCL ${PERCEIVER_NCCL_LIBRARY}")
