# The CPU backend's vector kernels, compiled once per instruction-set level (cpu_isa.h), as an
# object library so that tests/backend can check its object files for symbols the levels share.
# Included from libperceiver/CMakeLists.txt.
add_library(perceiver_cpu_isa OBJECT ${CMAKE_CURRENT_LIST_DIR}/cpu_isa_baseline.cpp)
if(PERCEIVER_X86_64)
  target_sources(perceiver_cpu_isa PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cpu_isa_v3.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/cpu_isa_v3_sgemm.cpp ${CMAKE_CURRENT_LIST_DIR}/cpu_isa_v4.cpp)
  perceiver_compile_for_isa(${CMAKE_CURRENT_LIST_DIR}/cpu_isa_v3.cpp x86-64-v3)
  perceiver_compile_for_isa(${CMAKE_CURRENT_LIST_DIR}/cpu_isa_v3_sgemm.cpp x86-64-v3)
  perceiver_compile_for_isa(${CMAKE_CURRENT_LIST_DIR}/cpu_isa_v4.cpp x86-64-v4)
endif()
target_include_directories(perceiver_cpu_isa PRIVATE ${PROJECT_SOURCE_DIR}/libperceiver/include ${PROJECT_SOURCE_DIR}/libperceiver/src)
target_compile_definitions(perceiver_cpu_isa PRIVATE EIGEN_DONT_PARALLELIZE)
target_link_libraries(perceiver_cpu_isa PRIVATE OpenMP::OpenMP_CXX Eigen3::Eigen)
perceiver_set_target_options(perceiver_cpu_isa)
# After the library's own objects, baseline first: should a symbol ever be shared after all,
# the linker keeps its first copy, which is then one that runs on any CPU.
target_sources(perceiver PRIVATE $<TARGET_OBJECTS:perceiver_cpu_isa>)
