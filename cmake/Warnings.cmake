# Warnings.cmake - the warning set and what every target of the project gets (included
# by CMakeLists.txt before any target is made).
#
# Sets RG_WARNING_FLAGS and _rg_gnu_like; defines rg_setup(target).

set(RG_WARNING_FLAGS -Wall -Wextra -Wpedantic)
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  # Messages are written with snprintf into fixed buffers (the context's error message,
  # its labels) and truncation there is the intended behaviour, which is exactly what
  # GCC's -Wformat-truncation flags.
  list(APPEND RG_WARNING_FLAGS -Wno-format-truncation)
endif()
if(RG_WERROR)
  list(APPEND RG_WARNING_FLAGS -Werror)
  # GCC's -Wmaybe-uninitialized depends on the optimisation level and inlining (a value
  # set through an out-parameter of a function in another file is "maybe" unset at -O3
  # but not at -O1), so it stays a warning rather than failing only some build types.
  if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
    list(APPEND RG_WARNING_FLAGS -Wno-error=maybe-uninitialized)
  endif()
endif()
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set(_rg_gnu_like ON)
else()
  set(_rg_gnu_like OFF)
  set(RG_WARNING_FLAGS "")
endif()

# What every target of this project gets: C11 (strict, so the code stays portable C;
# _DEFAULT_SOURCE restores the POSIX and <math.h> names glibc hides under -std=c11) and
# the warning set.
function(rg_setup target)
  set_target_properties(${target} PROPERTIES
    C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_compile_definitions(${target} PRIVATE _DEFAULT_SOURCE)
  target_compile_options(${target} PRIVATE ${RG_WARNING_FLAGS})
endfunction()
