# The CUDA backend, a target of its own (perceiver_cuda). Included when PERCEIVER_WITH_CUDA=ON
# (cmake/PerceiverCuda.cmake has found nvcc, the toolkit and NCCL); the registry sees it through
# PCV_USE_CUDA.
#  - Shared build: libperceiver_cuda.so beside libperceiver.so, linked to it and to the CUDA
#    libraries, and dlopen'ed by the registry on the first --device cuda (PCV_CUDA_PLUGIN names
#    it), so CPU runs never load cuBLASLt (~150 MB resident) and a CPU-only machine needs none
#    of the CUDA libraries.
#  - Static build: its objects go into libperceiver.a.
set(_pcv_cuda_sources
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
  ${CMAKE_CURRENT_LIST_DIR}/cuda_profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_reduce.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_table.cpp
)
if(BUILD_SHARED_LIBS)
  add_library(perceiver_cuda SHARED ${_pcv_cuda_sources} ${CMAKE_CURRENT_LIST_DIR}/cuda_plugin.cpp)
  set_target_properties(perceiver_cuda PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
  target_link_libraries(perceiver_cuda PUBLIC perceiver)
  set_source_files_properties(src/backend/registry.cpp PROPERTIES COMPILE_DEFINITIONS
    "PCV_USE_CUDA;PCV_CUDA_PLUGIN=\"libperceiver_cuda.so.${PROJECT_VERSION_MAJOR}\"")
else()
  add_library(perceiver_cuda OBJECT ${_pcv_cuda_sources})
  target_link_libraries(perceiver PRIVATE perceiver_cuda)
  set_source_files_properties(src/backend/registry.cpp PROPERTIES COMPILE_DEFINITIONS PCV_USE_CUDA)
endif()
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
# The installed library finds the CUDA runtime, cuBLASLt and NCCL where this build found them (the
# toolkit is rarely on the loader's path; images put them on it, deploy/Containerfile), and the
# plugin finds libperceiver beside itself.
set(_pcv_cuda_owner perceiver)
if(BUILD_SHARED_LIBS)
  set(_pcv_cuda_owner perceiver_cuda)
  set_property(TARGET perceiver_cuda APPEND PROPERTY INSTALL_RPATH "$ORIGIN")
endif()
set_property(TARGET ${_pcv_cuda_owner} APPEND PROPERTY INSTALL_RPATH ${CUDAToolkit_LIBRARY_DIR})
get_filename_component(_pcv_nccl_dir ${PERCEIVER_NCCL_LIBRARY} DIRECTORY)
if(NOT _pcv_nccl_dir STREQUAL CUDAToolkit_LIBRARY_DIR)
  set_property(TARGET ${_pcv_cuda_owner} APPEND PROPERTY INSTALL_RPATH ${_pcv_nccl_dir})
endif()
