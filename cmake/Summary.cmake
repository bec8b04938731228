# Summary.cmake - the configure summary: one line per feature found (included last by
# CMakeLists.txt).

if(RG_WARNING_FLAGS)
  list(JOIN RG_WARNING_FLAGS " " _rg_warn)
else()
  set(_rg_warn "compiler defaults")
endif()
if(CMAKE_CONFIGURATION_TYPES)
  set(_rg_bt "multi-config")
elseif(CMAKE_BUILD_TYPE)
  set(_rg_bt "${CMAKE_BUILD_TYPE}")
else()
  set(_rg_bt "no build type")
endif()
message(STATUS "resgrad ${PROJECT_VERSION} (${_rg_bt}, shared + static, "
               "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}):")
message(STATUS "  CUDA toolkit: ${RG_CUDA_SUMMARY}")
message(STATUS "  NCCL:         ${RG_NCCL_SUMMARY}")
message(STATUS "  cuDNN:        ${RG_CUDNN_SUMMARY}")
message(STATUS "  BLAS:         ${RG_BLAS_SUMMARY}")
message(STATUS "  OpenMP:       ${RG_OPENMP_SUMMARY}")
message(STATUS "  sanitizers:   ${RG_SANITIZE_SUMMARY}")
message(STATUS "  warnings:     ${_rg_warn}")
