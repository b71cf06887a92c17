# The trainer's building blocks: checkpoints, evaluation metrics (its media: src/media/), configuration.
target_sources(perceiver PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compiled_step.cpp
  ${CMAKE_CURRENT_LIST_DIR}/evaluation.cpp)
target_sources(perceiver PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/train_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer.cpp)
