# Optimizers, learning-rate schedules, gradient clipping (included from libperceiver/CMakeLists.txt).
target_sources(perceiver PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule.cpp)
