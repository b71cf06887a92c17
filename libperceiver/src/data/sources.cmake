# Media layer (issue 4): FFmpeg reading/writing, libsndfile side files, the synthetic data set.
# Included from libperceiver/CMakeLists.txt, so relative paths are from libperceiver/.
pkg_check_modules(FFMPEG REQUIRED IMPORTED_TARGET
  libavformat libavcodec libswscale libswresample libavutil)
pkg_check_modules(SNDFILE REQUIRED IMPORTED_TARGET sndfile)
# zlib: shards compress/inflate their HDF5 chunks outside HDF5's global lock (data/shards.h).
find_package(ZLIB REQUIRED)

set(PERCEIVER_DATA_DIR ${CMAKE_CURRENT_SOURCE_DIR}/src/data)
target_sources(perceiver PRIVATE
  ${PERCEIVER_DATA_DIR}/audio_file.cpp
  ${PERCEIVER_DATA_DIR}/audio_resample.cpp
  ${PERCEIVER_DATA_DIR}/ffmpeg_ptr.cpp
  ${PERCEIVER_DATA_DIR}/frame_convert.cpp
  ${PERCEIVER_DATA_DIR}/kinetics_index.cpp
  ${PERCEIVER_DATA_DIR}/loader.cpp
  ${PERCEIVER_DATA_DIR}/media_writer.cpp
  ${PERCEIVER_DATA_DIR}/prep.cpp
  ${PERCEIVER_DATA_DIR}/prepared_dataset.cpp
  ${PERCEIVER_DATA_DIR}/shards.cpp
  ${PERCEIVER_DATA_DIR}/synthetic.cpp
  ${PERCEIVER_DATA_DIR}/video_reader.cpp
  ${PERCEIVER_DATA_DIR}/window_decode.cpp
)
target_link_libraries(perceiver PRIVATE PkgConfig::FFMPEG PkgConfig::SNDFILE ZLIB::ZLIB)
# Tests and tools that use the internal headers (data/*.h include FFmpeg headers) need the
# FFmpeg include paths too.
target_link_libraries(perceiver_internal INTERFACE PkgConfig::FFMPEG PkgConfig::SNDFILE)
