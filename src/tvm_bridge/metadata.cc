// src/tvm_bridge/metadata.cc: TVM-FFI function metadata (type schema JSON, docstring) -> kffi's.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/details/json.h>
#include <kffi/error.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/json_writer.h"
#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

using details::Json;  // kffi/details/json.h: the one JSON reader of kffi's C++ side
using details::JsonReader;
using details::kMaxJsonDepth;

std::string StripFfi(const std::string& key) {
  return key.compare(0, 4, "ffi.") == 0 ? key.substr(4) : key;
}

// A TVM-FFI type schema ({"type": key, "args": [...]}) as kffi writes types in signatures.
std::string TypeText(const Json& schema, int depth) {
  const std::string* key = schema.GetString("type");
  if (key == nullptr || depth > kMaxJsonDepth) return "Any";
  std::vector<std::string> args;
  if (const Json* a = schema.Get("args"); a != nullptr && a->kind == Json::kArray) {
    for (const Json& item : a->items) args.push_back(TypeText(item, depth + 1));
  }
  auto with_args = [&](const std::string& name) {
    if (args.empty()) return name;
    std::string out = name + "<";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
    return out + ">";
  };
  const std::string& k = *key;
  if (k == "int" || k == "float" || k == "bool" || k == "None" || k == "void*") return k;
  if (k == "Any" || k == "ffi.Any" || k == "AnyView") return "Any";
  if (k == "ffi.String" || k == "ffi.Str" || k == "str" || k == "std::string") return "str";
  if (k == "ffi.Bytes" || k == "bytes") return "bytes";
  if (k == "DLTensor*" || k == "ffi.Tensor" || k == "ffi.TensorView" || k == "Tensor") {
    return "Tensor";
  }
  if (k == "DataType" || k == "ffi.DataType" || k == "DLDataType") return "DataType";
  if (k == "Device" || k == "ffi.Device" || k == "DLDevice") return "Device";
  if (k == "ffi.Function") return "Function";
  if (k == "Optional" || k == "ffi.Optional") return with_args("Optional");
  if (k == "Variant" || k == "ffi.Variant") return with_args("Variant");
  if (k == "Tuple" || k == "ffi.Tuple") return with_args("Tuple");
  return with_args(StripFfi(k));
}

// The kind a kffi signature gives a parameter (metadata `kind`), and whether it is Optional.
std::string KindOf(const Json& schema, bool* optional) {
  const std::string* key = schema.GetString("type");
  if (key == nullptr) return "any";
  if (*key == "Optional" || *key == "ffi.Optional") {
    *optional = true;
    const Json* a = schema.Get("args");
    bool ignored = false;
    return a != nullptr && a->kind == Json::kArray && !a->items.empty()
               ? KindOf(a->items.front(), &ignored)
               : "any";
  }
  std::string t = TypeText(schema, 0);
  if (t == "Tensor") return "tensor";
  if (t == "int" || t == "float" || t == "bool" || t == "str") return t;
  if (t.compare(0, 5, "Tuple") == 0) return "tuple";
  return "any";
}

// The return type and parameter schemas of a function schema, in either of the layouts TVM-FFI
// has written: {"args": [ret, p0, p1, ...]} or {"named_args": {"return": [ret], "params": [...]}}.
bool SplitFunctionSchema(const Json& schema, const Json** ret, std::vector<const Json*>* params) {
  if (const Json* named = schema.Get("named_args"); named != nullptr) {
    const Json* r = named->Get("return");
    const Json* p = named->Get("params");
    if (r != nullptr && r->kind == Json::kArray && !r->items.empty()) *ret = &r->items.front();
    if (r != nullptr && r->kind == Json::kObject) *ret = r;
    if (p == nullptr || p->kind != Json::kArray) return false;
    for (const Json& item : p->items) params->push_back(&item);
    return true;
  }
  const Json* args = schema.Get("args");
  if (args == nullptr || args->kind != Json::kArray || args->items.empty()) return false;
  *ret = &args->items.front();
  for (size_t i = 1; i < args->items.size(); ++i) params->push_back(&args->items[i]);
  return true;
}

// The outer metadata document's function schema (the `type_schema` string, or an object inline
// from older writers) parsed into *schema; false with the reason in *why.
bool ParseTypeSchema(const std::string& tvm_metadata, Json* schema, std::string* why) {
  Json outer;
  JsonReader outer_reader(tvm_metadata);
  if (!outer_reader.Parse(&outer)) {
    *why = outer_reader.error();
    return false;
  }
  if (const std::string* text = outer.GetString("type_schema"); text != nullptr) {
    JsonReader inner(*text);
    if (!inner.Parse(schema)) {
      *why = "type_schema: " + inner.error();
      return false;
    }
    return true;
  }
  if (const Json* inline_schema = outer.Get("type_schema");
      inline_schema != nullptr && inline_schema->kind == Json::kObject) {
    *schema = *inline_schema;
    return true;
  }
  *why = "no `type_schema`";
  return false;
}

// The type keys of parameters that take a borrowed tensor: TensorView and DLTensor* parameters
// (apache-tvm-ffi writes "DLTensor*" for both; "ffi.TensorView" is kept for other writers).
bool TakesBorrowedTensor(const Json& schema) {
  const std::string* key = schema.GetString("type");
  return key != nullptr && (*key == "DLTensor*" || *key == "ffi.TensorView");
}

}  // namespace

OwnedTensorMask OwnedTensorParams(const std::string& tvm_metadata) {
  if (tvm_metadata.empty()) return kAllOwned;
  Json schema;
  std::string why;
  const Json* ret = nullptr;
  std::vector<const Json*> params;
  if (!ParseTypeSchema(tvm_metadata, &schema, &why) ||
      !SplitFunctionSchema(schema, &ret, &params)) {
    return kAllOwned;  // the load-time metadata reader reports it; calls stay correct
  }
  OwnedTensorMask mask = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!TakesBorrowedTensor(*params[i])) mask |= OwnedTensorMask{1} << (i < 63 ? i : 63);
  }
  return mask;
}

bool TryConvertMetadata(const std::string& name, const std::string& tvm_metadata,
                        const std::string& doc, std::string* out_json, std::string* why) {
  out_json->clear();
  if (tvm_metadata.empty()) return true;
  // The schema is itself JSON, stored as a string (older writers put the object inline).
  Json schema;
  if (!ParseTypeSchema(tvm_metadata, &schema, why)) return false;
  const Json* ret = nullptr;
  std::vector<const Json*> params;
  if (!SplitFunctionSchema(schema, &ret, &params)) {
    *why = "not a function type schema";
    return false;
  }

  // kffi's metadata format, through the one JSON writer of the headers.
  details::JsonWriter w;
  w.BeginObject().Field("name", name).Key("params").BeginArray();
  for (size_t i = 0; i < params.size(); ++i) {
    bool optional = false;
    std::string kind = KindOf(*params[i], &optional);
    w.BeginObject()
        .Field("name", "arg" + std::to_string(i))
        .Field("type", TypeText(*params[i], 0))
        .Field("kind", kind)
        .Key("optional")
        .Bool(optional);
    if (optional) w.Key("default").Null();
    w.EndObject();
  }
  w.EndArray()
      .Field("return", ret != nullptr ? TypeText(*ret, 0) : std::string("None"))
      .Field("doc", doc)
      .Field("abi", "tvm-ffi")
      .EndObject();
  std::string out = w.Take();
  *out_json = std::move(out);
  return true;
}

std::string ConvertMetadata(const std::string& name, const std::string& tvm_metadata,
                            const std::string& doc) {
  std::string json, why;
  if (!TryConvertMetadata(name, tvm_metadata, doc, &json, &why)) {
    KFFI_THROW(ValueError) << "The TVM-FFI metadata of function `" << name
                           << "` (`__tvm_ffi__metadata_" << name << "`) is malformed: " << why;
  }
  return json;
}

}  // namespace tvmglue
}  // namespace kffi
