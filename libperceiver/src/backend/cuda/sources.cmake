# The CUDA backend, a target of its own (perceiver_cuda) whose objects are linked into
# libperceiver; the registry sees it through PCV_USE_CUDA. Included when PERCEIVER_WITH_CUDA=ON
# (cmake/PerceiverCuda.cmake has found nvcc, the toolkit and NCCL).
add_library(perceiver_cuda OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/cuda_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_gemm_ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_loss.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_model_ops.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_norm.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_optim.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_reduce.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_table.cpp
)
target_include_directories(perceiver_cuda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src)
perceiver_set_target_options(perceiver_cuda)
set_target_properties(perceiver_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Shared CUDA_SEPARABLE_COMPILATION OFF)
target_compile_options(perceiver_cuda PRIVATE
  # CMake 3.25 knows no CUDA 13 dialect flags (cmake/PerceiverCuda.cmake): set the standard here.
  $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>
  # Spills and local memory fail the build, for every architecture compiled.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills,-warn-lmem-usage,-Werror>
  # A __host__ __device__ body that calls a host-only function is an error, not a warning.
  $<$<COMPILE_LANGUAGE:CUDA>:--Werror=cross-execution-space-call>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${PERCEIVER_CUDA_RESOURCE_USAGE}>>:--resource-usage>)
target_link_libraries(perceiver_cuda PUBLIC CUDA::cudart CUDA::cublasLt perceiver_nccl)
target_link_libraries(perceiver PRIVATE perceiver_cuda)
set_source_files_properties(src/backend/registry.cpp PROPERTIES COMPILE_DEFINITIONS PCV_USE_CUDA)
# The installed library finds the CUDA runtime, cuBLASLt and NCCL where this build found them (the
# toolkit is rarely on the loader's path); images put them on it (deploy/Containerfile).
set_property(TARGET perceiver APPEND PROPERTY INSTALL_RPATH ${CUDAToolkit_LIBRARY_DIR})
get_filename_component(_pcv_nccl_dir ${PERCEIVER_NCCL_LIBRARY} DIRECTORY)
if(NOT _pcv_nccl_dir STREQUAL CUDAToolkit_LIBRARY_DIR)
  set_property(TARGET perceiver APPEND PROPERTY INSTALL_RPATH ${_pcv_nccl_dir})
endif()
