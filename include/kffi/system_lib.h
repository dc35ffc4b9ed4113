// include/kffi/system_lib.h: exports for static linking (the system library) and export prefixes.
//
// Two compile-time switches change what KFFI_EXPORT, KFFI_EXPORT_DOC, KFFI_EXPORT_CONTRACT and
// KFFI_EXPORT_CONTRACT_DOC emit (kffi_add_library(... STATIC|OBJECT) and kffi.compile(...)
// .export("x.o") set them; included by <kffi/export.h>, not on its own):
//
//   -DKFFI_EXPORT_TO_SYSTEM_LIB=1  each export also registers itself in the system library when
//                                  the program starts, so that Module::SystemLib() (and
//                                  kffi.system_lib() from an embedded interpreter) finds it, with
//                                  its metadata and contract. The safe-call symbol stays visible
//                                  (`__kffi_<name>`: C and C++ callers link against it, and a
//                                  shared object made of the code still loads as a module).
//   -DKFFI_EXPORT_PREFIX=p_        every export of the translation unit is named p_<name>
//                                  (symbols `__kffi_p_<name>`, metadata, messages), so that two
//                                  libraries exporting the same name link into one program.
//
// Why a static initialiser: it is the one registration mechanism that needs nothing from the
// program (no list of objects, no linker script, no call at start-up) and that every toolchain
// keeps: .init_array entries of an object that is linked are always run. The one way to lose it
// is an object that is never linked: a member of a static archive that nothing refers to.
// Link such archives whole (CMake: $<LINK_LIBRARY:WHOLE_ARCHIVE,lib>, or an OBJECT library), or
// refer to one of its symbols (the generated header's entry point does). A linker section
// (__start_/__stop_ symbols) would be lost the same way and needs code in the program to read it.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SYSTEM_LIB_H_
#define KFFI_SYSTEM_LIB_H_

// The export prefix, empty unless the build defines it.
#ifndef KFFI_EXPORT_PREFIX
#define KFFI_EXPORT_PREFIX
#endif

#define KFFI_EXPORT_CAT2_(a, b) a##b
#define KFFI_EXPORT_CAT_(a, b) KFFI_EXPORT_CAT2_(a, b)
// The exported name of `name`: KFFI_EXPORT_PREFIX pasted in front (nothing when it is empty).
#define KFFI_EXPORT_NAME_(name) KFFI_EXPORT_CAT_(KFFI_EXPORT_PREFIX, name)
// m(args...) with the arguments expanded first (m pastes its name argument with ##, which would
// otherwise see the unexpanded KFFI_EXPORT_NAME_(...)).
#define KFFI_EXPORT_APPLY_(m, ...) m(__VA_ARGS__)

// Registers `__kffi_<name>` and `__kffi__meta_<name>` (defined just before) in the system
// library at static initialisation. A registration made while Module::LoadObject opens the code
// is left out: that module serves it.
#define KFFI_SYSTEM_LIB_REGISTER_(name)                                                    \
  [[maybe_unused]] static const int kffi_system_lib_registration_##name =                  \
      ::kffi::details::RegisterSystemLibFunction(                                          \
          "__kffi_" #name, reinterpret_cast<void*>(&__kffi_##name), "__kffi__meta_" #name, \
          reinterpret_cast<void*>(&__kffi__meta_##name))

#if defined(KFFI_EXPORT_TO_SYSTEM_LIB) && !defined(_WIN32)
#define KFFI_SYSTEM_LIB_AUTO_REGISTER_(name) KFFI_SYSTEM_LIB_REGISTER_(name)
#else
#define KFFI_SYSTEM_LIB_AUTO_REGISTER_(name) static_assert(true, "")
#endif

#endif  // KFFI_SYSTEM_LIB_H_
