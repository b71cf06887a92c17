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
