// python/kffi/torch/_signature.cc: a kffi function's torch op signature (see _signature.h).
//
// The messages are kffi.torch's (Python's reprs included: 'x', ['a', 'b']): kffi.torch raises
// them as they are, and a C++ program gets them as kffi::Errors.
// SPDX-License-Identifier: Apache-2.0
#include "_signature.h"

#include <kffi/c_api.h>
#include <kffi/container/array.h>
#include <kffi/error.h>
#include <kffi/export.h>
#include <kffi/optional.h>
#include <kffi/string.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "_dispatch.h"
#include "_pytext.h"

namespace kffi {
namespace torchglue {

using details::Json;

namespace {

bool Truthy(const Json* v) {
  if (v == nullptr) return false;
  switch (v->kind) {
    case Json::kNull:
      return false;
    case Json::kBool:
      return v->boolean;
    case Json::kNumber:
      return v->number != 0;
    case Json::kString:
      return !v->str.empty();
    case Json::kArray:
      return !v->items.empty();
    default:
      return !v->members.empty();
  }
}

std::string Str(const Json* v) {
  if (v == nullptr) return "";
  return v->kind == Json::kString ? v->str : PyReprJson(*v);
}

/// A dtype field as _abstract._dtype_options reads it: null, "*" or "": any; "a|b"; a list.
std::vector<std::string> DtypeOptions(const Json* v) {
  std::vector<std::string> out;
  if (v == nullptr || v->kind == Json::kNull) return out;
  if (v->kind == Json::kString) {
    if (v->str.empty() || v->str == "*") return out;
    size_t start = 0;
    while (true) {
      size_t end = v->str.find('|', start);
      std::string item = v->str.substr(start, end == std::string::npos ? end : end - start);
      size_t a = item.find_first_not_of(" \t\n\r"), b = item.find_last_not_of(" \t\n\r");
      item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
      if (!item.empty() && item != "*") out.push_back(item);
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return out;
  }
  if (v->kind == Json::kArray) {
    for (const Json& item : v->items) {
      std::string s = Str(&item);
      if (s != "*") out.push_back(s);
    }
  }
  return out;
}

SigDim DimOf(const Json& v) {
  SigDim d;
  d.repr = PyReprJson(v);
  if (v.kind == Json::kNumber && v.integral) {
    d.kind = SigDim::kInt;
    d.value = v.integer;
  } else if (v.kind == Json::kString) {
    d.kind = v.str.rfind('*', 0) == 0 ? SigDim::kWildcard : SigDim::kSymbol;
    d.symbol = v.str;
  }
  return d;
}

std::string WithOptional(const std::string& t, bool optional) { return optional ? t + "?" : t; }

const char* ScalarSchema(const std::string& kind) {
  if (kind == "int") return "SymInt";
  if (kind == "float") return "float";
  if (kind == "bool") return "bool";
  if (kind == "str") return "str";
  return nullptr;
}

void SetDefault(const Json& p, bool optional, SigParam* out) {
  if (const Json* d = p.Get("default"); d != nullptr) {
    out->has_default = true;
    out->default_value = *d;
  } else if (optional) {
    out->has_default = true;  // None
  }
}

/// The scalar kind of a record field's type text ("int32" is int, "float32" float; the field's
/// setter checks the range), or "" for a type an op argument cannot carry.
std::string ScalarFieldKind(const std::string& t) {
  if (t == "int" || t == "float" || t == "bool" || t == "str") return t;
  for (const char* k : {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}) {
    if (t == k) return "int";
  }
  if (t == "float16" || t == "float32" || t == "float64" || t == "bfloat16") return "float";
  return "";
}

}  // namespace

std::vector<RecordField> RecordFieldsOf(int32_t type_index) {
  std::vector<RecordField> out;
  std::unordered_map<std::string, size_t> at_name;  // a type may have many fields: no rescans
  const KFFITypeInfo* info = KFFIGetTypeInfo(type_index);
  if (info == nullptr) return out;
  for (int32_t d = 0; d <= info->type_depth; ++d) {
    const int32_t at = d == info->type_depth ? type_index : info->type_ancestors[d];
    const KFFITypeReflection* r = KFFIGetTypeReflection(at);
    for (int32_t i = 0; r != nullptr && i < r->num_fields; ++i) {
      const KFFIFieldInfo* f = &r->fields[i];
      std::string n(f->name.data, f->name.size);
      auto [it, added] = at_name.emplace(n, out.size());
      if (!added) {
        out[it->second].info = f;  // declared again nearer the type: that declaration is the field
      } else {
        out.push_back(RecordField{std::move(n), f});
      }
    }
  }
  return out;
}

namespace {

/// Makes out (named, index set) the record parameter of object type `type_key` when that type is
/// registered with fields: true, or false when it is not a registered type with fields (the
/// caller refuses the parameter). Its writable fields (ancestors' first; a name declared again
/// is the nearest declaration's) become schema arguments `<name>_<field>`; a field a torch op
/// cannot take, or a type without a default constructor, is a TypeError naming `name.field`.
bool RecordParam(const std::string& type_key, const std::string& label, SigParam* out) {
  if (type_key.find('.') == std::string::npos || type_key.find('<') != std::string::npos) {
    return false;
  }
  KFFIByteArray key{type_key.data(), type_key.size()};
  int32_t index = -1;
  if (KFFITypeKeyToIndex(&key, &index) != 0) {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);  // an unknown key: not a record parameter
    if (err != nullptr) KFFIObjectDecRef(err);
    return false;
  }
  const KFFITypeInfo* info = KFFIGetTypeInfo(index);
  const KFFITypeReflection* own = KFFIGetTypeReflection(index);
  if (info == nullptr || own == nullptr) return false;
  KFFI_CHECK(own->creator != nullptr, TypeError)
      << "kffi.torch: " << label << ": parameter " << PyRepr(out->name) << " has type " << type_key
      << ", which has no default constructor, so the op cannot build it from its fields";
  out->kind = "record";
  out->record_type = index;
  out->record_key = type_key;
  for (const RecordField& rf : RecordFieldsOf(index)) {
    const KFFIFieldInfo& f = *rf.info;
    if (f.setter == nullptr) continue;  // read-only: keeps its C++ default
    const std::string type_str(f.type_str.data, f.type_str.size);
    const std::string kind = ScalarFieldKind(type_str);
    const char* schema = kind.empty() ? nullptr : ScalarSchema(kind);
    KFFI_CHECK(schema != nullptr, TypeError)
        << "kffi.torch: " << label << ": record field " << out->name << "." << rf.name << " ("
        << type_key << ") has type " << type_str
        << ", which a torch op cannot take as a field (int, float, bool, str)";
    SigParam field;
    field.index = out->index;
    field.name = out->name + "_" + rf.name;
    field.kind = kind;
    field.schema_type = schema;
    field.field_name = rf.name;
    out->fields.push_back(std::move(field));
  }
  return true;
}

SigParam ContractParam(int64_t i, const Json& p, const std::string& label) {
  SigParam out;
  out.index = i;
  out.name = Truthy(p.Get("name")) ? Str(p.Get("name")) : "arg" + std::to_string(i);
  const std::string kind = Str(p.Get("kind"));
  out.optional = Truthy(p.Get("optional"));
  SetDefault(p, out.optional, &out);
  if (kind == "tensor") {
    out.kind = "tensor";
    out.schema_type = WithOptional("Tensor", out.optional);
    out.is_mutable = Truthy(p.Get("mutable"));
    const Json* shape = p.Get("shape");
    if (shape != nullptr && shape->kind != Json::kNull) {
      out.has_shape = true;
      if (shape->kind == Json::kArray) {
        for (const Json& d : shape->items) out.shape.push_back(DimOf(d));
      }
    }
    out.dtypes = DtypeOptions(p.Get("dtypes"));
    return out;
  }
  if (kind == "int" || kind == "float" || kind == "bool") {
    out.kind = kind;
    out.schema_type = WithOptional(ScalarSchema(kind), out.optional);
    return out;
  }
  if (kind == "stream") {
    out.kind = "stream";
    out.optional = true;
    out.has_default = true;
    out.default_value = Json();
    return out;
  }
  if (kind == "tuple") {
    std::set<std::string> elems;
    if (const Json* e = p.Get("elems"); e != nullptr && e->kind == Json::kArray) {
      for (const Json& item : e->items) elems.insert(Str(item.Get("kind")));
    }
    if (elems.size() == 1 &&
        (*elems.begin() == "int" || *elems.begin() == "float" || *elems.begin() == "bool")) {
      out.kind = "list";
      out.schema_type =
          WithOptional(std::string(ScalarSchema(*elems.begin())) + "[]", out.optional);
      return out;
    }
  }
  const Json* type = p.Get("type");
  if (!out.optional && type != nullptr && type->kind == Json::kString &&
      RecordParam(type->str, label, &out)) {
    return out;
  }
  KFFI_THROW(TypeError) << "kffi.torch: " << label << ": parameter " << PyRepr(out.name)
                        << " has type " << (type ? PyReprJson(*type) : "None")
                        << ", which a torch op cannot take (tensors, int, float, bool, streams, "
                           "and tuples of int/float/bool)";
}

SigParam CppParam(int64_t i, const Json& p, const std::string& label) {
  SigParam out;
  out.index = i;
  out.name = Truthy(p.Get("name")) ? Str(p.Get("name")) : "arg" + std::to_string(i);
  const Json* t = p.Get("type");
  const std::string type_text = t == nullptr ? "" : Str(t);
  std::string_view inner_text;
  out.optional = kffi::details::OptionalTypeInner(type_text, &inner_text);
  const std::string inner = out.optional ? std::string(inner_text) : type_text;
  SetDefault(p, out.optional, &out);
  if (inner == "Tensor" || inner == "DLTensor*" || inner == "TensorView") {
    out.kind = "tensor";
    out.schema_type = WithOptional("Tensor", out.optional);
    return out;
  }
  if (const char* s = ScalarSchema(inner); s != nullptr) {
    out.kind = inner;
    out.schema_type = WithOptional(s, out.optional);
    return out;
  }
  const char* list = inner == "Array<int>"     ? "SymInt[]"
                     : inner == "Array<float>" ? "float[]"
                     : inner == "Array<bool>"  ? "bool[]"
                                               : nullptr;
  if (list != nullptr) {
    out.kind = "list";
    out.schema_type = WithOptional(list, out.optional);
    return out;
  }
  if (!out.optional && RecordParam(inner, label, &out)) return out;
  KFFI_THROW(TypeError) << "kffi.torch: " << label << ": parameter " << PyRepr(out.name)
                        << " has C++ type " << PyRepr(type_text)
                        << ", which a torch op cannot take (Tensor, int, float, bool, str, "
                           "Optional of them, Array<int|float|bool>)";
}

std::string AliasName(size_t i) {
  return i < 26 ? std::string(1, static_cast<char>('a' + i)) : "a" + std::to_string(i);
}

std::string SchemaDefault(const SigParam& p) {
  const Json& v = p.default_value;
  switch (v.kind) {
    case Json::kNull:
      return "None";
    case Json::kBool:
      return v.boolean ? "True" : "False";
    case Json::kNumber:
      return v.integral ? std::to_string(v.integer) : PyFloat(v.number);
    case Json::kString:
      return JsonDumps(v.str);
    case Json::kArray: {
      std::vector<std::string> items;
      bool ok = true;
      for (const Json& x : v.items) {
        if (x.kind != Json::kNumber && x.kind != Json::kBool) ok = false;
        items.push_back(PyReprJson(x));
      }
      if (ok) return "[" + Join(items, ", ") + "]";
      break;
    }
    default:
      break;
  }
  KFFI_THROW(TypeError) << "kffi.torch: parameter " << PyRepr(p.name)
                        << ": cannot write its default " << PyReprJson(v) << " in a schema";
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

/// Whether the sorted list v holds s (one search: a function may have many parameters).
bool Contains(const std::vector<std::string>& sorted, const std::string& s) {
  return std::binary_search(sorted.begin(), sorted.end(), s);
}

}  // namespace

std::vector<const SigParam*> OpSignature::SchemaArgs() const {
  std::vector<const SigParam*> out;
  for (const SigParam& p : params) {
    if (!p.schema_type.empty()) out.push_back(&p);
    for (const SigParam& f : p.fields) out.push_back(&f);
  }
  return out;
}

std::vector<std::string> OpSignature::Mutated() const {
  std::vector<std::string> out;
  for (const SigParam& p : params) {
    if (p.is_mutable && !p.allocated) out.push_back(p.name);
  }
  return out;
}

std::vector<int64_t> OpSignature::Written() const {
  std::vector<int64_t> out;
  std::vector<const SigParam*> args = SchemaArgs();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i]->is_mutable) out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

std::string OpSignature::Schema() const {
  std::vector<const SigParam*> args = SchemaArgs();
  // Only a trailing run of defaults (as the kffi call path fills them).
  size_t first_default = args.size();
  while (first_default > 0 && args[first_default - 1]->has_default) --first_default;
  std::vector<std::string> parts;
  size_t alias = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const SigParam& p = *args[i];
    std::string t = p.schema_type;
    if (p.is_mutable) {
      const bool opt = !t.empty() && t.back() == '?';
      if (opt) t.pop_back();
      t += "(" + AliasName(alias++) + "!)" + (opt ? "?" : "");
    }
    std::string text = t + " " + p.name;
    if (i >= first_default) text += "=" + SchemaDefault(p);
    parts.push_back(std::move(text));
  }
  std::string ret;
  if (returns.empty()) {
    ret = "()";
  } else if (returns.size() == 1) {
    ret = returns[0];
  } else {
    ret = "(" + Join(returns, ", ") + ")";
  }
  return "(" + Join(parts, ", ") + ") -> " + ret;
}

int64_t OpSignature::DeviceArg() const {
  std::vector<const SigParam*> args = SchemaArgs();
  for (bool want_required : {true, false}) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i]->kind == "tensor" && (!args[i]->optional || !want_required)) {
        return static_cast<int64_t>(i);
      }
    }
  }
  return -1;
}

std::vector<std::pair<int64_t, int64_t>> OpSignature::AllocDims(const SigParam& p) const {
  std::vector<const SigParam*> args = SchemaArgs();
  // The tensor arguments that bind symbols: required ones first, each group in order.
  std::vector<size_t> candidates;
  for (bool optional : {false, true}) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i]->kind == "tensor" && args[i]->has_shape && args[i]->optional == optional) {
        candidates.push_back(i);
      }
    }
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t d = 0; d < p.shape.size(); ++d) {
    const SigDim& dim = p.shape[d];
    if (dim.kind == SigDim::kInt) {
      out.emplace_back(-1, dim.value);
      continue;
    }
    bool found = false;
    if (dim.kind == SigDim::kSymbol) {
      for (size_t i : candidates) {
        const std::vector<SigDim>& shape = args[i]->shape;
        for (size_t k = 0; k < shape.size() && !found; ++k) {
          if (shape[k].kind == SigDim::kSymbol && shape[k].symbol == dim.symbol) {
            out.emplace_back(static_cast<int64_t>(i), static_cast<int64_t>(k));
            found = true;
          }
        }
        if (found) break;
      }
    }
    KFFI_CHECK(found, TypeError) << "kffi.torch: " << label << ": cannot allocate "
                                 << PyRepr(p.name) << ": its dimension " << d << " (" << dim.repr
                                 << ") is not fixed by any tensor argument; pass it as an argument "
                                    "(leave it out of allocate=)";
  }
  return out;
}

std::vector<int64_t> OpSignature::Plan() const {
  std::vector<const SigParam*> args = SchemaArgs();
  auto schema_pos = [&](const SigParam& p) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == &p) return static_cast<int64_t>(i);
    }
    return int64_t{-1};
  };
  std::vector<const SigParam*> allocs;
  for (const SigParam& p : params) {
    if (p.allocated) allocs.push_back(&p);
  }
  std::vector<int64_t> items{static_cast<int64_t>(params.size())};
  int64_t alloc_pos = 0;
  int64_t record_pos = 0;
  for (const SigParam& p : params) {
    if (p.kind == "record") {
      items.insert(items.end(), {kRecord, record_pos++});
    } else if (p.allocated) {
      items.insert(items.end(), {kAlloc, alloc_pos++});
    } else if (p.kind == "stream") {
      items.insert(items.end(), {kStream, 0});
    } else if (p.schema_type.empty()) {
      items.insert(items.end(), {kNone, 0});
    } else {
      items.insert(items.end(), {kArg, schema_pos(p)});
    }
  }
  items.push_back(static_cast<int64_t>(allocs.size()));
  for (const SigParam* p : allocs) {
    items.push_back(static_cast<int64_t>(p->shape.size()));
    items.push_back(static_cast<int64_t>(p->dtypes.size()));
    for (const std::string& d : p->dtypes) items.push_back(PackedDType(d));
    for (const auto& [arg, value] : AllocDims(*p)) items.insert(items.end(), {arg, value});
  }
  items.insert(items.end(), {DeviceArg(), ret_kind, n_fn_returns});
  if (record_pos > 0) {  // only then: a plan without records reads as before
    items.push_back(record_pos);
    for (const SigParam& p : params) {
      if (p.kind != "record") continue;
      items.push_back(static_cast<int64_t>(p.fields.size()));
      for (const SigParam& f : p.fields) items.push_back(schema_pos(f));
    }
  }
  return items;
}

std::vector<std::string> OpSignature::RecordNames() const {
  std::vector<std::string> names;
  for (const SigParam& p : params) {
    if (p.kind != "record") continue;
    names.push_back(p.record_key);
    for (const SigParam& f : p.fields) names.push_back(f.field_name);
  }
  return names;
}

std::vector<std::string> MetadataParamTypes(const std::string& metadata) {
  std::vector<std::string> types;
  Json meta;
  details::JsonReader reader(metadata);
  if (!reader.Parse(&meta) || meta.kind != Json::kObject) return types;
  const Json* params = meta.Get("params");
  if (params == nullptr || params->kind != Json::kArray) return types;
  for (const Json& p : params->items) {
    const Json* t = p.kind == Json::kObject ? p.Get("type") : nullptr;
    types.push_back(t != nullptr && t->kind == Json::kString ? t->str : "");
  }
  return types;
}

bool HasStructuredContract(const std::string& metadata) {
  Json meta;
  details::JsonReader reader(metadata);
  return reader.Parse(&meta) && meta.kind == Json::kObject && meta.Get("mutates") != nullptr;
}

OpSignature SignatureOf(const std::string& metadata, const std::string& qualname,
                        const std::string& fallback_label, const SignatureOptions& options) {
  Json meta;
  details::JsonReader reader(metadata);
  const bool parsed = reader.Parse(&meta) && meta.kind == Json::kObject;
  std::string label = parsed && Truthy(meta.Get("name")) ? Str(meta.Get("name")) : fallback_label;
  if (label.empty()) label = "function";
  const Json* raw = parsed ? meta.Get("params") : nullptr;
  KFFI_CHECK(raw != nullptr && raw->kind == Json::kArray, TypeError)
      << "kffi.torch: " << label
      << " has no metadata (parameter names and types); torch ops are made from functions of "
         "kffi.load_module(...) / kffi.compile / kffi.cpp.load_inline";
  OpSignature sig;
  sig.qualname = qualname;
  sig.label = label;
  sig.contract = meta.Get("mutates") != nullptr;
  std::vector<SigParam>& params = sig.params;
  for (size_t i = 0; i < raw->items.size(); ++i) {
    const Json& p = raw->items[i];
    static const Json kEmpty = [] {
      Json j;
      j.kind = Json::kObject;
      return j;
    }();
    const Json& pj = p.kind == Json::kObject ? p : kEmpty;
    params.push_back(sig.contract ? ContractParam(static_cast<int64_t>(i), pj, label)
                                  : CppParam(static_cast<int64_t>(i), pj, label));
  }
  if (sig.contract) {
    std::vector<std::string> declared;
    for (const SigParam& p : params) {
      if (p.is_mutable) declared.push_back(p.name);
    }
    if (const Json* m = meta.Get("mutates"); m != nullptr && m->kind == Json::kArray) {
      for (const Json& n : m->items) declared.push_back(Str(&n));
    }
    declared = Sorted(declared);
    if (options.has_mutates && Sorted(options.mutates) != declared) {
      KFFI_THROW(ValueError) << "kffi.torch: " << label
                             << ": mutates_args=" << PyList(Sorted(options.mutates))
                             << " contradicts its contract, which marks "
                             << (declared.empty() ? "nothing" : PyList(declared)) << " `mut`";
    }
    for (SigParam& p : params) p.is_mutable = p.kind == "tensor" && Contains(declared, p.name);
  } else {
    KFFI_CHECK(options.has_mutates, TypeError)
        << "kffi.torch: " << label
        << " has no contract saying which tensors it writes; pass mutates_args=(names of the "
           "tensor parameters it writes) (or () for none)";
    std::unordered_map<std::string, SigParam*> by_name;  // the first of each name
    for (SigParam& p : params) by_name.emplace(p.name, &p);
    for (const std::string& n : Sorted(options.mutates)) {
      auto it = by_name.find(n);
      SigParam* found = it == by_name.end() ? nullptr : it->second;
      if (found == nullptr || found->kind != "tensor") {
        std::vector<std::string> tensors;
        for (const SigParam& p : params) {
          if (p.kind == "tensor") tensors.push_back(p.name);
        }
        KFFI_THROW(ValueError) << "kffi.torch: " << label << ": mutates_args names " << PyRepr(n)
                               << ", which is not one of its tensor parameters ("
                               << (tensors.empty() ? "none" : Join(tensors, ", ")) << ")";
      }
      found->is_mutable = true;
    }
  }
  for (const SigParam& p : params) {
    KFFI_CHECK(IsIdentifier(p.name), ValueError)
        << "kffi.torch: " << label << ": parameter name " << PyRepr(p.name)
        << " cannot name a torch schema argument";
  }
  {  // a record's fields take names of their own: `cfg_alpha` must not be another parameter
    std::set<std::string> seen;
    for (const SigParam* a : sig.SchemaArgs()) {
      KFFI_CHECK(IsIdentifier(a->name) && seen.insert(a->name).second, ValueError)
          << "kffi.torch: " << label << ": schema argument " << PyRepr(a->name)
          << (a->field_name.empty() ? "" : " (a record field)")
          << " is not a unique identifier; rename the parameter or the field";
    }
  }

  // Allocated outputs: mut tensors the op makes and returns.
  if (options.allocate != 0) {
    KFFI_CHECK(sig.contract, TypeError)
        << "kffi.torch: " << label << ": allocate= needs a contract (output shapes come from it)";
    std::vector<std::string> mut;
    for (const SigParam& p : params) {
      if (p.is_mutable) mut.push_back(p.name);
    }
    const std::vector<std::string> chosen =
        Sorted(options.allocate == 1 ? mut : options.allocate_names);
    const std::vector<std::string> mut_sorted = Sorted(mut);
    for (const std::string& n : chosen) {
      KFFI_CHECK(Contains(mut_sorted, n), ValueError)
          << "kffi.torch: " << label << ": allocate= names " << PyRepr(n)
          << ", which is not a `mut` tensor parameter (" << (mut.empty() ? "none" : Join(mut, ", "))
          << ")";
    }
    for (SigParam& p : params) {
      if (p.is_mutable && Contains(chosen, p.name)) {
        KFFI_CHECK(p.has_shape, TypeError)
            << "kffi.torch: " << label << ": " << PyRepr(p.name) << " has no declared shape";
        p.allocated = true;
        p.schema_type.clear();
      }
    }
  }

  for (const SigParam& p : params) {
    if (p.allocated) sig.returns.push_back("Tensor");
  }
  const Json* outputs = sig.contract ? meta.Get("outputs") : nullptr;
  if (outputs != nullptr && outputs->kind == Json::kArray && !outputs->items.empty()) {
    for (size_t k = 0; k < outputs->items.size(); ++k) {
      const Json& o = outputs->items[k];
      SigOutput out;
      out.name = Truthy(o.Get("name")) ? Str(o.Get("name")) : "";
      out.dtypes = DtypeOptions(o.Get("dtype"));
      if (const Json* rpn = o.Get("shape_rpn"); rpn != nullptr && rpn->kind == Json::kArray) {
        for (const Json& dim : rpn->items) {
          out.shape_rpn.push_back(dim.kind == Json::kArray ? dim.items : std::vector<Json>{dim});
        }
      }
      sig.outputs.push_back(std::move(out));
      sig.returns.push_back("Tensor");
    }
    sig.ret_kind = sig.outputs.size() == 1 ? kRetTensor : kRetTensors;
    sig.n_fn_returns = static_cast<int64_t>(sig.outputs.size());
  } else {
    const Json* r = meta.Get("return");
    const std::string ret_type = r == nullptr ? "None" : Str(r);
    if (ret_type == "None" || ret_type == "void" || ret_type.empty()) {
      sig.ret_kind = kRetNone;
    } else if (ret_type == "Tensor" || ret_type == "DLTensor*") {
      sig.returns.push_back("Tensor");
      sig.ret_kind = kRetTensor;
      sig.n_fn_returns = 1;
    } else if (ret_type == "Array<Tensor>" && !sig.contract) {
      sig.returns.push_back("Tensor[]");
      sig.ret_kind = kRetTensorList;
    } else if (ret_type == "int" || ret_type == "float" || ret_type == "bool") {
      sig.returns.push_back(ScalarSchema(ret_type));
      sig.ret_kind = ret_type == "int" ? kRetInt : ret_type == "float" ? kRetFloat : kRetBool;
    } else {
      KFFI_THROW(TypeError) << "kffi.torch: " << label << " returns " << ret_type
                            << "; a torch op made from it returns tensors (a contract's outputs, "
                               "Tensor, Array<Tensor>), int, float, bool or None";
    }
  }
  for (const SigParam& p : params) {
    if (p.allocated) sig.AllocDims(p);  // fail now when a dimension is not fixed by the arguments
  }
  return sig;
}

namespace {

/// For kffi.torch (_schema.py): the signature as [schema, plan, label, ret_kind, n_fn_returns,
/// contract, returns, device_arg, params, record_names], each param [name, kind, schema_type or
/// None, optional, has_default, mutable, allocated, dtypes, alloc_dims (flat (arg, value)
/// pairs), record fields ([schema name, kind, schema_type, field name] each), record type key].
Array<Any> OpSignatureForPython(const std::string& metadata, const std::string& qualname,
                                const std::string& fallback_label, bool has_mutates,
                                Array<String> mutates, int64_t allocate,
                                Array<String> allocate_names) {
  SignatureOptions options;
  options.has_mutates = has_mutates;
  for (const String& s : mutates) options.mutates.emplace_back(s.data(), s.size());
  options.allocate = static_cast<int>(allocate);
  for (const String& s : allocate_names) options.allocate_names.emplace_back(s.data(), s.size());
  OpSignature sig = SignatureOf(metadata, qualname, fallback_label, options);
  std::string schema = sig.Schema();
  std::vector<int64_t> plan = sig.Plan();
  Array<Any> params;
  for (const SigParam& p : sig.params) {
    Array<String> dtypes;
    for (const std::string& d : p.dtypes) dtypes.push_back(String(d));
    Array<int64_t> dims;
    if (p.allocated) {
      for (const auto& [arg, value] : sig.AllocDims(p)) {
        dims.push_back(arg);
        dims.push_back(value);
      }
    }
    Any schema_type;
    if (!p.schema_type.empty()) schema_type = String(p.schema_type);
    Array<Any> fields;
    for (const SigParam& f : p.fields) {
      fields.push_back(
          Array<Any>{String(f.name), String(f.kind), String(f.schema_type), String(f.field_name)});
    }
    params.push_back(Array<Any>{String(p.name), String(p.kind), schema_type, p.optional,
                                p.has_default, p.is_mutable, p.allocated, dtypes, dims, fields,
                                String(p.record_key)});
  }
  Array<String> returns;
  for (const std::string& r : sig.returns) returns.push_back(String(r));
  Array<String> record_names;
  for (const std::string& n : sig.RecordNames()) record_names.push_back(String(n));
  return Array<Any>{String(schema),   Array<int64_t>(plan), String(sig.label), sig.ret_kind,
                    sig.n_fn_returns, sig.contract,         returns,           sig.DeviceArg(),
                    params,           record_names};
}

}  // namespace
}  // namespace torchglue
}  // namespace kffi

KFFI_EXPORT_DOC(op_signature, kffi::torchglue::OpSignatureForPython,
                "The torch op signature of a kffi function, from its metadata (JSON)",
                "metadata, qualname, fallback_label, has_mutates, mutates, allocate, "
                "allocate_names");
