# Tests.cmake - the ctest tests: one per tests/test_*.c, and installed_runs (included by
# CMakeLists.txt).
#
# Uses rg_program (Programs.cmake); sets _rg_test_env, which Fuzz.cmake's corpus replays
# use too.

# Every tests/test_*.c is one program and one ctest test of the same name, linked against
# the static library with src/ on its include path (tests may use internal headers).
# Other tests/*.c files are helpers linked into every test. Exit code 77 means skipped
# (GPU tests on a machine without a GPU). NDEBUG is removed so assert() always checks.
# Each test runs in its own directory under build/tests/ so tests that write files do
# not collide when ctest runs them in parallel; RG_SOURCE_DIR points at the checkout.

if(RG_BUILD_TESTS)
  enable_testing()
  file(GLOB RG_TEST_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/test_*.c")
  file(GLOB RG_TEST_HELPERS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/*.c")
  if(RG_TEST_SOURCES)
    list(REMOVE_ITEM RG_TEST_HELPERS ${RG_TEST_SOURCES})
  endif()
  if(RG_TEST_HELPERS)
    add_library(rg_testutil STATIC ${RG_TEST_HELPERS})
    rg_setup(rg_testutil)
    target_link_libraries(rg_testutil PUBLIC resgrad_static)
    target_include_directories(rg_testutil PUBLIC
      ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(rg_testutil PUBLIC ${RG_PRIVATE_DEFS})
    target_compile_options(rg_testutil PRIVATE -UNDEBUG)
    set(_rg_test_link rg_testutil)
  else()
    set(_rg_test_link resgrad_static)
  endif()

  set(_rg_test_env "RG_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(RG_SANITIZE)
    list(APPEND _rg_test_env
      "ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  elseif(RG_TSAN)
    # Accesses made inside uninstrumented libraries (OpenBLAS's threads) are not seen.
    list(APPEND _rg_test_env
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1")
  endif()
  find_package(Threads REQUIRED) # tests may start threads (test_threads)

  foreach(_src ${RG_TEST_SOURCES})
    rg_program("${_src}" ${_rg_test_link} _t)
    target_link_libraries(${_t} PRIVATE Threads::Threads)
    target_include_directories(${_t} PRIVATE
      ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(${_t} PRIVATE ${RG_PRIVATE_DEFS})
    if(_rg_gnu_like)
      target_compile_options(${_t} PRIVATE -UNDEBUG)
    endif()
    set(_wd "${PROJECT_BINARY_DIR}/tests/${_t}")
    file(MAKE_DIRECTORY "${_wd}")
    add_test(NAME ${_t} COMMAND ${_t} WORKING_DIRECTORY "${_wd}")
    set_tests_properties(${_t} PROPERTIES
      SKIP_RETURN_CODE 77 TIMEOUT ${RG_TEST_TIMEOUT} ENVIRONMENT "${_rg_test_env}")
  endforeach()

  # The CPU kernels' row functions and GEMM kernels have one table per instruction set
  # (src/cpu/vec.h, gemm.h), chosen at run time: the CPU reference tests run once more
  # with each narrower table forced (a table the CPU lacks falls back to the best it has).
  foreach(_isa portable avx2)
    foreach(_t test_ops test_nn test_gemm)
      set(_wd "${PROJECT_BINARY_DIR}/tests/${_t}_${_isa}")
      file(MAKE_DIRECTORY "${_wd}")
      add_test(NAME ${_t}_${_isa} COMMAND ${_t} WORKING_DIRECTORY "${_wd}")
      set_tests_properties(${_t}_${_isa} PROPERTIES SKIP_RETURN_CODE 77
        TIMEOUT ${RG_TEST_TIMEOUT} ENVIRONMENT "${_rg_test_env};RG_CPU_ISA=${_isa}")
    endforeach()
  endforeach()
endif()

# The installed programs run with an empty LD_LIBRARY_PATH (their install RPATH): the
# build is installed into the test's directory, resgrad-train trains two steps there and
# resgrad-generate continues a prompt with the Hugging Face fixture.
if(RG_BUILD_TESTS AND RG_BUILD_TOOLS)
  set(_wd "${PROJECT_BINARY_DIR}/tests/installed_runs")
  file(MAKE_DIRECTORY "${_wd}")
  add_test(NAME installed_runs WORKING_DIRECTORY "${_wd}" COMMAND sh -c
    "rm -rf prefix && '${CMAKE_COMMAND}' --install '${PROJECT_BINARY_DIR}' --prefix \"$PWD/prefix\" >/dev/null && env LD_LIBRARY_PATH= prefix/${CMAKE_INSTALL_BINDIR}/resgrad-train --device cpu --steps 2 --eval 8 --layers 1 --width 16 --heads 2 && env LD_LIBRARY_PATH= prefix/${CMAKE_INSTALL_BINDIR}/resgrad-generate --device cpu --quiet --model '${PROJECT_SOURCE_DIR}/tests/data/hf_gpt2_tiny' --tokens 3,14 --max-new 4")
  set_tests_properties(installed_runs PROPERTIES
    TIMEOUT ${RG_TEST_TIMEOUT} ENVIRONMENT "${_rg_test_env}")
endif()
