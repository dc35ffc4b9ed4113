# tests/abi/check_foreign_dlpack.cmake: an incompatible dlpack.h included before kffi's headers
# stops the build at kffi/dlpack.h's version check, with a message that says what to do.
#
# Run as `cmake -DCXX=... -DSOURCE=.../foreign_dlpack.cc -DINCLUDE=.../include
#   -DFOREIGN=.../foreign_dlpack -P check_foreign_dlpack.cmake`.
# SPDX-License-Identifier: Apache-2.0
foreach(_var CXX SOURCE INCLUDE FOREIGN)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check_foreign_dlpack.cmake needs -D${_var}=...")
  endif()
endforeach()

# version folder -> a phrase the #error must contain
set(_cases
  "v0_8|older than DLPack 1.0"
  "v1_2|declares DLPack 1.0 to 1.2"
  "v2_0|another DLPack major version")
foreach(_case IN LISTS _cases)
  string(REPLACE "|" ";" _parts "${_case}")
  list(GET _parts 0 _dir)
  list(GET _parts 1 _expected)
  execute_process(
    COMMAND "${CXX}" -std=c++17 -fsyntax-only -I "${INCLUDE}"
            "-DFOREIGN_DLPACK_H=\"${FOREIGN}/${_dir}/dlpack.h\"" "${SOURCE}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(_rc EQUAL 0)
    message(FATAL_ERROR "${_dir}: kffi's headers compiled after an incompatible dlpack.h")
  endif()
  # The version check must be the first error, before any missing declaration is noticed.
  string(REGEX MATCH "error:[^\n]*" _first "${_err}")
  string(FIND "${_first}" "${_expected}" _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "${_dir}: expected a first error containing '${_expected}', got:\n${_err}")
  endif()
  message(STATUS "${_dir}: refused as expected")
endforeach()
