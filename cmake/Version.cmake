# Version.cmake - the project's version, read from the public header before project()
# (included by CMakeLists.txt). One source of truth: RG_VERSION_* in include/resgrad.h.
#
# Sets _rg_version ("MAJOR.MINOR.PATCH"); a header whose RG_VERSION_STRING is missing or
# disagrees with RG_VERSION_MAJOR/MINOR/PATCH stops the configure.

set(_rg_header "${CMAKE_CURRENT_SOURCE_DIR}/include/resgrad.h")
file(STRINGS "${_rg_header}" _rg_ver_lines
     REGEX "^#define RG_VERSION_(MAJOR|MINOR|PATCH|STRING) ")
foreach(_part MAJOR MINOR PATCH)
  string(REGEX MATCH "#define RG_VERSION_${_part} ([0-9]+)" _m "${_rg_ver_lines}")
  set(_rg_v_${_part} "${CMAKE_MATCH_1}")
endforeach()
string(REGEX MATCH "#define RG_VERSION_STRING \"([0-9]+\\.[0-9]+\\.[0-9]+)\"" _m
       "${_rg_ver_lines}")
set(_rg_version "${CMAKE_MATCH_1}")
if(NOT _rg_version OR NOT _rg_version STREQUAL "${_rg_v_MAJOR}.${_rg_v_MINOR}.${_rg_v_PATCH}")
  message(FATAL_ERROR "include/resgrad.h: RG_VERSION_STRING (\"${_rg_version}\") must be "
          "present and agree with RG_VERSION_MAJOR/MINOR/PATCH "
          "(${_rg_v_MAJOR}.${_rg_v_MINOR}.${_rg_v_PATCH})")
endif()
