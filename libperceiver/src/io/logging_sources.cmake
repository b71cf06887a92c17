# io/ logging: TensorBoard event files and metrics.jsonl (no extra dependencies; nlohmann-json is
# already linked to the library).
target_sources(perceiver PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tensorboard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics_jsonl.cpp)
