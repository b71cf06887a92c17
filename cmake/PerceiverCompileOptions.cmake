# perceiver_set_target_options(<target>): warnings, sanitizers and language level for our targets.
function(perceiver_set_target_options target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    # GCC 12 false positive inside std::string concatenation (GCC PR105329); clang has no such flag.
    $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-restrict>)
  if(PERCEIVER_SANITIZE)
    # No recovery: undefined behaviour fails the test that hits it instead of printing a line.
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=undefined
                                             -fno-omit-frame-pointer)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
  if(PERCEIVER_FUZZ)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()

# True when building for x86-64, the only target with per-level kernels (backend/cpu/cpu_isa.h).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(PERCEIVER_X86_64 ON)
else()
  set(PERCEIVER_X86_64 OFF)
endif()

# perceiver_compile_for_isa(<source> <level>): compiles one source for an x86-64 psABI level
# (x86-64-v3, x86-64-v4). Its code must only run after a runtime check of the CPU's features.
# Call it from the directory that adds the source to its target.
function(perceiver_compile_for_isa source level)
  set(flags -march=${level})
  if(level STREQUAL "x86-64-v4")
    # 512-bit vectors in auto-vectorised loops too (GCC's generic tuning would stop at 256);
    # GCC 12.0-12.2 warns falsely on `__m512 __Y = __Y;` in avx512fintrin.h (google/highway#710).
    list(APPEND flags -mprefer-vector-width=512 -Wno-maybe-uninitialized)
  endif()
  set_source_files_properties(${source} PROPERTIES COMPILE_OPTIONS "${flags}")
endfunction()
