# cmake/kffiTorch.cmake: the kffi::torch target, for C++ programs that register kffi ops in torch's
# dispatcher (<kffi/torch.h>: kffi::torch::RegisterOps, CheckPackage) and serve models with
# libtorch (AOTInductor packages), with no Python at run time or at configure time.
#
#   find_package(Torch REQUIRED)   # CMAKE_PREFIX_PATH: torch.utils.cmake_prefix_path
#   find_package(kffi REQUIRED)    # kffi_DIR: kffi.libinfo.cmake_dir() (either order)
#   target_link_libraries(server PRIVATE kffi::torch)
#
# The target is kffi.torch's dispatcher glue (the very kernels kffi.torch registers in Python),
# which kffi built for each torch it was built with (cmake/torch_glue.cmake wrote one
# kffiTorchGlue-<major>.<minor>.cmake beside this file per torch). The glue matches one torch minor
# version: with Torch found first, its Torch_VERSION picks the glue; found after, the glue is that
# of the only torch kffi was built for, or of the torch package installed beside kffi (a wheel's
# site-packages). kffi::torch links `torch` when a target of that name exists when the build is
# generated, so either order works. Where no glue fits, kffi::torch is not defined, a warning says
# why and what to do, and find_package(kffi COMPONENTS torch) fails.
# Included by kffiConfig.cmake.
# SPDX-License-Identifier: Apache-2.0
if(TARGET kffi::torch)
  return()
endif()
set(_kffi_torch_glues "")
file(GLOB _kffi_torch_glue_files "${CMAKE_CURRENT_LIST_DIR}/kffiTorchGlue-*.cmake")
foreach(_f IN LISTS _kffi_torch_glue_files)
  include("${_f}")
endforeach()

# The torch minor version to serve, and where it came from (for messages).
set(_kffi_torch_want "")
set(_kffi_torch_why "")
if(DEFINED Torch_VERSION AND Torch_VERSION)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kffi_torch_want "${Torch_VERSION}")
  set(_kffi_torch_why "find_package(Torch) found torch ${Torch_VERSION}")
else()
  list(LENGTH _kffi_torch_glues _kffi_torch_n)
  # A wheel: torch's package beside kffi's, in the same site-packages.
  set(_kffi_torch_beside "${CMAKE_CURRENT_LIST_DIR}/../../../../torch/version.py")
  if(EXISTS "${_kffi_torch_beside}")
    file(STRINGS "${_kffi_torch_beside}" _kffi_torch_line REGEX "^__version__ *= *['\"]")
    if(_kffi_torch_line MATCHES "['\"]([0-9]+\\.[0-9]+)")
      set(_kffi_torch_want "${CMAKE_MATCH_1}")
      get_filename_component(_kffi_torch_beside "${_kffi_torch_beside}" DIRECTORY)
      set(_kffi_torch_why "the torch installed beside kffi (${_kffi_torch_beside}) is ${_kffi_torch_want}")
    endif()
  endif()
  if(NOT _kffi_torch_want AND _kffi_torch_n EQUAL 1)
    set(_kffi_torch_want "${_kffi_torch_glues}")
    set(_kffi_torch_why "kffi was built for torch ${_kffi_torch_want} alone")
  endif()
endif()

set(_kffi_torch_problem "")
if(NOT _kffi_torch_glues)
  set(_kffi_torch_problem "this kffi was built without kffi.torch's glue (no torch was found when it was built); install torch first, then build kffi again (pip install --no-build-isolation, or cmake -DKFFI_TORCH_ROOTS=<site-packages>/torch)")
elseif(NOT _kffi_torch_want)
  string(REPLACE ";" ", " _kffi_torch_list "${_kffi_torch_glues}")
  set(_kffi_torch_problem "this kffi has glue for several torch versions (${_kffi_torch_list}); call find_package(Torch) before find_package(kffi), so that its version picks one")
elseif(NOT _kffi_torch_want IN_LIST _kffi_torch_glues)
  string(REPLACE ";" ", " _kffi_torch_list "${_kffi_torch_glues}")
  set(_kffi_torch_problem "${_kffi_torch_why}, but this kffi has glue for torch ${_kffi_torch_list} only (the glue is C++ against one torch minor version); build kffi again with that torch installed")
endif()

if(_kffi_torch_problem)
  set(kffi_torch_FOUND FALSE)
  set(kffi_NOT_FOUND_MESSAGE "kffi::torch: ${_kffi_torch_problem}")
  if(NOT kffi_FIND_QUIETLY AND NOT "torch" IN_LIST kffi_FIND_COMPONENTS)
    message(WARNING "kffi::torch is not defined: ${_kffi_torch_problem}")
  endif()
else()
  string(REPLACE "." "_" _kffi_torch_id "${_kffi_torch_want}")
  set(_kffi_torch_lib "${_kffi_torch_glue_${_kffi_torch_id}_lib}")
  get_filename_component(_kffi_torch_lib "${_kffi_torch_lib}" ABSOLUTE)
  get_filename_component(_kffi_torch_inc "${_kffi_torch_glue_${_kffi_torch_id}_include}" ABSOLUTE)
  get_filename_component(_kffi_torch_dir "${_kffi_torch_lib}" DIRECTORY)
  # The glue has no SONAME: a program needs it by file name (-l:NAME, not by its path), found
  # through the rpath, so a deployed program finds it wherever it is put (or LD_LIBRARY_PATH).
  add_library(kffi::torch INTERFACE IMPORTED)
  set_target_properties(kffi::torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_kffi_torch_inc}"
    INTERFACE_LINK_DIRECTORIES "${_kffi_torch_dir}"
    INTERFACE_LINK_LIBRARIES "-l:libkffi_torch.so;kffi::kffi;$<TARGET_NAME_IF_EXISTS:torch>"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath,${_kffi_torch_dir}"
    INTERFACE_COMPILE_FEATURES cxx_std_20)  # torch's headers, as the glue is built
  set(kffi_TORCH_VERSION "${_kffi_torch_glue_${_kffi_torch_id}_version}")
  set(kffi_torch_FOUND TRUE)
  # Torch found after kffi: once the calling folder is read, its version must be the glue's.
  if(NOT DEFINED Torch_VERSION AND CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
    cmake_language(DEFER CALL _kffi_torch_check_version)
  endif()
endif()

# (Deferred arguments are expanded when the call runs, so the glue's version is read then too.)
function(_kffi_torch_check_version)
  if(DEFINED Torch_VERSION AND Torch_VERSION AND kffi_TORCH_VERSION)
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _found "${Torch_VERSION}")
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" glue "${kffi_TORCH_VERSION}")
    if(NOT _found STREQUAL glue)
      message(FATAL_ERROR "kffi::torch: find_package(Torch) found torch ${Torch_VERSION} after "
                          "find_package(kffi) chose kffi.torch's glue for torch ${glue}; the glue "
                          "is C++ against one torch minor version. Build kffi with this torch "
                          "installed, or find the torch kffi was built with.")
    endif()
  endif()
endfunction()

foreach(_v _kffi_torch_glues _kffi_torch_glue_files _kffi_torch_want _kffi_torch_why
        _kffi_torch_problem _kffi_torch_n _kffi_torch_beside _kffi_torch_line _kffi_torch_list
        _kffi_torch_id _kffi_torch_lib _kffi_torch_inc _kffi_torch_dir _f)
  unset(${_v})
endforeach()
