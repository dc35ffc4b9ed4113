# tests/abi/check_add_library.cmake: kffi_add_library builds optimised when no build type is set,
# and leaves the choice to the build type when one is.
#
# Run as `cmake -DSOURCE=<this folder>/add_library_project -DHELPERS=.../kffiHelpers.cmake
#   -DINCLUDE=.../include -DWORK=<scratch dir> [-DGENERATOR=Ninja] -P check_add_library.cmake`.
# SPDX-License-Identifier: Apache-2.0
foreach(_var SOURCE HELPERS INCLUDE WORK)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check_add_library.cmake needs -D${_var}=...")
  endif()
endforeach()

function(configure_and_read build_type out_var)
  set(_dir "${WORK}/bt_${build_type}")
  file(REMOVE_RECURSE "${_dir}")
  set(_args -S "${SOURCE}" -B "${_dir}" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
            "-DKFFI_HELPERS=${HELPERS}" "-DKFFI_INCLUDE_DIR=${INCLUDE}")
  if(GENERATOR)
    list(APPEND _args -G "${GENERATOR}")
  endif()
  if(NOT build_type STREQUAL "none")
    list(APPEND _args "-DCMAKE_BUILD_TYPE=${build_type}")
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" ${_args} RESULT_VARIABLE _rc OUTPUT_QUIET
                  ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "configuring the kernel project (${build_type}) failed:\n${_err}")
  endif()
  file(READ "${_dir}/compile_commands.json" _commands)
  set(${out_var} "${_commands}" PARENT_SCOPE)
endfunction()

configure_and_read(none _none)
if(NOT _none MATCHES " -O2 ")
  message(FATAL_ERROR "without a build type, kffi_add_library must compile with -O2:\n${_none}")
endif()
configure_and_read(Debug _debug)
if(_debug MATCHES " -O2 ")
  message(FATAL_ERROR "a Debug build must keep its own flags (no -O2 added):\n${_debug}")
endif()
message(STATUS "kffi_add_library: -O2 without a build type, none added to Debug")
