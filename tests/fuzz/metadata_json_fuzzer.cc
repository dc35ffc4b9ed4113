// tests/fuzz/metadata_json_fuzzer.cc: libFuzzer target for function metadata JSON, both ways.
//
// Writing: the metadata an export writes (KFFIExportGetMetadata, the runtime's one JsonWriter) for
// any name, parameter types, parameter names and docstring must be one valid JSON object, checked
// by a strict reader here (RFC 8259 grammar: only the escapes it defines, no raw control
// characters, nothing after the document), whose strings read back byte for byte.
//
// Reading: the runtime reads metadata from a library's `__kffi__meta_<name>` symbol
// (KFFIModuleGetFunctionMetadata). A symbol registered in the system library here returns what
// the input says: a str of any bytes, another kind of value (an int, an object), an error, a
// failure that raises nothing, or a status code outside the protocol. The runtime must hand back
// the str, or fail with a well-formed error that names the symbol, and leak nothing. The JSON
// reader of TVM-FFI metadata has its own target (tvm_metadata_fuzzer.cc).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/details/json.h>
#include <kffi/error.h>
#include <kffi/export.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "module/param_names.h"

namespace {

// The strict JSON reader is libkffi's one reader (kffi/details/json.h: RFC 8259 grammar, only the
// escapes it defines, no raw control characters, nothing after the document).
using JsonValue = kffi::details::Json;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t U8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  std::string Bytes(size_t max) {
    size_t len = U8() % (max + 1);
    std::string s;
    for (size_t i = 0; i < len && n_ > 0; ++i) s += static_cast<char>(U8());
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// ---- writing ----------------------------------------------------------------------------------

void CheckWriter(Input& in) {
  std::string name = in.Bytes(24);
  std::vector<std::string> types(in.U8() % 5);
  for (std::string& t : types) t = in.Bytes(16);
  if (in.U8() % 4 == 0 && !types.empty()) types[0] = "Optional<" + types[0] + ">";
  std::string return_type = in.Bytes(16);
  std::string doc = in.Bytes(64);
  std::string param_names = in.Bytes(40);
  // The macros pass C strings: the text stops at its first NUL.
  for (std::string* s : {&name, &doc, &param_names})
    s->resize(std::char_traits<char>::length(s->c_str()));
  // Through the C API the export macros call (KFFIExportGetMetadata).
  std::vector<KFFIByteArray> type_arrays;
  for (const std::string& t : types) type_arrays.push_back({t.data(), t.size()});
  KFFIByteArray ret_array{return_type.data(), return_type.size()};
  KFFIAny out{};
  if (KFFIExportGetMetadata(name.c_str(), doc.c_str(), param_names.c_str(), type_arrays.data(),
                            static_cast<int32_t>(types.size()), &ret_array, &out) != 0) {
    __builtin_trap();  // any bytes make metadata
  }
  std::string_view view;
  if (!kffi::details::ReadStrView(&out, &view)) __builtin_trap();
  std::string json(view);
  if (out.type_index >= kKFFIStaticObjectBegin) KFFIObjectDecRef(out.v_obj);
  JsonValue v;
  if (!kffi::details::JsonReader(json).Parse(&v)) __builtin_trap();  // not valid JSON
  if (v.kind != JsonValue::kObject) __builtin_trap();
  const JsonValue* n = v.Get("name");
  const JsonValue* params = v.Get("params");
  const JsonValue* ret = v.Get("return");
  const JsonValue* d = v.Get("doc");
  if (n == nullptr || n->str != name || ret == nullptr || ret->str != return_type || d == nullptr ||
      d->str != doc || params == nullptr || params->kind != JsonValue::kArray ||
      params->items.size() != types.size()) {
    __builtin_trap();  // a field did not read back as written
  }
  std::vector<std::string> names = kffi::details::SplitParamNames(param_names.c_str());
  for (size_t i = 0; i < types.size(); ++i) {
    const JsonValue& p = params->items[i];
    const JsonValue* pn = p.Get("name");
    const JsonValue* pt = p.Get("type");
    const std::string want_name =
        i < names.size() && !names[i].empty() ? names[i] : kffi::details::DefaultParamName(i);
    // A writable tensor's `Tensor(mut)` is written as `Tensor` with "mutable": true.
    std::string want_type = types[i];
    const size_t writable = want_type.find("Tensor(mut)");
    if (writable != std::string::npos) want_type.replace(writable, 11, "Tensor");
    const JsonValue* mut = p.Get("mutable");
    if (pn == nullptr || pn->str != want_name || pt == nullptr || pt->str != want_type ||
        (writable != std::string::npos) != (mut != nullptr && mut->kind == JsonValue::kBool)) {
      __builtin_trap();
    }
    // "Optional<T>" (a T inside): such a parameter gets "default": null.
    const bool optional =
        types[i].size() > 10 && types[i].compare(0, 9, "Optional<") == 0 && types[i].back() == '>';
    if ((p.Get("default") != nullptr) != optional) __builtin_trap();
  }
}

// ---- reading ----------------------------------------------------------------------------------

/// What the metadata symbol does on the next call.
struct MetaBehaviour {
  int what = 0;
  std::string text;
  int64_t code = 0;
};
MetaBehaviour g_meta;

int FuzzFunctionSymbol(void*, const KFFIAny*, int32_t, KFFIAny*) { return 0; }

int FuzzMetaSymbol(void*, const KFFIAny*, int32_t, KFFIAny* result) {
  KFFIByteArray b{g_meta.text.data(), g_meta.text.size()};
  switch (g_meta.what) {
    case 0:  // a str (small or not)
      return KFFIStringFromByteArray(&b, result);
    case 1:  // bytes: not a str
      return KFFIBytesFromByteArray(&b, result);
    case 2:  // an int
      kffi::details::SetPOD(result, kKFFIInt);
      result->v_int64 = g_meta.code;
      return 0;
    case 3: {  // an error object as the value
      KFFIObjectHandle e = nullptr;
      KFFIByteArray kind{"ValueError", 10};
      if (KFFIErrorCreate(&kind, &b, nullptr, &e) != 0) return -1;
      kffi::details::SetObject(result, static_cast<KFFIObject*>(e));
      return 0;
    }
    case 4:  // a raised error
      KFFIErrorSetRaisedFromCStr("ValueError", g_meta.text.c_str());
      return -1;
    case 5:  // a failure that raised nothing
      return -1;
    case 6:  // a status outside the protocol, with a value left in the result
      if (KFFIStringFromByteArray(&b, result) != 0) return -1;
      return static_cast<int>(g_meta.code);
    default:  // nothing: None
      return 0;
  }
}

KFFIObjectHandle SystemLib() {
  static KFFIObjectHandle lib = [] {
    if (KFFIModuleRegisterSystemLibSymbol("__kffi_fuzz_meta",
                                          reinterpret_cast<void*>(&FuzzFunctionSymbol)) != 0 ||
        KFFIModuleRegisterSystemLibSymbol("__kffi__meta_fuzz_meta",
                                          reinterpret_cast<void*>(&FuzzMetaSymbol)) != 0) {
      __builtin_trap();
    }
    KFFIObjectHandle m = nullptr;
    if (KFFIModuleGetSystemLib(&m) != 0) __builtin_trap();
    return m;
  }();
  return lib;
}

void CheckReader(Input& in) {
  g_meta.what = in.U8() % 8;
  g_meta.text = in.Bytes(48);
  g_meta.code = static_cast<int8_t>(in.U8());
  KFFIByteArray name{"fuzz_meta", 9};
  KFFIAny out;
  kffi::details::SetNone(&out);
  int rc = KFFIModuleGetFunctionMetadata(SystemLib(), &name, &out);
  if (rc == 0) {
    if (g_meta.what == 0 || (g_meta.what == 6 && g_meta.code == 0)) {
      // The str itself, whatever its bytes.
      std::string_view got;
      if (!kffi::details::ReadStrView(&out, &got) || got != g_meta.text) __builtin_trap();
    } else if (out.type_index != kKFFINone) {
      __builtin_trap();  // only a str or None comes back
    }
    if (out.type_index >= kKFFIStaticObjectBegin) KFFIObjectDecRef(out.v_obj);
    return;
  }
  if (out.type_index != kKFFINone) __builtin_trap();  // a failure leaves no value
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (rc == -2 && g_meta.what == 6 && g_meta.code == -2) {
    // A pending signal (the Python binding's -2) passes through as it came.
    if (err != nullptr) KFFIObjectDecRef(err);
    return;
  }
  if (rc != -1 || err == nullptr) __builtin_trap();  // a failure always raises
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  std::string kind(cell->kind.data, cell->kind.size);
  std::string message(cell->message.data, cell->message.size);
  KFFIObjectDecRef(err);
  if (g_meta.what == 4) {
    if (kind != "ValueError") __builtin_trap();  // the symbol's own error passes unchanged
    return;
  }
  // Every other failure is the runtime's, naming the symbol.
  if ((kind != "TypeError" && kind != "RuntimeError") ||
      message.find("__kffi__meta_fuzz_meta") == std::string::npos) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  if (in.U8() % 2 == 0) {
    CheckWriter(in);
  } else {
    CheckReader(in);
  }
  return 0;
}
