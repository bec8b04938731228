# Fuzz.cmake - the fuzzers of tests/fuzz/: their corpus replays as ctest tests, and with
# RG_FUZZ the libFuzzer programs (included by CMakeLists.txt, after Tests.cmake).
#
# Every tests/fuzz/fuzz_<name>.c defines LLVMFuzzerTestOneInput and has a seed corpus in
# tests/fuzz/corpus/<name>/. In every build with tests it is linked with
# tests/fuzz/replay.c into the plain program fuzz_<name>_replay, and the ctest
# fuzz_<name>_corpus replays the corpus (so `make test` and `make sanitize` run it, the
# latter under ASan + UBSan). With RG_FUZZ=ON (Clang only) it is also built as the
# libFuzzer program fuzz_<name>, with ASan + UBSan, against resgrad_fuzz: the library
# again, instrumented for coverage and sanitized (`make fuzz` runs them).

file(GLOB RG_FUZZ_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_*.c")
set(_rg_fuzz_replay "${PROJECT_SOURCE_DIR}/tests/fuzz/replay.c")

if(RG_BUILD_TESTS)
  foreach(_src ${RG_FUZZ_SOURCES})
    get_filename_component(_fz "${_src}" NAME_WE)
    string(REGEX REPLACE "^fuzz_" "" _fzname "${_fz}")
    add_executable(${_fz}_replay "${_src}" "${_rg_fuzz_replay}")
    rg_setup(${_fz}_replay)
    target_link_libraries(${_fz}_replay PRIVATE resgrad_static)
    if(RG_LIBM)
      target_link_libraries(${_fz}_replay PRIVATE m)
    endif()
    target_include_directories(${_fz}_replay PRIVATE
      ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(${_fz}_replay PRIVATE ${RG_PRIVATE_DEFS})
    if(_rg_gnu_like)
      target_compile_options(${_fz}_replay PRIVATE -UNDEBUG)
    endif()
    set(_wd "${PROJECT_BINARY_DIR}/tests/${_fz}_corpus")
    file(MAKE_DIRECTORY "${_wd}")
    add_test(NAME ${_fz}_corpus
      COMMAND ${_fz}_replay "${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${_fzname}"
      WORKING_DIRECTORY "${_wd}")
    set_tests_properties(${_fz}_corpus PROPERTIES
      TIMEOUT ${RG_TEST_TIMEOUT} ENVIRONMENT "${_rg_test_env}")
  endforeach()
endif()

if(RG_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "RG_FUZZ=ON needs Clang (libFuzzer): configure with CC=clang")
  endif()
  set(_rg_fuzzers "")
  set(_rg_fuzz_flags -fsanitize=address,undefined -fno-sanitize-recover=all
                     -fno-omit-frame-pointer -g)
  # The CPU library only (a fuzzer opens CPU contexts) and the tokenizer; the stub stands
  # in for CUDA.
  file(GLOB _rg_fuzz_lib_sources CONFIGURE_DEPENDS
    "${PROJECT_SOURCE_DIR}/src/core/*.c" "${PROJECT_SOURCE_DIR}/src/cpu/*.c"
    "${PROJECT_SOURCE_DIR}/src/nn/*.c" "${PROJECT_SOURCE_DIR}/src/text/*.c")
  add_library(resgrad_fuzz STATIC ${_rg_fuzz_lib_sources}
              "${PROJECT_SOURCE_DIR}/src/cuda/stub.c")
  rg_setup(resgrad_fuzz)
  target_include_directories(resgrad_fuzz
    PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(resgrad_fuzz PRIVATE ${RG_PRIVATE_DEFS})
  # Warnings are enforced by the regular build; here they would only stop the fuzzing.
  target_compile_options(resgrad_fuzz PRIVATE -fsanitize=fuzzer-no-link ${_rg_fuzz_flags}
                         -Wno-error)
  if(RG_HAVE_CBLAS)
    target_include_directories(resgrad_fuzz PRIVATE ${RG_CBLAS_INCLUDE_DIR})
    target_link_libraries(resgrad_fuzz PUBLIC ${RG_BLAS_LIBS})
  endif()
  if(RG_HAVE_OPENMP)
    target_link_libraries(resgrad_fuzz PUBLIC OpenMP::OpenMP_C)
  endif()
  if(RG_LIBM)
    target_link_libraries(resgrad_fuzz PUBLIC m)
  endif()
  foreach(_src ${RG_FUZZ_SOURCES})
    get_filename_component(_fz "${_src}" NAME_WE)
    add_executable(${_fz} "${_src}")
    rg_setup(${_fz})
    target_include_directories(${_fz} PRIVATE
      ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(${_fz} PRIVATE ${RG_PRIVATE_DEFS})
    target_compile_options(${_fz} PRIVATE -fsanitize=fuzzer ${_rg_fuzz_flags} -UNDEBUG)
    target_link_options(${_fz} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${_fz} PRIVATE resgrad_fuzz)
    list(APPEND _rg_fuzzers ${_fz})
  endforeach()
  # `cmake --build <dir> --target rg_fuzzers` builds them all (make fuzz).
  add_custom_target(rg_fuzzers)
  if(_rg_fuzzers)
    add_dependencies(rg_fuzzers ${_rg_fuzzers})
  endif()
endif()
