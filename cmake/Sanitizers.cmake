# Sanitizers.cmake - RG_SANITIZE (ASan + UBSan) and RG_TSAN (ThreadSanitizer) (included by
# CMakeLists.txt). The flags are directory-wide, so this runs before any target is made.
#
# Sets RG_SANITIZE_SUMMARY.

if(RG_SANITIZE AND RG_TSAN)
  message(FATAL_ERROR "RG_SANITIZE and RG_TSAN exclude each other (ASan and TSan cannot be "
          "combined): build them in two trees (make sanitize, make tsan)")
endif()
if(RG_SANITIZE)
  if(NOT _rg_gnu_like)
    message(FATAL_ERROR "RG_SANITIZE=ON needs GCC or Clang")
  endif()
  # Directory-wide so that every target, the tests included, is instrumented.
  # C only: nvcc does not take these (the CUDA host code is a thin launch layer).
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=address,undefined)
  set(RG_SANITIZE_SUMMARY "on (address, undefined; any report fails the run)")
elseif(RG_TSAN)
  if(NOT _rg_gnu_like)
    message(FATAL_ERROR "RG_TSAN=ON needs GCC or Clang")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-fsanitize=thread>
                      $<$<COMPILE_LANGUAGE:C>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=thread)
  set(RG_SANITIZE_SUMMARY "on (thread; any report fails the run)")
else()
  set(RG_SANITIZE_SUMMARY "off")
endif()
