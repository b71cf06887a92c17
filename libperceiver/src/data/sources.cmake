# data/: what training reads, in the core: the Kinetics index (CSV), HDF5 shards, the sampler
# and the threaded loader over prepared shards, and the seam to the media component
# (media_hooks.h; the FFmpeg/libsndfile code lives in src/media/, target perceiver::media).
# Included from libperceiver/CMakeLists.txt, so relative paths are from libperceiver/.
# zlib: shards compress/inflate their HDF5 chunks outside HDF5's global lock (data/shards.h).
find_package(ZLIB REQUIRED)

set(PERCEIVER_DATA_DIR ${CMAKE_CURRENT_SOURCE_DIR}/src/data)
target_sources(perceiver PRIVATE
  ${PERCEIVER_DATA_DIR}/audio_length.cpp
  ${PERCEIVER_DATA_DIR}/kinetics_index.cpp
  ${PERCEIVER_DATA_DIR}/loader.cpp
  ${PERCEIVER_DATA_DIR}/media_hooks.cpp
  ${PERCEIVER_DATA_DIR}/prepared_dataset.cpp
  ${PERCEIVER_DATA_DIR}/shards.cpp
)
target_link_libraries(perceiver PRIVATE ZLIB::ZLIB)
# Only the wording of the "no media support" line depends on the build (rebuild vs register).
if(PERCEIVER_WITH_MEDIA)
  set(_pcv_media 1)
else()
  set(_pcv_media 0)
endif()
set_source_files_properties(${PERCEIVER_DATA_DIR}/media_hooks.cpp PROPERTIES
  COMPILE_DEFINITIONS PERCEIVER_WITH_MEDIA=${_pcv_media})
