# OpenMP.cmake - OpenMP for the CPU kernels, and libm (included by CMakeLists.txt).
#
# Sets RG_HAVE_OPENMP, RG_OPENMP_SUMMARY and RG_LIBM.

set(RG_OPENMP_SUMMARY "off (RG_OPENMP=OFF), single-threaded kernels")
set(RG_HAVE_OPENMP OFF)
if(RG_OPENMP)
  find_package(OpenMP QUIET COMPONENTS C)
  if(OpenMP_C_FOUND)
    set(RG_HAVE_OPENMP ON)
    set(RG_OPENMP_SUMMARY "found (OpenMP ${OpenMP_C_VERSION})")
  else()
    set(RG_OPENMP_SUMMARY "not found, single-threaded kernels")
  endif()
endif()

find_library(RG_LIBM m)
mark_as_advanced(RG_LIBM)
