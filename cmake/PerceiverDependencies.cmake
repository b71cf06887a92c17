# Every third-party dependency as an imported target. All come from Debian 12 packages
# (scripts/install-deps.sh installs them).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(PkgConfig REQUIRED)

# OpenBLAS directly (not the generic libblas alternative): we call openblas_set_num_threads.
pkg_check_modules(OpenBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(YAMLCPP REQUIRED IMPORTED_TARGET yaml-cpp)
find_package(nlohmann_json 3.10 REQUIRED)

# oneDNN for the CPU backend's bf16 products (backend/cpu/cpu_bf16.cpp). Debian's build uses
# GNU OpenMP like the library; the sanitizer build (clang's libomp) turns it off.
if(PERCEIVER_WITH_DNNL)
  find_package(dnnl CONFIG REQUIRED)
endif()
