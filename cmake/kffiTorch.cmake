# cmake/kffiTorch.cmake: the kffi::torch target, for C++ programs that register kffi ops in torch's
# dispatcher (<kffi/torch.h>: kffi::torch::RegisterOps, CheckPackage) and serve models with
# libtorch (AOTInductor packages), with no Python at run time.
#
#   find_package(Torch REQUIRED)   # CMAKE_PREFIX_PATH: torch.utils.cmake_prefix_path
#   find_package(kffi REQUIRED)    # CMAKE_PREFIX_PATH: kffi.libinfo.cmake_dir()
#   target_link_libraries(server PRIVATE kffi::torch)
#
# The target is the dispatcher glue library of kffi.torch (the very kernels kffi.torch registers
# in Python), which kffi builds against the installed torch's headers on first use; configuring
# asks the Python that has kffi and torch for it (`python -m kffi.torch --cmake-info`, which
# builds it when needed): Python3_EXECUTABLE, else the first python3 found. Included by
# kffiConfig.cmake once a `torch` target exists (find_package(Torch) first).
# SPDX-License-Identifier: Apache-2.0
if(TARGET kffi::torch)
  return()
endif()
if(NOT Python3_EXECUTABLE)
  find_package(Python3 COMPONENTS Interpreter QUIET)
endif()
if(NOT Python3_EXECUTABLE)
  message(WARNING "kffi::torch: no Python found to locate kffi.torch's dispatcher glue; set "
                  "Python3_EXECUTABLE to the Python that has kffi and torch")
  return()
endif()
execute_process(COMMAND "${Python3_EXECUTABLE}" -m kffi.torch --cmake-info
                OUTPUT_VARIABLE _kffi_torch_info ERROR_VARIABLE _kffi_torch_error
                RESULT_VARIABLE _kffi_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _kffi_torch_rc EQUAL 0)
  message(WARNING "kffi::torch: `${Python3_EXECUTABLE} -m kffi.torch --cmake-info` failed "
                  "(kffi and torch installed there?): ${_kffi_torch_error}")
  return()
endif()
# Two lines: the folder of <kffi/torch.h>, and the glue library.
string(REPLACE "\n" ";" _kffi_torch_info "${_kffi_torch_info}")
list(GET _kffi_torch_info 0 _kffi_torch_include)
list(GET _kffi_torch_info 1 _kffi_torch_glue)
get_filename_component(_kffi_torch_glue_dir "${_kffi_torch_glue}" DIRECTORY)
get_filename_component(_kffi_torch_glue_name "${_kffi_torch_glue}" NAME)
# The glue has no SONAME: a program needs it by file name (-l:NAME, not by its path), found
# through the rpath, so a deployed program finds it wherever it is put (or LD_LIBRARY_PATH).
add_library(kffi::torch INTERFACE IMPORTED)
set_target_properties(kffi::torch PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_kffi_torch_include}"
  INTERFACE_LINK_DIRECTORIES "${_kffi_torch_glue_dir}"
  INTERFACE_LINK_LIBRARIES "-l:${_kffi_torch_glue_name};kffi::kffi;torch"
  INTERFACE_LINK_OPTIONS "LINKER:-rpath,${_kffi_torch_glue_dir}"
  INTERFACE_COMPILE_FEATURES cxx_std_20)  # torch's headers, as the glue is built
unset(_kffi_torch_info)
unset(_kffi_torch_error)
unset(_kffi_torch_rc)
unset(_kffi_torch_include)
unset(_kffi_torch_glue)
unset(_kffi_torch_glue_name)
unset(_kffi_torch_glue_dir)
