# install(): the library, its public headers, a CMake package (find_package(perceiver)) and a
# pkg-config file; with PERCEIVER_WITH_MEDIA the media component too (its own export set, so
# find_package(perceiver COMPONENTS media) finds perceiver::media, and perceiver-media.pc).
include(CMakePackageConfigHelpers)

set(PERCEIVER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/perceiver)

install(TARGETS perceiver EXPORT perceiverTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libperceiver/include/perceiver
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The CUDA backend's library, opened by the core for --device cuda; nothing links it (no export).
if(TARGET perceiver_cuda AND BUILD_SHARED_LIBS)
  install(TARGETS perceiver_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(EXPORT perceiverTargets NAMESPACE perceiver:: DESTINATION ${PERCEIVER_CMAKE_DIR})

if(PERCEIVER_WITH_MEDIA)
  install(TARGETS perceiver_media EXPORT perceiverMediaTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/libperceiver/src/media/include/perceiver/media.h
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/perceiver)
  install(EXPORT perceiverMediaTargets NAMESPACE perceiver:: DESTINATION ${PERCEIVER_CMAKE_DIR})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/perceiver-media.pc.in ${PROJECT_BINARY_DIR}/perceiver-media.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/perceiver-media.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/perceiver-config.cmake.in
  ${PROJECT_BINARY_DIR}/perceiver-config.cmake INSTALL_DESTINATION ${PERCEIVER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/perceiver-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/perceiver-config.cmake ${PROJECT_BINARY_DIR}/perceiver-config-version.cmake
  DESTINATION ${PERCEIVER_CMAKE_DIR})

configure_file(${PROJECT_SOURCE_DIR}/cmake/perceiver.pc.in ${PROJECT_BINARY_DIR}/perceiver.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/perceiver.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
