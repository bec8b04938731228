# Library.cmake - the library, shared (resgrad) and static (resgrad_static), from the
# globbed sources; the CUDA backend as an object library both use (included by
# CMakeLists.txt).
#
# Sets RG_LIB_SOURCES, RG_PUBLIC_HEADERS, RG_PRIVATE_DEFS (the definitions the library
# shares with its white-box users: tests, bench) and RG_CUDA_LINK_LIBS.

file(GLOB RG_LIB_SOURCES CONFIGURE_DEPENDS
  "${PROJECT_SOURCE_DIR}/src/core/*.c"
  "${PROJECT_SOURCE_DIR}/src/cpu/*.c"
  "${PROJECT_SOURCE_DIR}/src/nn/*.c"
  "${PROJECT_SOURCE_DIR}/src/text/*.c")
if(RG_HAVE_CUDA)
  # Compiled once into an object library that both the shared and static libraries use.
  file(GLOB RG_CUDA_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/cuda/*.cu")
  add_library(resgrad_cuda OBJECT ${RG_CUDA_SOURCES})
  set_target_properties(resgrad_cuda PROPERTIES
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON
    CUDA_VISIBILITY_PRESET hidden)
  target_include_directories(resgrad_cuda PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  set(_rg_nvcc_flags
    -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90)
  if(RG_WERROR)
    list(APPEND _rg_nvcc_flags -Xcompiler=-Wall,-Wextra,-Werror)
  endif()
  target_compile_options(resgrad_cuda PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:${_rg_nvcc_flags}>")
  target_link_libraries(resgrad_cuda PRIVATE CUDA::cudart CUDA::cublasLt)
  if(RG_HAVE_NCCL)
    target_compile_definitions(resgrad_cuda PRIVATE RG_HAVE_NCCL=1)
    target_include_directories(resgrad_cuda PRIVATE ${RG_NCCL_INCLUDE_DIR})
  endif()
  if(RG_HAVE_CUDNN) # plain C: the backend API needs no C++
    target_sources(resgrad_cuda PRIVATE "${PROJECT_SOURCE_DIR}/src/cuda/dnn_att.c")
    set_target_properties(resgrad_cuda PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
      C_EXTENSIONS OFF C_VISIBILITY_PRESET hidden)
    target_compile_options(resgrad_cuda PRIVATE
      "$<$<COMPILE_LANGUAGE:C>:${RG_WARNING_FLAGS}>")
    target_compile_definitions(resgrad_cuda PRIVATE RG_HAVE_CUDNN=1)
    target_include_directories(resgrad_cuda PRIVATE ${RG_CUDNN_INCLUDE_DIR})
  endif()
  list(APPEND RG_LIB_SOURCES $<TARGET_OBJECTS:resgrad_cuda>)
else()
  list(APPEND RG_LIB_SOURCES "${PROJECT_SOURCE_DIR}/src/cuda/stub.c")
  set_source_files_properties("${PROJECT_SOURCE_DIR}/src/cuda/stub.c" PROPERTIES
    COMPILE_DEFINITIONS "RG_CUDA_STUB_WHY=${_rg_stub_why}")
endif()
file(GLOB RG_PUBLIC_HEADERS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/include/*.h")

# Definitions that the library and its in-tree white-box users (tests, bench) share.
set(RG_PRIVATE_DEFS "")
if(RG_HAVE_CBLAS)
  # OpenBLAS's cblas.h includes <complex.h>, whose macro I breaks any variable named I
  # in the file that includes it; this define makes OpenBLAS use a struct instead.
  list(APPEND RG_PRIVATE_DEFS RG_HAVE_CBLAS=1 FORCE_OPENBLAS_COMPLEX_STRUCT)
  if(_rg_blas_name STREQUAL "OpenBLAS")
    list(APPEND RG_PRIVATE_DEFS RG_HAVE_OPENBLAS=1)
  endif()
endif()
if(RG_HAVE_OPENMP)
  list(APPEND RG_PRIVATE_DEFS RG_HAVE_OPENMP=1)
endif()
if(RG_HAVE_CUDNN)
  list(APPEND RG_PRIVATE_DEFS RG_HAVE_CUDNN=1)
endif()

add_library(resgrad SHARED ${RG_LIB_SOURCES})
add_library(resgrad_static STATIC ${RG_LIB_SOURCES})
add_library(resgrad::resgrad ALIAS resgrad)
add_library(resgrad::resgrad_static ALIAS resgrad_static)

# Pre-1.0 every minor release may break the ABI, so the soname carries MAJOR.MINOR.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_rg_soversion "${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}")
else()
  set(_rg_soversion "${PROJECT_VERSION_MAJOR}")
endif()
set_target_properties(resgrad PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${_rg_soversion})
set_target_properties(resgrad_static PROPERTIES
  POSITION_INDEPENDENT_CODE ON) # so it can be linked into someone's shared library
if(MSVC)
  set_target_properties(resgrad_static PROPERTIES OUTPUT_NAME resgrad_static)
else()
  set_target_properties(resgrad_static PROPERTIES OUTPUT_NAME resgrad)
endif()
target_compile_definitions(resgrad PRIVATE RG_BUILD_SHARED)
# A symbol missing from the library fails its link, not some later program's. (Not with
# sanitizers: Clang leaves their runtime to the executable.)
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND _rg_gnu_like AND NOT RG_SANITIZE AND NOT RG_TSAN)
  target_link_options(resgrad PRIVATE "LINKER:--no-undefined")
endif()

foreach(_lib resgrad resgrad_static)
  rg_setup(${_lib})
  # Only RG_API symbols leave the library; internals (rg__*) stay hidden even when the
  # static archive ends up inside another shared object.
  set_target_properties(${_lib} PROPERTIES
    C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON EXPORT_NAME ${_lib})
  target_include_directories(${_lib}
    PUBLIC
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE
      ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(${_lib} PRIVATE ${RG_PRIVATE_DEFS})
  if(RG_HAVE_CBLAS)
    target_include_directories(${_lib} PRIVATE ${RG_CBLAS_INCLUDE_DIR})
  endif()
endforeach()

# Link dependencies. For the shared library they are private. The static archive's users
# must link them too; they are exported as plain library paths/names (not as the
# OpenMP::OpenMP_C target) so find_package(resgrad) needs no find_dependency(OpenMP),
# which would fail in projects that do not enable C.
if(RG_HAVE_OPENMP)
  target_link_libraries(resgrad PRIVATE OpenMP::OpenMP_C)
  target_link_libraries(resgrad_static PRIVATE $<BUILD_INTERFACE:OpenMP::OpenMP_C>)
  foreach(_l ${OpenMP_C_LIBRARIES})
    target_link_libraries(resgrad_static INTERFACE $<INSTALL_INTERFACE:${_l}>)
  endforeach()
endif()
if(RG_HAVE_CBLAS)
  target_link_libraries(resgrad PRIVATE ${RG_BLAS_LIBS})
  target_link_libraries(resgrad_static PRIVATE ${RG_BLAS_LIBS})
endif()
if(RG_HAVE_CUDA)
  # As for OpenMP: the installed static target names the libraries by path, so users'
  # find_package(resgrad) needs no find_package(CUDAToolkit). The host code nvcc emits
  # is C++, hence libstdc++ for a static link from C.
  set(RG_CUDA_LINK_LIBS "${CUDAToolkit_LIBRARY_DIR}/libcublasLt.so"
                        "${CUDAToolkit_LIBRARY_DIR}/libcudart.so" stdc++)
  target_link_libraries(resgrad PRIVATE CUDA::cudart CUDA::cublasLt)
  target_link_libraries(resgrad_static PUBLIC $<BUILD_INTERFACE:CUDA::cudart>
                        $<BUILD_INTERFACE:CUDA::cublasLt>)
  if(RG_HAVE_NCCL)
    list(APPEND RG_CUDA_LINK_LIBS "${RG_NCCL_LIBRARY}")
    target_link_libraries(resgrad PRIVATE "${RG_NCCL_LIBRARY}")
    target_link_libraries(resgrad_static PUBLIC $<BUILD_INTERFACE:${RG_NCCL_LIBRARY}>)
  endif()
  if(RG_HAVE_CUDNN)
    list(APPEND RG_CUDA_LINK_LIBS "${RG_CUDNN_LIBRARY}")
    target_link_libraries(resgrad PRIVATE "${RG_CUDNN_LIBRARY}")
    target_link_libraries(resgrad_static PUBLIC $<BUILD_INTERFACE:${RG_CUDNN_LIBRARY}>)
  endif()
  foreach(_l ${RG_CUDA_LINK_LIBS})
    target_link_libraries(resgrad_static INTERFACE $<INSTALL_INTERFACE:${_l}>)
  endforeach()
endif()
# rg_data's prefetch worker is a POSIX thread. As for OpenMP, the installed static
# target names the flag or library plainly (glibc 2.34 and later need none).
find_package(Threads REQUIRED)
target_link_libraries(resgrad PRIVATE Threads::Threads)
target_link_libraries(resgrad_static PRIVATE $<BUILD_INTERFACE:Threads::Threads>)
if(CMAKE_THREAD_LIBS_INIT)
  target_link_libraries(resgrad_static INTERFACE $<INSTALL_INTERFACE:${CMAKE_THREAD_LIBS_INIT}>)
endif()
if(RG_LIBM)
  target_link_libraries(resgrad PRIVATE m)
  target_link_libraries(resgrad_static PRIVATE m)
endif()
