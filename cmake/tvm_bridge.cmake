# cmake/tvm_bridge.cmake: libkffi_tvm, the bridge that runs libraries built for the TVM-FFI ABI
# (docs/tvm_ffi.md). Included by the top-level CMakeLists.txt after kffi_shared exists.
#
# libkffi opens it at run time from its own directory, so it is built into (and installed in)
# the same directory as libkffi. It links the shared runtime (one runtime per process) and
# exports only the TVM-FFI functions and its KFFITvm* entry points. Its code never calls a TVMFFI*
# function by name (so nothing it does can be interposed by a global libtvm_ffi), and it is not
# linked -Bsymbolic: that would put it first in its own lookups, and the bridge finds out which
# runtime a library bound to by looking symbols up the way the library did.
# SPDX-License-Identifier: Apache-2.0
file(GLOB KFFI_TVM_BRIDGE_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/tvm_bridge/*.cc")
# The ELF reader and the code check are libkffi's internals, compiled in here too: the bridge reads
# a runtime's file before it opens it, and calls only code (src/core/code_symbol.h).
add_library(kffi_tvm SHARED ${KFFI_TVM_BRIDGE_SOURCES}
                            "${PROJECT_SOURCE_DIR}/src/module/module_elf.cc"
                            "${PROJECT_SOURCE_DIR}/src/core/code_symbol.cc")
target_include_directories(kffi_tvm PRIVATE "${PROJECT_SOURCE_DIR}/src")
if(CMAKE_LIBRARY_OUTPUT_DIRECTORY)
  set(_kffi_tvm_dir "${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
else()
  set(_kffi_tvm_dir "${PROJECT_BINARY_DIR}")
endif()
set_target_properties(kffi_tvm PROPERTIES
  OUTPUT_NAME kffi_tvm
  LIBRARY_OUTPUT_DIRECTORY "${_kffi_tvm_dir}"
  BUILD_RPATH "$ORIGIN"
  INSTALL_RPATH "$ORIGIN")
target_link_libraries(kffi_tvm PRIVATE kffi_shared ${CMAKE_DL_LIBS} Threads::Threads)
target_compile_definitions(kffi_tvm PRIVATE KFFI_BUILDING_TVM_BRIDGE=1)
target_link_options(kffi_tvm PRIVATE
  "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/kffi_tvm.map")
kffi_strict_warnings(kffi_tvm)
install(TARGETS kffi_tvm
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
unset(_kffi_tvm_dir)
