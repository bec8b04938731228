# Programs.cmake - the programs of tools/ (installed), examples/ and bench/ (not
# installed), and the target rg_bench (included by CMakeLists.txt).
#
# Defines rg_program(src link out_var); sets RG_TOOLS.

# Each source file becomes one program named after it.
function(rg_program src link out_var)
  get_filename_component(_name "${src}" NAME_WE)
  add_executable(${_name} "${src}")
  rg_setup(${_name})
  target_link_libraries(${_name} PRIVATE ${link})
  if(RG_LIBM)
    target_link_libraries(${_name} PRIVATE m)
  endif()
  set(${out_var} ${_name} PARENT_SCOPE)
endfunction()

# tools/: installed; linked statically. A tools/<name>.c is the program <name>; a folder
# tools/<name>/ that holds .c files is the program <name> made of them (a folder without
# any, such as tools/bindgen, is not a program).
if(RG_BUILD_TOOLS)
  file(GLOB RG_TOOL_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tools/*.c")
  file(GLOB RG_TOOL_DIRS LIST_DIRECTORIES true "${PROJECT_SOURCE_DIR}/tools/*")
  set(RG_TOOLS "")
  foreach(_src ${RG_TOOL_SOURCES})
    rg_program("${_src}" resgrad_static _t)
    list(APPEND RG_TOOLS ${_t})
  endforeach()
  foreach(_dir ${RG_TOOL_DIRS})
    set(_srcs "")
    if(IS_DIRECTORY "${_dir}")
      file(GLOB _srcs CONFIGURE_DEPENDS "${_dir}/*.c")
    endif()
    if(_srcs)
      get_filename_component(_name "${_dir}" NAME)
      add_executable(${_name} ${_srcs})
      rg_setup(${_name})
      target_link_libraries(${_name} PRIVATE resgrad_static)
      if(RG_LIBM)
        target_link_libraries(${_name} PRIVATE m)
      endif()
      list(APPEND RG_TOOLS ${_name})
    endif()
  endforeach()
  if(RG_TOOLS)
    install(TARGETS ${RG_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endif()

if(RG_BUILD_EXAMPLES)
  # examples/: linked against the shared library, whose hidden visibility proves that an
  # example uses nothing but the public API.
  file(GLOB RG_EXAMPLE_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/examples/*.c")
  foreach(_src ${RG_EXAMPLE_SOURCES})
    rg_program("${_src}" resgrad _t)
  endforeach()

  # bench/: white-box allowed (static library, src/ on the include path).
  # `cmake --build build --target rg_bench` builds and runs them all, one after another.
  file(GLOB RG_BENCH_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/bench/*.c")
  set(_rg_bench_cmds "")
  set(_rg_benches "")
  foreach(_src ${RG_BENCH_SOURCES})
    rg_program("${_src}" resgrad_static _t)
    target_include_directories(${_t} PRIVATE ${PROJECT_SOURCE_DIR}/src)
    target_compile_definitions(${_t} PRIVATE ${RG_PRIVATE_DEFS})
    list(APPEND _rg_bench_cmds COMMAND $<TARGET_FILE:${_t}>)
    list(APPEND _rg_benches ${_t})
  endforeach()
  if(_rg_benches)
    add_custom_target(rg_bench ${_rg_bench_cmds}
      WORKING_DIRECTORY ${PROJECT_BINARY_DIR} USES_TERMINAL VERBATIM)
    add_dependencies(rg_bench ${_rg_benches})
  else()
    add_custom_target(rg_bench COMMAND ${CMAKE_COMMAND} -E echo "no benchmarks in bench/")
  endif()
endif()
