# Python.cmake - the Python package's extension module, python/ (included by
# CMakeLists.txt after the library and the tests).
#
# RG_PYTHON: AUTO (default) builds it when Python >= 3.11 with its headers is found, ON
# requires it, OFF skips it. The build tree's python/ then holds an importable package
# (PYTHONPATH=build/python) and, with RG_BUILD_TESTS, ctest runs python/tests with pytest.
# pip (pyproject.toml, scikit-build-core) builds the same target with RG_PYTHON=ON and
# installs it into the wheel.
set(RG_PYTHON AUTO CACHE STRING "Python extension module: AUTO, ON (required) or OFF")
set_property(CACHE RG_PYTHON PROPERTY STRINGS AUTO ON OFF)
rg_tristate(RG_PYTHON)

set(RG_HAVE_PYTHON OFF)
# A sanitizer's runtime must be loaded before everything else, which a module loaded into
# an uninstrumented python3 cannot be: AUTO leaves the module out of those builds.
if(RG_PYTHON_MODE STREQUAL "AUTO" AND (RG_SANITIZE OR RG_TSAN OR RG_FUZZ))
  set(RG_PYTHON_MODE OFF)
endif()
if(NOT RG_PYTHON_MODE STREQUAL "OFF")
  if(RG_PYTHON_MODE STREQUAL "ON")
    find_package(Python3 3.11 REQUIRED COMPONENTS Interpreter Development.Module)
  else()
    find_package(Python3 3.11 QUIET COMPONENTS Interpreter Development.Module)
  endif()
  if(Python3_FOUND)
    set(RG_HAVE_PYTHON ON)
    add_subdirectory("${PROJECT_SOURCE_DIR}/python" "${PROJECT_BINARY_DIR}/python-build")
  endif()
endif()
