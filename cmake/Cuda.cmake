# Cuda.cmake - the CUDA toolkit, and NCCL and cuDNN beside it (included by
# CMakeLists.txt).
#
# Sets RG_HAVE_CUDA, RG_HAVE_NCCL and RG_HAVE_CUDNN, the include directories and libraries
# of the last two, the summary lines RG_CUDA_SUMMARY, RG_NCCL_SUMMARY and RG_CUDNN_SUMMARY,
# and _rg_stub_why; defines the cache options RG_NCCL, RG_CUDNN and their _ROOT.

# ---- CUDA toolkit ----------------------------------------------------------------------
# With a CUDA compiler the backend in src/cuda/*.cu is built (for Hopper, sm_90a, plus
# compute_90 PTX for later GPUs); without one src/cuda/stub.c answers every CUDA request
# with RG_ERR_UNSUPPORTED. RG_CUDA_STUB_WHY tells the stub which reason to give.

set(RG_CUDA_SUMMARY "not searched (RG_CUDA=OFF) - CPU only")
set(RG_HAVE_CUDA OFF)
set(_rg_stub_why 1) # 1: configured off
if(NOT RG_CUDA_MODE STREQUAL "OFF")
  # check_language honours CUDACXX and PATH; CI machines often have the toolkit in
  # /usr/local/cuda without it on PATH, so look there too.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(RG_NVCC nvcc
      HINTS ENV CUDA_HOME ENV CUDA_PATH ENV CUDA_ROOT
      PATHS /usr/local/cuda /opt/cuda
      PATH_SUFFIXES bin)
    mark_as_advanced(RG_NVCC)
    if(RG_NVCC)
      set(ENV{CUDACXX} "${RG_NVCC}")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES OFF) # Library.cmake's -gencode flags say it exactly
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(RG_HAVE_CUDA ON)
    set(RG_CUDA_SUMMARY "found (nvcc ${CMAKE_CUDA_COMPILER_VERSION}), backend built for "
                        "sm_90a + compute_90 PTX")
    string(REPLACE ";" "" RG_CUDA_SUMMARY "${RG_CUDA_SUMMARY}")
  elseif(RG_CUDA_MODE STREQUAL "ON")
    message(FATAL_ERROR "RG_CUDA=ON but no working CUDA compiler was found. Install the "
            "CUDA toolkit, point CUDACXX (or -DCMAKE_CUDA_COMPILER) at nvcc, or "
            "configure with -DRG_CUDA=AUTO or OFF.")
  else()
    set(RG_CUDA_SUMMARY "not found - CPU only (stub answers RG_ERR_UNSUPPORTED)")
    set(_rg_stub_why 2) # 2: no toolkit
  endif()
endif()

# Looks for a library beside the CUDA toolkit: its header (which holds its version macros,
# <NAME>_MAJOR, _MINOR and _<patch>) and lib<lib>, under RG_<NAME>_ROOT, the environment's
# <NAME>_ROOT or <NAME>_HOME, or the toolkit's directories. Sets RG_<NAME>_INCLUDE_DIR and
# RG_<NAME>_LIBRARY (cache) and RG_<NAME>_VERSION ("2.28.3"; "" without the header).
function(rg_find_beside_cuda name header lib patch)
  find_path(RG_${name}_INCLUDE_DIR ${header}
    HINTS ${RG_${name}_ROOT} ENV ${name}_ROOT ENV ${name}_HOME ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(RG_${name}_LIBRARY ${lib}
    HINTS ${RG_${name}_ROOT} ENV ${name}_ROOT ENV ${name}_HOME ${CUDAToolkit_LIBRARY_DIR}
          "${CUDAToolkit_LIBRARY_ROOT}"
    PATH_SUFFIXES lib lib64)
  mark_as_advanced(RG_${name}_INCLUDE_DIR RG_${name}_LIBRARY)
  set(_v "")
  if(RG_${name}_INCLUDE_DIR)
    file(STRINGS "${RG_${name}_INCLUDE_DIR}/${header}" _v REGEX
         "^#define ${name}_(MAJOR|MINOR|${patch}) ")
    string(REGEX REPLACE "[^0-9;]*#define ${name}_[A-Z]+ ([0-9]+)[^;]*" "\\1" _v "${_v}")
    string(REPLACE ";" "." _v "${_v}")
  endif()
  set(RG_${name}_VERSION "${_v}" PARENT_SCOPE)
endfunction()

# The cache options of such a library (RG_<NAME> AUTO/ON/OFF, what it is for; RG_<NAME>_ROOT)
# and its defaults before the search: RG_HAVE_<NAME> OFF, the summary line's text.
macro(rg_beside_cuda_option name what root_doc)
  set(RG_${name} AUTO CACHE STRING "${what}: AUTO, ON (required) or OFF")
  set(RG_${name}_ROOT "" CACHE PATH "${root_doc}")
  set_property(CACHE RG_${name} PROPERTY STRINGS AUTO ON OFF)
  rg_tristate(RG_${name})
  set(RG_HAVE_${name} OFF)
  set(RG_${name}_SUMMARY "not searched (no CUDA backend)")
endmacro()

# ---- NCCL ------------------------------------------------------------------------------
# Data-parallel training on GPUs (rg_dist_init on CUDA contexts) averages gradients with
# NCCL. It is looked for next to the CUDA toolkit, under RG_NCCL_ROOT (a cache variable)
# or the NCCL_ROOT / NCCL_HOME environment; found, RG_HAVE_NCCL is defined for the CUDA
# backend and libnccl is linked. Not found, a CUDA context of more than one rank gets
# RG_ERR_UNSUPPORTED from rg_dist_init with a message saying to install NCCL and rebuild.
# Linked rather than dlopen()ed: cudart and cuBLASLt are linked the same way, the build
# machine's toolkit is the one the program runs with, and a missing or mismatched library
# then fails at start with the loader's message instead of in the middle of a run.

rg_beside_cuda_option(NCCL "NCCL for multi-GPU training"
                      "Where NCCL is installed (include/nccl.h, lib/libnccl.so)")
if(RG_HAVE_CUDA AND RG_NCCL_MODE STREQUAL "OFF")
  set(RG_NCCL_SUMMARY "off (RG_NCCL=OFF) - one GPU per process, no multi-GPU training")
elseif(RG_HAVE_CUDA)
  rg_find_beside_cuda(NCCL nccl.h nccl PATCH)
  if(RG_NCCL_INCLUDE_DIR AND RG_NCCL_LIBRARY)
    set(RG_HAVE_NCCL ON)
    set(RG_NCCL_SUMMARY "found (NCCL ${RG_NCCL_VERSION}: ${RG_NCCL_LIBRARY}), multi-GPU training")
  elseif(RG_NCCL_MODE STREQUAL "ON")
    message(FATAL_ERROR "RG_NCCL=ON but NCCL (nccl.h and libnccl) was not found next to the "
            "CUDA toolkit: install it (Debian/Ubuntu: libnccl-dev) or point RG_NCCL_ROOT at "
            "it, or configure with -DRG_NCCL=AUTO or OFF.")
  else()
    set(RG_NCCL_SUMMARY "not found - multi-GPU training unsupported (install libnccl-dev "
                        "or set RG_NCCL_ROOT, then reconfigure)")
  endif()
endif()

# ---- cuDNN -----------------------------------------------------------------------------
# bf16 attention on CUDA runs cuDNN's fused flash attention (src/cuda/dnn_att.c, through
# cuDNN's backend C API) when cuDNN 9 is found next to the CUDA toolkit, under
# RG_CUDNN_ROOT, or CUDNN_ROOT / CUDNN_HOME: faster than resgrad's own kernels on Hopper
# at long sequences, which still run everything else (f32, F32 gradients, T < 512, D > 128
# or not a multiple of 8: src/cuda/attention_f32.cu, attention_mma.cu) and every context
# opened with rg_options.no_cudnn = 1 (env RG_CUDNN=0).

rg_beside_cuda_option(CUDNN "cuDNN fused attention"
                      "Where cuDNN 9 is installed (include/cudnn.h, lib/libcudnn.so)")
if(RG_HAVE_CUDA AND RG_CUDNN_MODE STREQUAL "OFF")
  set(RG_CUDNN_SUMMARY "off (RG_CUDNN=OFF) - resgrad's own attention kernels")
elseif(RG_HAVE_CUDA)
  rg_find_beside_cuda(CUDNN cudnn_version.h cudnn PATCHLEVEL)
  string(REGEX MATCH "^[0-9]+" _rg_cudnn_major "0${RG_CUDNN_VERSION}")
  if(RG_CUDNN_LIBRARY AND _rg_cudnn_major GREATER_EQUAL 9)
    set(RG_HAVE_CUDNN ON)
    set(RG_CUDNN_SUMMARY "found (cuDNN ${RG_CUDNN_VERSION}: ${RG_CUDNN_LIBRARY}), fused bf16 attention")
  elseif(RG_CUDNN_MODE STREQUAL "ON")
    message(FATAL_ERROR "RG_CUDNN=ON but cuDNN 9 (cudnn_version.h and libcudnn) was not found "
            "next to the CUDA toolkit: install it or point RG_CUDNN_ROOT at it, or configure "
            "with -DRG_CUDNN=AUTO or OFF.")
  elseif(RG_CUDNN_LIBRARY)
    set(RG_CUDNN_SUMMARY "cuDNN ${RG_CUDNN_VERSION} found, 9 needed - resgrad's own attention kernels")
  else()
    set(RG_CUDNN_SUMMARY "not found - resgrad's own attention kernels (install cuDNN 9 or "
                         "set RG_CUDNN_ROOT, then reconfigure)")
  endif()
endif()

