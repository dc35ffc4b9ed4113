# tests/abi/check_abi_record.cmake: the ABI version record comes with the export macros only.
#
# Run as `cmake -DLIBRARY=... -DPROGRAM=... -DNM=... -P check_abi_record.cmake`. LIBRARY (a kernel
# library with several exports, possibly from several translation units) must export
# `__kffi__abi_version` exactly once; PROGRAM (which includes <kffi/kffi.h> but exports nothing)
# must not define it at all.
# SPDX-License-Identifier: Apache-2.0
foreach(_var LIBRARY PROGRAM NM)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check_abi_record.cmake needs -D${_var}=...")
  endif()
endforeach()

execute_process(COMMAND "${NM}" -D --defined-only "${LIBRARY}"
                OUTPUT_VARIABLE _lib RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed: ${_err}")
endif()
string(REGEX MATCHALL "[^\n]* __kffi__abi_version\n" _records "${_lib}\n")
list(LENGTH _records _count)
if(NOT _count EQUAL 1)
  message(FATAL_ERROR "${LIBRARY} exports __kffi__abi_version ${_count} times (expected once):\n"
                      "${_records}")
endif()

execute_process(COMMAND "${NM}" "${PROGRAM}"
                OUTPUT_VARIABLE _prog RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${NM} ${PROGRAM} failed: ${_err}")
endif()
if(_prog MATCHES "__kffi__abi_version")
  message(FATAL_ERROR "${PROGRAM} only loads modules but carries __kffi__abi_version")
endif()
message(STATUS "one ABI version record in the library, none in the loading program")
