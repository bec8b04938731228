# Blas.cmake - a CBLAS for the CPU GEMM (included by CMakeLists.txt).
#
# Sets RG_HAVE_CBLAS, RG_BLAS_LIBS, RG_CBLAS_INCLUDE_DIR, _rg_blas_name and RG_BLAS_SUMMARY.
#
# The CPU GEMM calls cblas_sgemm when RG_HAVE_CBLAS is defined. find_package(BLAS) finds
# the library (OpenBLAS, MKL, BLIS, reference, ...); a CBLAS also needs cblas.h and the
# cblas_sgemm symbol, which plain Fortran BLAS builds lack, so both are checked.

set(RG_BLAS_SUMMARY "off (RG_BLAS=OFF), built-in GEMM")
set(RG_HAVE_CBLAS OFF)
set(RG_BLAS_LIBS "")
if(NOT RG_BLAS_MODE STREQUAL "OFF")
  find_package(BLAS QUIET)
  if(BLAS_FOUND)
    find_path(RG_CBLAS_INCLUDE_DIR cblas.h
      PATH_SUFFIXES openblas openblas-pthread openblas-openmp blis cblas)
    mark_as_advanced(RG_CBLAS_INCLUDE_DIR)
    set(_rg_cblas_probe "
#include <cblas.h>
int main(void) {
  float a = 2.0f, b = 3.0f, c = 0.0f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1,
              0.0f, &c, 1);
  return c == 6.0f ? 0 : 1;
}")
    if(RG_CBLAS_INCLUDE_DIR)
      set(CMAKE_REQUIRED_QUIET ON)
      set(CMAKE_REQUIRED_INCLUDES "${RG_CBLAS_INCLUDE_DIR}")
      set(CMAKE_REQUIRED_LIBRARIES ${BLAS_LIBRARIES} ${BLAS_LINKER_FLAGS})
      check_c_source_compiles("${_rg_cblas_probe}" RG_CBLAS_IN_BLAS)
      if(RG_CBLAS_IN_BLAS)
        set(RG_BLAS_LIBS ${BLAS_LIBRARIES})
      else()
        find_library(RG_CBLAS_LIBRARY cblas)
        mark_as_advanced(RG_CBLAS_LIBRARY)
        if(RG_CBLAS_LIBRARY)
          set(CMAKE_REQUIRED_LIBRARIES ${RG_CBLAS_LIBRARY} ${BLAS_LIBRARIES}
              ${BLAS_LINKER_FLAGS})
          check_c_source_compiles("${_rg_cblas_probe}" RG_CBLAS_SEPARATE)
          if(RG_CBLAS_SEPARATE)
            set(RG_BLAS_LIBS ${RG_CBLAS_LIBRARY} ${BLAS_LIBRARIES})
          endif()
        endif()
      endif()
      unset(CMAKE_REQUIRED_QUIET)
      unset(CMAKE_REQUIRED_INCLUDES)
      unset(CMAKE_REQUIRED_LIBRARIES)
    endif()
    # Name the implementation from the library the BLAS symlinks end at (on Debian,
    # libblas.so is an alternative that may resolve to OpenBLAS).
    list(GET BLAS_LIBRARIES 0 _rg_blas0)
    if(EXISTS "${_rg_blas0}")
      file(REAL_PATH "${_rg_blas0}" _rg_blas_real)
    else()
      set(_rg_blas_real "${_rg_blas0}")
    endif()
    string(TOLOWER "${_rg_blas_real}" _rg_blas_lc)
    if(_rg_blas_lc MATCHES "openblas")
      set(_rg_blas_name "OpenBLAS")
    elseif(_rg_blas_lc MATCHES "mkl")
      set(_rg_blas_name "MKL")
    elseif(_rg_blas_lc MATCHES "blis")
      set(_rg_blas_name "BLIS")
    elseif(_rg_blas_lc MATCHES "flexiblas")
      set(_rg_blas_name "FlexiBLAS")
    elseif(_rg_blas_lc MATCHES "accelerate")
      set(_rg_blas_name "Accelerate")
    elseif(_rg_blas_lc MATCHES "/blas/libblas")
      set(_rg_blas_name "reference BLAS (netlib)")
    else()
      set(_rg_blas_name "reference/other BLAS")
    endif()
  endif()
  # The reference (netlib) BLAS is an unoptimised triple loop, several times slower than
  # the built-in blocked GEMM (a gpt-char step: 20 s against a few): AUTO passes it by.
  if(RG_BLAS_LIBS AND RG_BLAS_MODE STREQUAL "AUTO" AND _rg_blas_name MATCHES "netlib")
    set(RG_BLAS_LIBS "")
    set(_rg_blas_skipped ON)
  endif()
  if(RG_BLAS_LIBS)
    set(RG_HAVE_CBLAS ON)
    set(RG_BLAS_SUMMARY "found (${_rg_blas_name}: ${_rg_blas_real}), cblas_sgemm for GEMM")
  elseif(_rg_blas_skipped)
    set(RG_BLAS_SUMMARY "only the reference BLAS found (slower than built-in), built-in GEMM")
  elseif(BLAS_FOUND)
    string(CONCAT RG_BLAS_SUMMARY "${_rg_blas_name} found but no usable CBLAS "
           "(cblas.h + cblas_sgemm), built-in GEMM")
  else()
    set(RG_BLAS_SUMMARY "not found, built-in GEMM")
  endif()
  if(RG_BLAS_MODE STREQUAL "ON" AND NOT RG_HAVE_CBLAS)
    message(FATAL_ERROR "RG_BLAS=ON but no CBLAS was found (need a BLAS library, cblas.h "
            "and cblas_sgemm; on Debian: apt-get install libopenblas-dev). Configure "
            "with -DRG_BLAS=AUTO or OFF to use the built-in GEMM.")
  endif()
endif()

