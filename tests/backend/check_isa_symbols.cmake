# cmake -DNM=<nm> -DOBJECTS=<a.o;b.o;...> -P check_isa_symbols.cmake
# Fails when an object file of the per-level kernels (cpu_isa_<level>[_<what>].cpp: the vector
# kernels of backend/cpu/cpu_isa.h, our float32 GEMM of cpu_sgemm.h) defines a global or weak
# symbol outside its own level's namespaces (isa_<level>, Eigen_isa_<level>): such a symbol would
# be shared with the other levels, and the linker would keep one copy of it for all of them,
# possibly one with instructions this CPU lacks.
foreach(object IN LISTS OBJECTS)
  string(REGEX MATCH "cpu_isa_([a-z0-9]+)(_[a-z0-9]+)?\\.cpp" _ "${object}")
  set(level "${CMAKE_MATCH_1}")
  if(NOT level)
    message(FATAL_ERROR "cannot tell the level of ${object}")
  endif()
  execute_process(COMMAND ${NM} -C --defined-only ${object} OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${object}")
  endif()
  string(REPLACE "\n" ";" lines "${listing}")
  set(count 0)
  foreach(line IN LISTS lines)
    # "<address> <type> <name>"; lower-case types are local, "n" is debug information.
    if(NOT line MATCHES "^[0-9a-f]+ ([A-Za-z]) (.*)$")
      continue()
    endif()
    set(type "${CMAKE_MATCH_1}")
    set(name "${CMAKE_MATCH_2}")
    if(type MATCHES "^[tdbrn]$")
      continue()
    endif()
    math(EXPR count "${count} + 1")
    # The personality routine's reference is the same data in every object.
    if(name MATCHES "isa_${level}::" OR name STREQUAL "DW.ref.__gxx_personality_v0")
      continue()
    endif()
    message(SEND_ERROR "${object}: '${name}' (${type}) is shared with the other levels")
  endforeach()
  if(count EQUAL 0)
    message(FATAL_ERROR "${object}: no global symbols at all (is this the right object file?)")
  endif()
  message(STATUS "${level}: ${count} global symbols, all its own")
endforeach()
