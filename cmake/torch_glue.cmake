# cmake/torch_glue.cmake: kffi.torch's native glue, built with kffi against an installed torch, so
# that nothing of kffi's is compiled when a program runs (docs/torch.md, "Setup").
#
# The glue is C++ against torch's C++ API, whose ABI changes with every torch minor version, so it
# is built per torch version: one folder torch-<major>.<minor> per torch package given, holding
#   libkffi_torch.so         the dispatcher glue: the boxed kernels of kffi ops, their
#                            registration from Python and from C++ (<kffi/torch.h>: RegisterOps,
#                            CheckPackage), Meta kernels from contracts (python/kffi/torch/*.cc)
#   kffi_torch_eager.<SOABI>.so  (Python builds) the eager gate of kffi ops and the torch.Tensor
#                            reader of every kffi call (_eager.cc, _import.cc), a CPython extension
#   glue.json                what it was built against (torch's version, Python's SOABI), which
#                            kffi.torch checks before it loads anything from the folder
# and a CMake file kffiTorchGlue-<major>.<minor>.cmake beside kffiConfig.cmake, through which
# find_package(kffi) gives the target kffi::torch (cmake/kffiTorch.cmake).
#
# Which torch: KFFI_TORCH_ROOTS, a list of torch package folders (site-packages/torch); else the
# torch of Torch_DIR (<torch>/share/cmake/Torch); else, in a Python build, the torch the build's
# Python (Python_EXECUTABLE) would import. torch's own CMake package is not used: it looks for a
# CUDA toolkit, and the glue needs none (it reaches CUDA streams through c10's device interface).
# The torch package is read, not imported: its version from torch/version.py.
# Included by the top-level CMakeLists.txt after kffi_shared exists (and the Python package's
# CMake code, for the extension).
# SPDX-License-Identifier: Apache-2.0

option(KFFI_BUILD_TORCH_GLUE "Build kffi.torch's glue for the torch packages found" ON)
set(KFFI_TORCH_ROOTS "" CACHE STRING
    "torch package folders to build kffi.torch's glue for (default: Torch_DIR's, or the Python's)")

set(_kffi_torch_dir "${PROJECT_SOURCE_DIR}/python/kffi/torch")
set(KFFI_TORCH_GLUE_SOURCES "${_kffi_torch_dir}/_dispatch.cc" "${_kffi_torch_dir}/_call_env.cc"
    "${_kffi_torch_dir}/_register.cc" "${_kffi_torch_dir}/_pytext.cc"
    "${_kffi_torch_dir}/_signature.cc" "${_kffi_torch_dir}/_meta.cc")
set(KFFI_TORCH_EAGER_SOURCES "${_kffi_torch_dir}/_eager.cc" "${_kffi_torch_dir}/_import.cc")
# Where the glue is installed, per torch version: inside the package in a wheel, else under the
# library folder.
if(SKBUILD)
  set(KFFI_TORCH_GLUE_INSTALL_DIR "kffi/torch/lib")
else()
  set(KFFI_TORCH_GLUE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/kffi_torch")
endif()
set(KFFI_TORCH_GLUE_VERSIONS "")

# kffi_torch_root_version(<root> <out_version>): torch's version string (2.13.0+cpu) from
# <root>/version.py; empty when the folder is no torch package with headers and libraries.
function(kffi_torch_root_version root out)
  set(${out} "" PARENT_SCOPE)
  if(NOT EXISTS "${root}/version.py" OR NOT EXISTS "${root}/include/torch/library.h"
     OR NOT EXISTS "${root}/lib/libc10.so" OR NOT EXISTS "${root}/lib/libtorch_cpu.so")
    return()
  endif()
  file(STRINGS "${root}/version.py" _line REGEX "^__version__ *= *['\"]")
  if(_line MATCHES "['\"]([0-9]+\\.[0-9]+[^'\"]*)['\"]")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  endif()
endfunction()

# kffi_torch_libstdcxx(<root> <out>): the shared libstdc++ that torch's libc10.so runs with, as
# the loader finds it: asked of the build's Python (which loads libc10.so, without importing
# torch, and reads its own memory map), else of ldd; empty when neither says. The glue passes C++
# objects to and from libtorch (strings, streams, c10 errors), so it must use that very libstdc++.
# A toolchain whose library folder holds only libstdc++.a (a GCC in /opt named by CXX) would link
# a private copy instead, whose streams then crash on the shared one's locale state the first time
# a torch error message formats a number. Linking the shared object by path binds every libstdc++
# symbol to it first; kffi.torch's fallback build does the same (_glue._torch_ldflags).
function(kffi_torch_libstdcxx root out)
  set(_path "")
  if(Python_EXECUTABLE)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
              "import ctypes, os, sys\nctypes.CDLL(sys.argv[1])\nfor line in open('/proc/self/maps'):\n    p = line.split(maxsplit=5)[-1].strip()\n    if os.path.basename(p).startswith('libstdc++.so'):\n        print(p)\n        break"
              "${root}/lib/libc10.so"
      OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(NOT _path)
    find_program(KFFI_LDD ldd)
    if(KFFI_LDD)
      execute_process(COMMAND "${KFFI_LDD}" "${root}/lib/libc10.so" OUTPUT_VARIABLE _ldd
                      ERROR_QUIET)
      if(_ldd MATCHES "libstdc\\+\\+\\.so[^ \t]* => ([^ \t\n]+)")
        set(_path "${CMAKE_MATCH_1}")
      endif()
    endif()
  endif()
  if(_path AND EXISTS "${_path}")
    set(${out} "${_path}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# The torch packages to build for.
set(_kffi_roots ${KFFI_TORCH_ROOTS})
if(NOT _kffi_roots AND Torch_DIR)
  get_filename_component(_root "${Torch_DIR}/../../.." ABSOLUTE)
  list(APPEND _kffi_roots "${_root}")
endif()
if(NOT _kffi_roots AND KFFI_BUILD_PYTHON AND Python_EXECUTABLE)
  # Found, not imported: importing torch takes seconds and may touch a GPU.
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
            "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
    OUTPUT_VARIABLE _root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_root)
    list(APPEND _kffi_roots "${_root}")
  endif()
endif()

if(NOT KFFI_BUILD_TORCH_GLUE)
  set(_kffi_roots "")
endif()

# kffi_add_torch_glue(<root>): the glue for the torch package at <root>.
function(kffi_add_torch_glue root)
  kffi_torch_root_version("${root}" _version)
  if(NOT _version)
    message(WARNING "kffi.torch: ${root} is no torch package with C++ headers and libraries; "
                    "no glue built for it")
    return()
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _mm "${_version}")
  if(_mm IN_LIST KFFI_TORCH_GLUE_VERSIONS)
    message(WARNING "kffi.torch: a second torch ${_mm} (${root}); its glue is built once")
    return()
  endif()
  set(_tag "torch-${_mm}")
  string(REPLACE "." "_" _id "${_mm}")
  set(_out "${PROJECT_BINARY_DIR}/torch_glue/${_tag}")
  set(_includes "${root}/include" "${root}/include/torch/csrc/api/include")
  set(_torch_libs "${root}/lib/libc10.so" "${root}/lib/libtorch_cpu.so")
  # A cross build cannot ask (the target's libraries do not load here); its compiler's own
  # libstdc++ is the target's shared one, which torch's libraries run with there too.
  set(_libstdcxx "")
  if(NOT CMAKE_CROSSCOMPILING)
    kffi_torch_libstdcxx("${root}" _libstdcxx)
  endif()
  if(_libstdcxx)
    list(PREPEND _torch_libs "${_libstdcxx}")
  elseif(NOT CMAKE_CROSSCOMPILING)
    message(WARNING "kffi.torch: cannot tell which libstdc++ ${root}/lib/libc10.so runs with; "
                    "the glue links the compiler's own")
  endif()
  # torch's headers need C++20; its own build turns its debug-only internal asserts off, which
  # otherwise keep c10's inline helpers as calls on every op call.
  set(_defs NDEBUG)
  # -O2, what the call path was tuned with (-O3 only makes the gate and reader larger).
  set(_opts -O2)
  set(_install_dir "${KFFI_TORCH_GLUE_INSTALL_DIR}/${_tag}")
  # From the glue's folder: libkffi in the package's lib folder, torch's libraries beside kffi in
  # site-packages. (A process that imported torch has them loaded already; a C++ program links
  # them itself.)
  file(RELATIVE_PATH _to_kffi_lib "/p/${_install_dir}" "/p/${CMAKE_INSTALL_LIBDIR}")
  set(_rpath "$ORIGIN/${_to_kffi_lib}")
  if(SKBUILD)
    list(APPEND _rpath "$ORIGIN/../../../../torch/lib")
  endif()

  # What both libraries of a torch version share: C++20, torch's headers (as system headers: its
  # warnings are not ours), its libraries, the folder and the run path.
  macro(_kffi_torch_target target name)
    set_target_properties(${target} PROPERTIES
      OUTPUT_NAME ${name}
      LIBRARY_OUTPUT_DIRECTORY "${_out}"
      CXX_STANDARD 20
      INSTALL_RPATH "${_rpath}")
    target_include_directories(${target} SYSTEM PRIVATE ${_includes})
    target_compile_definitions(${target} PRIVATE ${_defs})
    target_compile_options(${target} PRIVATE ${_opts})
    target_link_libraries(${target} PRIVATE ${_torch_libs})
    kffi_strict_warnings(${target})
    install(TARGETS ${target} LIBRARY DESTINATION "${_install_dir}")
  endmacro()

  add_library(kffi_torch_${_id} SHARED ${KFFI_TORCH_GLUE_SOURCES})
  _kffi_torch_target(kffi_torch_${_id} kffi_torch)
  target_include_directories(kffi_torch_${_id} PRIVATE "${_kffi_torch_dir}/include")
  target_link_libraries(kffi_torch_${_id} PRIVATE kffi_shared)

  set(_stamp_python "")
  if(KFFI_BUILD_PYTHON)
    kffi_python_module(kffi_torch_eager_${_id} ${KFFI_TORCH_EAGER_SOURCES})
    _kffi_torch_target(kffi_torch_eager_${_id} kffi_torch_eager)
    target_include_directories(kffi_torch_eager_${_id} PRIVATE "${PROJECT_SOURCE_DIR}/include")
    # Python's own headers trip -Wextra's missing-field-initializers in PyType slots.
    target_compile_options(kffi_torch_eager_${_id} PRIVATE -Wno-missing-field-initializers)
    set(_stamp_python "${KFFI_PYTHON_SOABI}")
  endif()

  # What kffi.torch checks before loading from the folder.
  file(WRITE "${_out}/glue.json"
       "{\"torch\": \"${_version}\", \"python_soabi\": \"${_stamp_python}\", "
       "\"kffi\": \"${PROJECT_VERSION}\"}\n")
  install(FILES "${_out}/glue.json" DESTINATION "${_install_dir}")

  # The CMake package's part (cmake/kffiTorch.cmake reads it): build tree and install tree.
  foreach(_where build install)
    if(_where STREQUAL "build")
      set(_dir "${PROJECT_BINARY_DIR}/lib/cmake/kffi")
      file(RELATIVE_PATH _lib "${_dir}" "${_out}/libkffi_torch.so")
      file(RELATIVE_PATH _inc "${_dir}" "${_kffi_torch_dir}/include")
    else()
      set(_dir "${PROJECT_BINARY_DIR}/cmake/install-tree/${KFFI_INSTALL_CMAKEDIR}")
      file(RELATIVE_PATH _lib "/p/${KFFI_INSTALL_CMAKEDIR}" "/p/${_install_dir}/libkffi_torch.so")
      if(SKBUILD)
        file(RELATIVE_PATH _inc "/p/${KFFI_INSTALL_CMAKEDIR}" "/p/kffi/torch/include")
      else()
        file(RELATIVE_PATH _inc "/p/${KFFI_INSTALL_CMAKEDIR}" "/p/${CMAKE_INSTALL_INCLUDEDIR}")
      endif()
    endif()
    file(WRITE "${_dir}/kffiTorchGlue-${_mm}.cmake"
         "# kffiTorchGlue-${_mm}.cmake: kffi.torch's glue built for torch ${_version} "
         "(cmake/torch_glue.cmake).\n"
         "list(APPEND _kffi_torch_glues \"${_mm}\")\n"
         "set(_kffi_torch_glue_${_id}_version \"${_version}\")\n"
         "set(_kffi_torch_glue_${_id}_lib \"\${CMAKE_CURRENT_LIST_DIR}/${_lib}\")\n"
         "set(_kffi_torch_glue_${_id}_include \"\${CMAKE_CURRENT_LIST_DIR}/${_inc}\")\n")
  endforeach()
  install(FILES "${PROJECT_BINARY_DIR}/cmake/install-tree/${KFFI_INSTALL_CMAKEDIR}/kffiTorchGlue-${_mm}.cmake"
          DESTINATION "${KFFI_INSTALL_CMAKEDIR}")
  if(NOT SKBUILD)
    install(FILES "${_kffi_torch_dir}/include/kffi/torch.h"
            DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/kffi")
  endif()
  message(STATUS "kffi.torch: glue for torch ${_version} (${root})")
  set(KFFI_TORCH_GLUE_VERSIONS ${KFFI_TORCH_GLUE_VERSIONS} ${_mm} PARENT_SCOPE)
endfunction()

foreach(_root IN LISTS _kffi_roots)
  kffi_add_torch_glue("${_root}")
endforeach()
if(NOT _kffi_roots)
  message(STATUS "kffi.torch: no torch found, no glue built (KFFI_TORCH_ROOTS names torch "
                 "packages)")
endif()
unset(_kffi_roots)
unset(_root)
