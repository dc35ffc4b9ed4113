# cmake/jax_handler.cmake: libkffi_jax_handler, the XLA FFI handler of kffi.jax, built with the
# Python package. Included by python/CMakeLists.txt.
#
# The handler is written against python/kffi/jax/_xla_ffi.h (kffi's own declaration of XLA's FFI
# C API) and settles the API version with XLA at run time, so it needs no jaxlib to build and one
# binary serves every supported jaxlib: nothing of kffi.jax is compiled where it runs. It is a kffi
# module (kffi.jax._glue opens it with kffi.load_module; its KFFI_EXPORT functions are the only
# symbols it exports, hidden visibility being the project default) and links the shared runtime,
# found from the wheel's kffi/jax/lib through the rpath.
# SPDX-License-Identifier: Apache-2.0
set(_kffi_jax_dir "${PROJECT_SOURCE_DIR}/python/kffi/jax")
add_library(kffi_jax_handler SHARED "${_kffi_jax_dir}/_xla_handler.cc"
                                    "${_kffi_jax_dir}/_xla_alloc.cc"
                                    "${_kffi_jax_dir}/_xla_targets.cc")
target_link_libraries(kffi_jax_handler PRIVATE kffi_shared)
set_target_properties(kffi_jax_handler PROPERTIES
  OUTPUT_NAME kffi_jax_handler
  CXX_STANDARD 17
  CXX_STANDARD_REQUIRED ON
  # Installed in kffi/jax/lib, two levels below kffi/lib where libkffi lives; in the build tree,
  # libkffi's own folder.
  INSTALL_RPATH "$ORIGIN/../../lib"
  BUILD_RPATH "$<TARGET_FILE_DIR:kffi_shared>")
kffi_strict_warnings(kffi_jax_handler)
if(SKBUILD)
  install(TARGETS kffi_jax_handler LIBRARY DESTINATION kffi/jax/lib)
endif()
unset(_kffi_jax_dir)
