// python/kffi/torch/_pytext.h: Python's spellings in C++ (repr() of str, float, lists and JSON
// values, identifiers, json.dumps), for the messages and schemas of the torch glue: kffi.torch
// raises its messages as they are, so they read as Python writes values. _pytext.cc defines them.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TORCH_PYTEXT_H_
#define KFFI_TORCH_PYTEXT_H_

#include <kffi/details/json.h>

#include <string>
#include <vector>

namespace kffi {
namespace torchglue {

/// Whether s is a Python identifier and no keyword (a name kffi.torch can give a parameter).
bool IsIdentifier(const std::string& s);

/// A double as Python's repr() writes it ("1.0", "1e-05", "inf").
std::string PyFloat(double v);

/// A JSON value as Python's repr() of what json.loads makes of it (depth-limited).
std::string PyReprJson(const details::Json& v, int depth = 0);

/// ['a', 'b']: names as Python's repr() of a list of str.
std::string PyList(const std::vector<std::string>& names);

/// The items joined with sep.
std::string Join(const std::vector<std::string>& items, const char* sep);

/// A str as json.dumps writes it (ASCII, \uXXXX escapes).
std::string JsonDumps(const std::string& s);

/// 'x': a str as Python's repr() writes it.
std::string PyRepr(const std::string& s);

}  // namespace torchglue
}  // namespace kffi

#endif  // KFFI_TORCH_PYTEXT_H_
