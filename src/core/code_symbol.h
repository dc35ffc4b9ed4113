// src/core/code_symbol.h: the one way kffi turns a symbol of a loaded object into a function
// pointer.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_CORE_CODE_SYMBOL_H_
#define KFFI_SRC_CORE_CODE_SYMBOL_H_

#include <string>

namespace kffi {
namespace details {

/// Whether address lies in an executable segment (a PT_LOAD with PF_X) of an object loaded in
/// the process. When it does not, *where says where it lies instead ("in a segment of `path`
/// that is not executable", "outside every loaded object"). The loader has already refused, from
/// the file, symbols that are not code (module_elf.h); this is the check of what the dynamic
/// loader actually resolved (an indirect function's resolver picks the address at run time) and
/// of addresses registered by statically linked code.
bool IsLoadedCode(const void* address, std::string* where);

/// dlsym(handle, name) when it resolves to code (IsLoadedCode). NULL when the symbol is not
/// defined (*problem left empty) or when it is not code (*problem says so, naming the symbol).
/// Every place that calls through a looked-up symbol gets it from here.
void* FindCodeSymbol(void* handle, const std::string& name, std::string* problem);

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_CORE_CODE_SYMBOL_H_
