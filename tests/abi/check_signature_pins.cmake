# tests/abi/check_signature_pins.cmake: every function c_api.h exports has a pinned signature.
#
# Run as `cmake -DHEADER=.../c_api.h -DPINS=.../layout_freeze.cc -P check_signature_pins.cmake`.
# The compiler checks each KFFI_ABI_SIGNATURE line, but only the lines that exist: a function
# added to the header without one would go unpinned, so this keeps the list complete.
# SPDX-License-Identifier: Apache-2.0
foreach(_var HEADER PINS)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check_signature_pins.cmake needs -D${_var}=...")
  endif()
endforeach()

file(STRINGS "${HEADER}" _decl_lines REGEX "^KFFI_DLL ")
file(READ "${PINS}" _pins)
set(_declared 0)
set(_unpinned "")
foreach(_line IN LISTS _decl_lines)
  if(_line MATCHES "([A-Za-z_][A-Za-z0-9_]*)\\(")
    math(EXPR _declared "${_declared} + 1")
    string(FIND "${_pins}" "KFFI_ABI_SIGNATURE(${CMAKE_MATCH_1}," _at)
    if(_at EQUAL -1)
      list(APPEND _unpinned "${CMAKE_MATCH_1}")
    endif()
  endif()
endforeach()

if(_declared EQUAL 0)
  message(FATAL_ERROR "found no KFFI_DLL declarations in ${HEADER}")
endif()
if(_unpinned)
  list(JOIN _unpinned "\n  " _text)
  message(FATAL_ERROR "declared in c_api.h without a KFFI_ABI_SIGNATURE pin in ${PINS}:\n  ${_text}")
endif()
message(STATUS "abi signatures_complete: all ${_declared} C API functions have a pinned signature")
