# dist/: data-parallel training over MPI (OpenMPI from Debian: libopenmpi-dev).
find_package(MPI REQUIRED COMPONENTS C)
target_sources(perceiver PRIVATE ${CMAKE_CURRENT_LIST_DIR}/communicator.cpp)
target_link_libraries(perceiver PRIVATE MPI::MPI_C)
# Tests and tools that include dist/communicator.h need no MPI headers (it does not include mpi.h).
