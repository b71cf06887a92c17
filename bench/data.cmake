# Data pipeline benchmark (issue 4): random 16-frame clip sampling from videos vs HDF5 shards.
# Included from bench/CMakeLists.txt. Run: build/bin/bench_data [--threads 1,2] [--deflate 0|1].
# It makes and prepares a synthetic set of videos: the media component's (PERCEIVER_WITH_MEDIA).
if(NOT PERCEIVER_WITH_MEDIA)
  message(STATUS "bench_data: not built (PERCEIVER_WITH_MEDIA=OFF)")
  return()
endif()
add_executable(bench_data ${CMAKE_CURRENT_LIST_DIR}/bench_data.cpp)
target_link_libraries(bench_data PRIVATE perceiver_media_internal)
perceiver_set_target_options(bench_data)
set_target_properties(bench_data PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
