# cmake/kffiHelpers.cmake: kffi_add_library(), to build a kernel library from C++/CUDA sources.
# Installed beside kffiConfig.cmake (find_package(kffi) includes it) and used in-tree too.
# SPDX-License-Identifier: Apache-2.0

include_guard(GLOBAL)

# kffi_add_library(<name> [SHARED | STATIC | OBJECT] [PREFIX <p>] [OUTPUT_NAME <file name>]
#                  <sources...>)
#
# STATIC and OBJECT build the exports for static linking: the sources are compiled with
# KFFI_EXPORT_TO_SYSTEM_LIB (kffi/system_lib.h), so each KFFI_EXPORT / KFFI_EXPORT_CONTRACT
# registers itself in the system library when the program starts (Module::SystemLib(),
# kffi.system_lib()). Link an OBJECT library, or a STATIC one whole
# (target_link_libraries(app PRIVATE $<LINK_LIBRARY:WHOLE_ARCHIVE,name>)): an archive member
# that nothing refers to is left out by the linker, registration and all. PREFIX p_ names every
# export p_<name>, so that two libraries exporting the same name link into one program.
#
# Builds a kernel library that Module::Load (or Python's kffi.load_module) can open: a MODULE
# library by default (SHARED when it must also be linked against), C++17, hidden visibility so
# that only the KFFI_EXPORT symbols leave it, position independent, linked to kffi::kffi, and
# optimised (-O2) when the project sets no build type. A .cu
# source enables CUDA (C++17, hidden visibility, shared cudart so the library shares the CUDA
# runtime with the framework that calls it); set CMAKE_CUDA_ARCHITECTURES or the target's
# CUDA_ARCHITECTURES to choose the GPUs (else the compiler's default, or 75 with PTX).
# It is a macro so that enable_language(CUDA) runs in the caller's scope: call it at directory
# scope, or enable CUDA yourself before calling it from a function.
macro(kffi_add_library _kffi_name)
  set(_kffi_has_cuda FALSE)
  foreach(_kffi_arg ${ARGN})
    if(_kffi_arg MATCHES "\\.cu$")
      set(_kffi_has_cuda TRUE)
    endif()
  endforeach()
  if(_kffi_has_cuda)
    # Always, even when another directory enabled CUDA already: the language's rule variables
    # live in the scope that enabled it, and a repeated call costs nothing.
    enable_language(CUDA)
  endif()
  _kffi_add_library_impl(${_kffi_name} ${_kffi_has_cuda} ${ARGN})
  unset(_kffi_has_cuda)
  unset(_kffi_arg)
endmacro()

function(_kffi_add_library_impl name has_cuda)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "SHARED;STATIC;OBJECT" "OUTPUT_NAME;PREFIX" "")
  set(sources ${ARG_UNPARSED_ARGUMENTS})
  if(NOT sources)
    message(FATAL_ERROR "kffi_add_library(${name}): no sources given")
  endif()
  if(NOT TARGET kffi::kffi)
    message(FATAL_ERROR "kffi_add_library(${name}): target kffi::kffi is missing; call "
                        "find_package(kffi CONFIG REQUIRED) first")
  endif()
  set(kinds 0)
  foreach(kind SHARED STATIC OBJECT)
    if(ARG_${kind})
      math(EXPR kinds "${kinds} + 1")
      set(lib_kind ${kind})
    endif()
  endforeach()
  if(kinds GREATER 1)
    message(FATAL_ERROR "kffi_add_library(${name}): give one of SHARED, STATIC, OBJECT")
  elseif(kinds EQUAL 0)
    set(lib_kind MODULE)
  endif()
  if(ARG_PREFIX AND NOT ARG_PREFIX MATCHES "^[A-Za-z][A-Za-z0-9_]*$")
    message(FATAL_ERROR "kffi_add_library(${name}): PREFIX is a C identifier not starting with "
                        "'_', got '${ARG_PREFIX}'")
  endif()
  add_library(${name} ${lib_kind} ${sources})
  if(ARG_PREFIX)
    target_compile_definitions(${name} PRIVATE KFFI_EXPORT_PREFIX=${ARG_PREFIX})
  endif()
  set_target_properties(${name} PROPERTIES
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  if(ARG_OUTPUT_NAME)
    set_target_properties(${name} PROPERTIES OUTPUT_NAME ${ARG_OUTPUT_NAME})
  endif()
  if(lib_kind STREQUAL "STATIC" OR lib_kind STREQUAL "OBJECT")
    # The program that links the exports links the runtime they register in.
    target_compile_definitions(${name} PRIVATE KFFI_EXPORT_TO_SYSTEM_LIB=1)
    target_link_libraries(${name} PUBLIC kffi::kffi)
  else()
    target_link_libraries(${name} PRIVATE kffi::kffi)
  endif()
  # Kernels are for speed: a project configured without a build type (so CMake adds no -O flag)
  # still gets an optimised library. A build type, or the project's own flags, decide otherwise.
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX,CUDA>:-O2>)
  endif()
  if(has_cuda)
    set_target_properties(${name} PROPERTIES
      CUDA_STANDARD 17
      CUDA_STANDARD_REQUIRED ON
      CUDA_EXTENSIONS OFF
      CUDA_VISIBILITY_PRESET hidden
      CUDA_RUNTIME_LIBRARY Shared)
    # Normally initialised from CMAKE_CUDA_ARCHITECTURES (or the compiler's default); when CUDA
    # was first enabled with that variable set only in another directory, nothing is left to
    # inherit. 75 embeds sm_75 code and PTX, which newer GPUs compile at load time.
    get_target_property(archs ${name} CUDA_ARCHITECTURES)
    if(NOT archs)
      set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES 75)
    endif()
    # cuda.h's helpers are compiled into the library's own C++ sources too, which need the CUDA
    # headers on their include path.
    find_package(CUDAToolkit REQUIRED)
    if(lib_kind STREQUAL "STATIC" OR lib_kind STREQUAL "OBJECT")
      target_link_libraries(${name} PUBLIC CUDA::cudart)
    else()
      target_link_libraries(${name} PRIVATE CUDA::cudart)
    endif()
  endif()
endfunction()
