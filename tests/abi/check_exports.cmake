# tests/abi/check_exports.cmake: libkffi exports exactly the functions that c_api.h declares.
#
# Run as `cmake -DLIBRARY=... -DHEADER=... -DNM=... -P check_exports.cmake`. A declared function
# that is not exported breaks every client at link or load time; anything else exported (a C++
# symbol, a std:: template instantiation) can interpose another runtime's copy in the same
# process, which the design forbids ("hidden visibility for everything not in the C ABI").
# SPDX-License-Identifier: Apache-2.0
foreach(_var LIBRARY HEADER NM)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check_exports.cmake needs -D${_var}=...")
  endif()
endforeach()

# Declared: every `KFFI_DLL <type> <Name>(` line of the header.
file(STRINGS "${HEADER}" _decl_lines REGEX "^KFFI_DLL ")
set(_declared "")
foreach(_line IN LISTS _decl_lines)
  if(_line MATCHES "([A-Za-z_][A-Za-z0-9_]*)\\(")
    list(APPEND _declared "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(LENGTH _declared _num_declared)
if(_num_declared EQUAL 0)
  message(FATAL_ERROR "found no KFFI_DLL declarations in ${HEADER}")
endif()

# Exported: the dynamic symbol table's defined entries (third column of `nm -D --defined-only`).
execute_process(COMMAND "${NM}" -D --defined-only "${LIBRARY}"
                OUTPUT_VARIABLE _nm_out RESULT_VARIABLE _nm_rc ERROR_VARIABLE _nm_err)
if(NOT _nm_rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed: ${_nm_err}")
endif()
string(REPLACE "\n" ";" _nm_lines "${_nm_out}")
set(_exported "")
foreach(_line IN LISTS _nm_lines)
  if(_line MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([^ ]+)$")
    list(APPEND _exported "${CMAKE_MATCH_1}")
  endif()
endforeach()

set(_missing "")
foreach(_name IN LISTS _declared)
  if(NOT _name IN_LIST _exported)
    list(APPEND _missing "${_name}")
  endif()
endforeach()

# Linker-made markers are not code and cannot interpose anything.
set(_linker_symbols _init _fini _edata _end __bss_start)
set(_extra "")
foreach(_name IN LISTS _exported)
  if(NOT _name IN_LIST _declared AND NOT _name IN_LIST _linker_symbols)
    list(APPEND _extra "${_name}")
  endif()
endforeach()

list(LENGTH _exported _num_exported)
message(STATUS "c_api.h declares ${_num_declared} functions; ${LIBRARY} exports ${_num_exported} symbols")
set(_failed FALSE)
if(_missing)
  list(JOIN _missing "\n  " _text)
  message(SEND_ERROR "declared in c_api.h but not exported:\n  ${_text}")
  set(_failed TRUE)
endif()
if(_extra)
  list(JOIN _extra "\n  " _text)
  message(SEND_ERROR "exported but not part of the C ABI:\n  ${_text}")
  set(_failed TRUE)
endif()
if(NOT _failed)
  message(STATUS "abi exported_symbols: exactly the ${_num_declared} C API functions are exported")
endif()
