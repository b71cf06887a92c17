# install(): the library, its public headers, a CMake package (find_package(perceiver)) and a
# pkg-config file.
include(CMakePackageConfigHelpers)

set(PERCEIVER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/perceiver)

install(TARGETS perceiver EXPORT perceiverTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libperceiver/include/perceiver
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT perceiverTargets NAMESPACE perceiver:: DESTINATION ${PERCEIVER_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/perceiver-config.cmake.in
  ${PROJECT_BINARY_DIR}/perceiver-config.cmake INSTALL_DESTINATION ${PERCEIVER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/perceiver-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/perceiver-config.cmake ${PROJECT_BINARY_DIR}/perceiver-config-version.cmake
  DESTINATION ${PERCEIVER_CMAKE_DIR})

configure_file(${PROJECT_SOURCE_DIR}/cmake/perceiver.pc.in ${PROJECT_BINARY_DIR}/perceiver.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/perceiver.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
