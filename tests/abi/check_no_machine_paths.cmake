# tests/abi/check_no_machine_paths.cmake: sources name no absolute path of one machine.
#
# Run as `cmake -DROOT=<repository> -P check_no_machine_paths.cmake`. Tests, scripts, sources and
# docs must work from any checkout, so a home, root or workspace folder named in one is a bug.
# SPDX-License-Identifier: Apache-2.0
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "check_no_machine_paths.cmake needs -DROOT=...")
endif()
set(_found "")
foreach(_dir tests scripts src include python examples bench docs cmake)
  file(GLOB_RECURSE _files LIST_DIRECTORIES false "${ROOT}/${_dir}/*")
  foreach(_file IN LISTS _files)
    if(_file MATCHES "/__pycache__/|\\.(pyc|so|o|png|jpg)$")
      continue()
    endif()
    file(STRINGS "${_file}" _hits REGEX "(^|[^A-Za-z0-9_.])/(home|root|work|Users)/[A-Za-z0-9_]")
    foreach(_hit IN LISTS _hits)
      file(RELATIVE_PATH _rel "${ROOT}" "${_file}")
      string(APPEND _found "\n  ${_rel}: ${_hit}")
    endforeach()
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "absolute paths of one machine:${_found}")
endif()
