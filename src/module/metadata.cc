// src/module/metadata.cc: function metadata JSON, written by the runtime for every export: plain
// exports (KFFIExportGetMetadata) and exports with a contract (KFFIContractGetMetadata), through
// the one JsonWriter (json_writer.h). The keys are documented in include/kffi/export.h and
// include/kffi/contract.h; tests pin them.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>
#include <kffi/function.h>
#include <kffi/optional.h>

#include <string>
#include <string_view>
#include <vector>

#include "contract/contract_internal.h"
#include "core/json_writer.h"
#include "core/runtime_internal.h"
#include "module/param_names.h"

namespace kffi {
namespace details {
namespace {

/// The name of parameter i: the given one, else arg<i>.
std::string ParamName(const std::vector<std::string>& names, size_t i) {
  return i < names.size() && !names[i].empty() ? names[i] : DefaultParamName(i);
}

/// The metadata JSON of an export: {"name", "params": [{"name", "type"}], "return", "doc"}.
/// Parameters without a given name are called arg0, arg1, ...; an Optional<T> parameter has
/// "default": null. A tensor parameter the function may write (kffi::TensorView, DLTensor*: its
/// C++ type string says `Tensor(mut)`) is written with the type `Tensor` and "mutable": true, the
/// key contract metadata uses for `mut` tensors, so that every reader asks one question.
std::string ExportMetadataJson(const char* name, const std::vector<std::string>& types,
                               std::string_view return_type, const char* doc,
                               const char* param_names) {
  static constexpr std::string_view kWritable = "Tensor(mut)";
  std::vector<std::string> names = SplitParamNames(param_names);
  JsonWriter w;
  w.BeginObject().Field("name", name).Key("params").BeginArray();
  for (size_t i = 0; i < types.size(); ++i) {
    std::string type = types[i];
    const size_t writable = type.find(kWritable);
    if (writable != std::string::npos) type.replace(writable, kWritable.size(), "Tensor");
    w.BeginObject().Field("name", ParamName(names, i)).Field("type", type);
    std::string_view inner;
    if (OptionalTypeInner(type, &inner)) w.Key("default").Null();
    if (writable != std::string::npos) w.Key("mutable").Bool(true);
    w.EndObject();
  }
  w.EndArray().Field("return", return_type).Field("doc", doc).EndObject();
  return w.Take();
}

/// "name(a: int, arg1: str) -> None" (Signature<R, Args...>::Str's text).
std::string FormatSignatureText(std::string_view name, const char* param_names,
                                const std::vector<std::string>& types,
                                std::string_view return_type) {
  std::vector<std::string> names = SplitParamNames(param_names);
  const bool named = names.size() == types.size();
  std::string out = std::string(name) + "(";
  for (size_t i = 0; i < types.size(); ++i) {
    out += (i ? ", " : "") + (named && !names[i].empty() ? names[i] : DefaultParamName(i)) + ": " +
           types[i];
  }
  return out + ") -> " + std::string(return_type);
}

/// The types of a C call as strings; ValueError for malformed arguments.
std::vector<std::string> TypesArg(const KFFIByteArray* types, int32_t num, const char* fn) {
  if (num < 0 || (num > 0 && types == nullptr)) {
    ThrowCApiError("ValueError", std::string(fn) + ": invalid parameter types");
  }
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(num));
  for (int32_t i = 0; i < num; ++i) out.emplace_back(ByteArrayArg(&types[i], fn));
  return out;
}

}  // namespace

namespace contract {
namespace {

/// The "kind" of a contract type in metadata.
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kTensor:
      return "tensor";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kBool:
      return "bool";
    case Kind::kTuple:
      return "tuple";
    case Kind::kRecord:
      return "record";
    default:
      return "stream";
  }
}

/// A type's structured fields in metadata: kind, optional, and per kind: a tensor's shape (ints
/// and symbol names), dtypes (names; empty: any), device (its text, e.g. "cuda" or "cpu|cuda";
/// null: any) and mutable; a scalar's range ([lo, hi], when declared); a tuple's elems (each
/// with "type" and these fields); a record's type_key and constrained fields (each with "name",
/// "type" and these fields). Optional and Stream parameters take None: "default": null.
void WriteTypeFields(JsonWriter* w, const TypeAst& t) {
  w->Field("kind", KindName(t.kind)).Key("optional").Bool(t.optional);
  if (t.optional || t.kind == Kind::kStream) w->Key("default").Null();
  if (t.kind == Kind::kTensor) {
    const TensorAst& ts = t.tensor;
    w->Key("shape").BeginArray();
    for (const DimAst& d : ts.shape) {
      if (d.is_symbol) {
        w->String(d.symbol);
      } else {
        w->Int(d.literal);
      }
    }
    w->EndArray().Key("dtypes").BeginArray();
    for (DLDataType dt : ts.dtypes) w->String(DataTypeToString(dt));
    w->EndArray().Key("device");
    if (ts.device_text.empty()) {
      w->Null();
    } else {
      w->String(ts.device_text);
    }
    w->Key("mutable").Bool(ts.mut);
  } else if (t.has_range) {
    w->Key("range").BeginArray();
    if (t.kind == Kind::kInt) {
      w->Int(t.int_lo).Int(t.int_hi);
    } else {
      w->Double(t.float_lo).Double(t.float_hi);
    }
    w->EndArray();
  } else if (t.kind == Kind::kRecord) {
    // The constrained fields, each with its type as written and these fields (kind, range).
    w->Field("type_key", t.name).Key("fields").BeginArray();
    for (size_t i = 0; i < t.elems.size(); ++i) {
      w->BeginObject().Field("name", t.field_names[i]).Field("type", t.elems[i].text);
      WriteTypeFields(w, t.elems[i]);
      w->EndObject();
    }
    w->EndArray();
  } else if (t.kind == Kind::kTuple) {
    w->Key("elems").BeginArray();
    for (const TypeAst& e : t.elems) {  // nesting is bounded by the parser (kMaxTypeDepth)
      w->BeginObject().Field("type", e.text);
      WriteTypeFields(w, e);
      w->EndObject();
    }
    w->EndArray();
  }
}

}  // namespace

std::string ContractMetadataJson(const Plan& p, std::string_view return_type,
                                 std::string_view doc) {
  JsonWriter w;
  w.BeginObject().Field("name", p.name).Key("params").BeginArray();
  for (size_t i : p.call_params) {
    const ParamAst& param = p.ast.params[i];
    // A record parameter's type is its type key, as an export without a contract spells it
    // (what kffi's Python side matches dataclasses against); its fields follow.
    const TypeAst& t = param.type;
    w.BeginObject().Field("name", param.name);
    if (t.kind == Kind::kRecord) {
      w.Field("type", t.optional ? "Optional[" + t.name + "]" : t.name);
    } else {
      w.Field("type", param.type_text);
    }
    WriteTypeFields(&w, param.type);
    w.EndObject();
  }
  w.EndArray().Field("return", return_type).Field("doc", doc).Field("contract", p.text);
  w.Key("outputs").BeginArray();
  for (const OutputAst& o : p.ast.outputs) {
    w.BeginObject().Field("name", o.name).Field("type", o.type_text).Key("shape").BeginArray();
    for (const std::string& text : o.tensor.shape_texts) w.String(text);
    w.EndArray().Key("shape_rpn").BeginArray();
    for (const auto& rpn : o.tensor.shape_rpn) {
      w.BeginArray();
      for (const RpnToken& t : rpn) {
        if (t.op == RpnOp::kLit) {
          w.Int(t.value);
        } else if (t.op == RpnOp::kSym) {
          w.String(t.symbol);
        } else {
          w.String(RpnOpName(t.op));
        }
      }
      w.EndArray();
    }
    w.EndArray().Field("dtype", o.tensor.dtype_text).EndObject();
  }
  w.EndArray().Key("symbols").BeginArray();
  for (const SymbolInfo& sym : p.symbols) {
    w.BeginObject()
        .Field("name", sym.name)
        .Field("width", sym.bits == 32 ? "int32" : "int64")
        .Key("divisibility")
        .Int(sym.divisibility);
    if (sym.parallel) w.Key("parallel").Bool(true);  // only when declared: older readers agree
    w.EndObject();
  }
  w.EndArray().Key("env_stream").Bool(p.layout.has_env_stream != 0).Key("mutates").BeginArray();
  for (size_t i : p.call_params) {
    const TypeAst& t = p.ast.params[i].type;
    if (t.kind == Kind::kTensor && t.tensor.mut) w.String(p.ast.params[i].name);
  }
  w.EndArray().EndObject();
  return w.Take();
}

}  // namespace contract
}  // namespace details
}  // namespace kffi

extern "C" int KFFIExportGetMetadata(const char* name, const char* doc, const char* param_names,
                                     const KFFIByteArray* param_types, int32_t num_params,
                                     const KFFIByteArray* return_type, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  using namespace kffi::details;  // NOLINT(google-build-using-namespace): the runtime's own
  if (name == nullptr) ThrowCApiError("ValueError", "KFFIExportGetMetadata: name is NULL");
  CheckOutArg(out, "KFFIExportGetMetadata: out");
  const std::vector<std::string> types = TypesArg(param_types, num_params, "KFFIExportGetMetadata");
  const std::string json =
      ExportMetadataJson(name, types, ByteArrayArg(return_type, "KFFIExportGetMetadata"),
                         doc ? doc : "", param_names ? param_names : "");
  MakeStringAny(json.data(), json.size(), false, out);
  KFFI_CAPI_END();
}

int KFFIFunctionFormatSignature(const char* name, const char* param_names,
                                const KFFIByteArray* param_types, int32_t num_params,
                                const KFFIByteArray* return_type, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  using namespace kffi::details;  // NOLINT(google-build-using-namespace): the runtime's own
  if (name == nullptr) ThrowCApiError("ValueError", "KFFIFunctionFormatSignature: name is NULL");
  CheckOutArg(out, "KFFIFunctionFormatSignature: out");
  const std::string text =
      FormatSignatureText(name, param_names ? param_names : "",
                          TypesArg(param_types, num_params, "KFFIFunctionFormatSignature"),
                          ByteArrayArg(return_type, "KFFIFunctionFormatSignature"));
  MakeStringAny(text.data(), text.size(), false, out);
  KFFI_CAPI_END();
}

void KFFIErrorSetRaisedCallArgument(const char* name, const char* param_names,
                                    const KFFIByteArray* types, int32_t num_params, int32_t index,
                                    const char* got, const KFFIAny* arg, int32_t num_args) {
  using namespace kffi::details;  // NOLINT(google-build-using-namespace): the runtime's own
  static constexpr const char* kFn = "KFFIErrorSetRaisedCallArgument";
  // The conversion's error this raises again, taken first: whatever happens below replaces it.
  struct Cause {
    KFFIObjectHandle h = nullptr;
    ~Cause() {
      if (h != nullptr) KFFIObjectDecRef(h);
    }
  } cause;
  if (index >= 0 && got == nullptr) KFFIErrorMoveFromRaised(&cause.h);
  try {
    if (name == nullptr) ThrowCApiError("ValueError", std::string(kFn) + ": name is NULL");
    if (num_params < 0 || num_params == INT32_MAX || index < -1 || index >= num_params) {
      ThrowCApiError("ValueError", std::string(kFn) + ": index " + std::to_string(index) +
                                       " is not a parameter of " + std::to_string(num_params));
    }
    std::vector<std::string> all = TypesArg(types, num_params + 1, kFn);
    const std::string ret = std::move(all.back());
    all.pop_back();
    const std::string sig = FormatSignatureText(name, param_names ? param_names : "", all, ret);
    if (index < 0) {
      const std::string want = Counted(num_params, "argument");
      const std::string have = std::to_string(num_args);
      KFFIErrorSetRaisedArgument("TypeError", name, want.c_str(), have.c_str(), nullptr, -1,
                                 sig.c_str());
      return;
    }
    const std::string param = ParamName(SplitParamNames(param_names), static_cast<size_t>(index));
    if (cause.h == nullptr) {
      // A value of the wrong type (got: its description; NULL with nothing raised: its type).
      KFFIErrorSetRaisedArgument("TypeError", param.c_str(),
                                 all[static_cast<size_t>(index)].c_str(), got, arg, index,
                                 sig.c_str());
      return;
    }
    // The conversion's own error, said of the parameter: its kind and backtrace kept.
    const KFFIErrorCell* cell = KFFIErrorGetCellPtr(cause.h);
    const std::string kind(cell->kind.data, cell->kind.size);
    const std::string message(cell->message.data, cell->message.size);
    KFFIErrorSetRaisedArgument(kind.c_str(), param.c_str(), nullptr, message.c_str(), nullptr,
                               index, sig.c_str());
    if (cell->backtrace.size != 0) {
      KFFIObjectHandle h = nullptr;
      KFFIErrorMoveFromRaised(&h);
      if (h != nullptr) {
        KFFIErrorGetCellPtr(h)->update_backtrace(h, &cell->backtrace,
                                                 kKFFIBacktraceUpdateModeReplace);
        KFFIErrorSetRaised(h);
        KFFIObjectDecRef(h);
      }
    }
  }
  KFFI_CATCH_ALL { SetRaisedFromCurrentException(); }
}
