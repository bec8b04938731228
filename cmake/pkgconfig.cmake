# pkgconfig.cmake - writes and installs resgrad.pc (included by cmake/Install.cmake).
#
# The prefix is filled in at install time, not configure time, so that
# `cmake --install build --prefix DIR` gets a .pc naming DIR. Libs.private lists what a
# static link needs (`pkg-config --static --libs resgrad`): the BLAS, the threads library,
# cudart, cuBLASLt and libstdc++ (CUDA builds) and libm, as -l flags (plus -L for directories the compiler does not search itself).

set(_pc_libs "")
function(_rg_pc_add_lib lib)
  if(lib MATCHES "^-")
    set(_flag "${lib}")
  elseif(lib MATCHES "^(.*)/(lib)?([^/]+)\\.(so|a|dylib|tbd)(\\.[0-9.]+)?$")
    set(_dir "${CMAKE_MATCH_1}")
    set(_flag "-l${CMAKE_MATCH_3}")
    list(FIND CMAKE_C_IMPLICIT_LINK_DIRECTORIES "${_dir}" _implicit)
    if(_implicit EQUAL -1 AND NOT _dir MATCHES "^/(usr/)?lib(64)?(/[^/]*-linux-gnu)?$")
      set(_flag "-L${_dir} ${_flag}")
    endif()
  elseif(lib MATCHES "/")
    set(_flag "${lib}")
  else()
    set(_flag "-l${lib}")
  endif()
  set(_pc_libs ${_pc_libs} ${_flag} PARENT_SCOPE)
endfunction()

if(RG_HAVE_CBLAS)
  foreach(_l ${RG_BLAS_LIBS})
    _rg_pc_add_lib("${_l}")
  endforeach()
endif()
if(CMAKE_THREAD_LIBS_INIT) # the CPU backend's pool, rg_data's worker thread
  _rg_pc_add_lib("${CMAKE_THREAD_LIBS_INIT}")
endif()
if(RG_HAVE_CUDA)
  foreach(_l ${RG_CUDA_LINK_LIBS})
    _rg_pc_add_lib("${_l}")
  endforeach()
endif()
if(RG_LIBM)
  _rg_pc_add_lib(m)
endif()
list(REMOVE_DUPLICATES _pc_libs)
list(JOIN _pc_libs " " RG_PC_LIBS_PRIVATE)

# Stage 1 (configure): everything but the prefix; @RG_PC_PREFIX@ survives as a marker.
set(RG_PC_PREFIX "@RG_PC_PREFIX@")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(RG_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(RG_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(RG_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(RG_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/resgrad.pc.in"
               "${PROJECT_BINARY_DIR}/pkgconfig/resgrad.pc.stage" @ONLY)

# Stage 2 (install): the prefix actually installed to.
install(CODE "
  set(RG_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/pkgconfig/resgrad.pc.stage\"
                 \"${PROJECT_BINARY_DIR}/pkgconfig/resgrad.pc\" @ONLY)
")
install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/resgrad.pc"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
