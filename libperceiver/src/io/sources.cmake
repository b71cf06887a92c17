# io/: HDF5 files (checkpoints, data shards, fixtures), safetensors, and atomic publishing.
pkg_check_modules(HDF5 REQUIRED IMPORTED_TARGET hdf5)
target_sources(perceiver PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/weights.cpp)
target_link_libraries(perceiver PRIVATE PkgConfig::HDF5)
