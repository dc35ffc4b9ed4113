# cmake/install.cmake: the kffi CMake package, the kffi-config script, and their installation.
# Included by the top-level CMakeLists.txt after kffi_shared and kffi_static exist.
#
# Two copies of each, with the same layout relative to a prefix:
#   build tree  <build>/bin/kffi-config, <build>/lib/cmake/kffi/kffiConfig.cmake (headers from the
#               source tree, libkffi from the build tree): for building against an uninstalled kffi
#   install     <prefix>/bin/kffi-config, <prefix>/<libdir>/cmake/kffi/kffiConfig.cmake, with paths
#               relative to their own location so that the installed tree can be moved
# SPDX-License-Identifier: Apache-2.0

include(CMakePackageConfigHelpers)

set(KFFI_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kffi" CACHE STRING
    "Where kffiConfig.cmake is installed, relative to the prefix")
# Read from the one version source, like the top level reads the release version.
file(STRINGS "${PROJECT_SOURCE_DIR}/include/kffi/c_api.h" _kffi_abi_line
     REGEX "^#define KFFI_ABI_VERSION [0-9]+")
string(REGEX MATCH "([0-9]+)$" _kffi_abi_match "${_kffi_abi_line}")
set(KFFI_ABI_VERSION "${CMAKE_MATCH_1}")

# Consumers see kffi::kffi (the shared runtime) and kffi::kffi_static, as in-tree.
set_target_properties(kffi_shared PROPERTIES EXPORT_NAME kffi)
set_target_properties(kffi_static PROPERTIES EXPORT_NAME kffi_static)

# ---- the CMake package -----------------------------------------------------------------------

write_basic_package_version_file("${PROJECT_BINARY_DIR}/lib/cmake/kffi/kffiConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  # 0.x releases may break the C++ API between minor versions.
  COMPATIBILITY SameMinorVersion)

# kffi_configure_package(<dir> <bindir>): kffiConfig.cmake in <dir>, pointing at <bindir>.
function(kffi_configure_package dir bindir)
  file(RELATIVE_PATH KFFI_CONFIG_REL_PATH "${dir}" "${bindir}/kffi-config")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/kffiConfig.cmake.in" "${dir}/kffiConfig.cmake"
                 @ONLY)
endfunction()

# Build tree: usable with -Dkffi_DIR=<build>/lib/cmake/kffi or CMAKE_PREFIX_PATH=<build>.
set(_kffi_build_cmakedir "${PROJECT_BINARY_DIR}/lib/cmake/kffi")
kffi_configure_package("${_kffi_build_cmakedir}" "${PROJECT_BINARY_DIR}/bin")
configure_file("${PROJECT_SOURCE_DIR}/cmake/kffiHelpers.cmake"
               "${_kffi_build_cmakedir}/kffiHelpers.cmake" COPYONLY)
configure_file("${PROJECT_SOURCE_DIR}/cmake/kffiTorch.cmake"
               "${_kffi_build_cmakedir}/kffiTorch.cmake" COPYONLY)
export(EXPORT kffiTargets NAMESPACE kffi:: FILE "${_kffi_build_cmakedir}/kffiTargets.cmake")

# Installed: computed for a nominal prefix; only relative paths end up in the files.
set(_kffi_nominal_prefix "/kffi-prefix")
set(_kffi_install_stage "${PROJECT_BINARY_DIR}/cmake/install-tree")
kffi_configure_package("${_kffi_install_stage}/${KFFI_INSTALL_CMAKEDIR}"
                       "${_kffi_install_stage}/${CMAKE_INSTALL_BINDIR}")
install(EXPORT kffiTargets NAMESPACE kffi:: FILE kffiTargets.cmake
        DESTINATION "${KFFI_INSTALL_CMAKEDIR}")
install(FILES "${_kffi_install_stage}/${KFFI_INSTALL_CMAKEDIR}/kffiConfig.cmake"
              "${PROJECT_BINARY_DIR}/lib/cmake/kffi/kffiConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/kffiHelpers.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/kffiTorch.cmake"
        DESTINATION "${KFFI_INSTALL_CMAKEDIR}")

# ---- kffi-config -----------------------------------------------------------------------------

# A directory for the installed script: relative ones are found from the script's own location.
function(kffi_config_install_dir out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\$prefix/${dir}" PARENT_SCOPE)
  endif()
endfunction()

# Build tree: headers from the source tree, libkffi where the build put it.
if(CMAKE_LIBRARY_OUTPUT_DIRECTORY)
  set(_kffi_build_libdir "${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
else()
  set(_kffi_build_libdir "${PROJECT_BINARY_DIR}")
endif()
set(KFFI_CONFIG_FLAVOR "build tree")
set(KFFI_CONFIG_LOCATE "prefix=\"${PROJECT_BINARY_DIR}\"
includedir=\"${PROJECT_SOURCE_DIR}/include\"
libdir=\"${_kffi_build_libdir}\"
cmakedir=\"${_kffi_build_cmakedir}\"")
configure_file("${PROJECT_SOURCE_DIR}/cmake/kffi-config.in"
               "${PROJECT_BINARY_DIR}/cmake/build-tree/kffi-config" @ONLY)
file(COPY "${PROJECT_BINARY_DIR}/cmake/build-tree/kffi-config"
     DESTINATION "${PROJECT_BINARY_DIR}/bin"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ
                      WORLD_EXECUTE)

# Installed: the prefix is found from the script's path (symlinks followed), so a moved or
# relocated install (cmake --install --prefix) still answers correctly.
if(IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}")
  message(WARNING "kffi-config: CMAKE_INSTALL_BINDIR is absolute; the installed script "
                  "assumes the prefix is its parent directory")
  set(_kffi_bin_to_prefix "..")
else()
  file(RELATIVE_PATH _kffi_bin_to_prefix "${_kffi_nominal_prefix}/${CMAKE_INSTALL_BINDIR}"
       "${_kffi_nominal_prefix}")
endif()
kffi_config_install_dir(_kffi_inc "${CMAKE_INSTALL_INCLUDEDIR}")
kffi_config_install_dir(_kffi_lib "${CMAKE_INSTALL_LIBDIR}")
kffi_config_install_dir(_kffi_cmk "${KFFI_INSTALL_CMAKEDIR}")
set(KFFI_CONFIG_FLAVOR "installed")
set(KFFI_CONFIG_LOCATE "script=\"$0\"
while [ -h \"$script\" ]; do
  link=$(ls -ld \"$script\" | sed 's/.* -> //')
  case \"$link\" in
    /*) script=\"$link\" ;;
    *) script=\"$(dirname \"$script\")/$link\" ;;
  esac
done
prefix=$(cd \"$(dirname \"$script\")/${_kffi_bin_to_prefix}\" && pwd)
includedir=\"${_kffi_inc}\"
libdir=\"${_kffi_lib}\"
cmakedir=\"${_kffi_cmk}\"")
configure_file("${PROJECT_SOURCE_DIR}/cmake/kffi-config.in"
               "${_kffi_install_stage}/${CMAKE_INSTALL_BINDIR}/kffi-config" @ONLY)
install(PROGRAMS "${_kffi_install_stage}/${CMAKE_INSTALL_BINDIR}/kffi-config"
        DESTINATION "${CMAKE_INSTALL_BINDIR}")

unset(_kffi_inc)
unset(_kffi_lib)
unset(_kffi_cmk)
