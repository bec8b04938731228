# Install.cmake - what `cmake --install` installs: the two libraries, the public headers,
# the CMake package (resgrad-config.cmake, its version file, the exported targets) and
# resgrad.pc (pkgconfig.cmake). The programs of tools/ are installed by Programs.cmake.
# (Included by CMakeLists.txt.)

install(TARGETS resgrad resgrad_static
  EXPORT resgrad-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${RG_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(RG_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/resgrad")
install(EXPORT resgrad-targets
  NAMESPACE resgrad::
  FILE resgrad-targets.cmake
  DESTINATION ${RG_CMAKE_DIR})
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/resgrad-config.cmake.in"
  "${PROJECT_BINARY_DIR}/resgrad-config.cmake"
  INSTALL_DESTINATION ${RG_CMAKE_DIR})
# 0.x: only the same MAJOR.MINOR is compatible (see the soname, Library.cmake).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_rg_compat SameMinorVersion)
else()
  set(_rg_compat SameMajorVersion)
endif()
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/resgrad-config-version.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY ${_rg_compat})
install(FILES
  "${PROJECT_BINARY_DIR}/resgrad-config.cmake"
  "${PROJECT_BINARY_DIR}/resgrad-config-version.cmake"
  DESTINATION ${RG_CMAKE_DIR})

include("${CMAKE_CURRENT_LIST_DIR}/pkgconfig.cmake")
