// python/kffi/torch/_signature.h: a kffi function's torch op signature, derived from its metadata.
//
// The one derivation of kffi's torch ops: kffi.torch (Python, through the glue's `op_signature`
// export; _schema.py is its thin caller) and kffi::torch::RegisterOps(module, ns) (C++) both use
// it. From the metadata every export carries (`params` with `name`/`type`/`default`) and the
// structured contract fields (`kind`, `optional`, `shape`, `dtypes`, `mutable`, `mutates`,
// `outputs`), it derives:
//   - the torch schema: argument names, types (`Tensor`, `Tensor(a!)` for a tensor the function
//     writes, `Tensor?`, `SymInt`, `float`, `bool`, `str`, lists), defaults and returns;
//   - the call plan _dispatch.cc follows (see there): which kffi parameter takes which schema
//     argument, the current stream, an allocated output or None;
//   - the rules that shape allocated outputs (a literal, or a dimension of an argument).
// A record parameter (a kffi object type with fields and a default constructor: a KFFI_OBJECT_DEF
// type or a KFFI_RECORD struct) becomes its writable scalar fields, one schema argument each,
// named `<param>_<field>` (torch schema names cannot hold a dot); the kernel rebuilds the object.
// Stream parameters are not in the schema: the op passes the current stream of the call's device.
// `mut` tensors are arguments written in place, unless the op allocates them (`allocate`): then
// they leave the schema and are returned, before the contract's declared outputs.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TORCH_SIGNATURE_H_
#define KFFI_TORCH_SIGNATURE_H_

#include <kffi/c_api.h>
#include <kffi/details/json.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "_pytext.h"  // PyRepr: messages worded as kffi.torch's

namespace kffi {
namespace torchglue {

/// One dimension of a declared tensor shape: an int, a symbol, a wildcard ("*x") or something
/// else (kept for messages).
struct SigDim {
  enum Kind { kInt, kSymbol, kWildcard, kOther } kind = kOther;
  int64_t value = 0;
  std::string symbol;  // kSymbol, kWildcard
  std::string repr;    // as Python's repr writes it (messages)
};

/// One parameter of the kffi function and where it stands in the op.
struct SigParam {
  int64_t index = 0;
  std::string name;
  std::string kind;         // "tensor", "int", "float", "bool", "str", "list", "stream", "record"
  std::string schema_type;  // empty: not an op argument (stream, allocated output)
  bool optional = false;
  bool has_default = false;
  details::Json default_value;  // when has_default (null for an optional without one)
  bool is_mutable = false;
  bool allocated = false;
  bool has_shape = false;
  std::vector<SigDim> shape;
  std::vector<std::string> dtypes;  // empty: any
  // kind "record": the object type and its fields, each a schema argument (kind int, float,
  // bool or str) named `<param>_<field>`.
  int32_t record_type = -1;
  std::string record_key;
  std::vector<SigParam> fields;
  // A record's field: its name in the type.
  std::string field_name;
};

/// A declared returned output of a contract: its name, dtype options and one RPN token list
/// per dimension (the metadata's shape_rpn).
struct SigOutput {
  std::string name;
  std::vector<std::string> dtypes;
  std::vector<std::vector<details::Json>> shape_rpn;
};

/// The op made from one kffi function.
struct OpSignature {
  std::string qualname;
  std::string label;  // the function's name, for messages
  std::vector<SigParam> params;
  std::vector<std::string> returns;  // torch return types
  int64_t ret_kind = 0;              // RetKind (_dispatch.h)
  int64_t n_fn_returns = 0;          // tensors the function itself returns
  std::vector<SigOutput> outputs;    // declared returned outputs (contracts)
  bool contract = false;

  /// The op's arguments (the parameters with a schema type, a record's fields in its place), in
  /// order.
  std::vector<const SigParam*> SchemaArgs() const;
  /// The names of the tensors the op writes in place (not the allocated ones).
  std::vector<std::string> Mutated() const;
  /// Their positions among the schema arguments.
  std::vector<int64_t> Written() const;
  /// The torch schema without the name: `(Tensor(a!) y, Tensor x, float f=2.) -> ()`.
  std::string Schema() const;
  /// The flat call plan of _dispatch.cc.
  std::vector<int64_t> Plan() const;
  /// What the plan's records are, by name (no process-local index crosses a manifest): per
  /// record parameter, its type key, then its fields' names, in the plan's order.
  std::vector<std::string> RecordNames() const;
  /// The schema argument whose device a call uses: the first required tensor (else the first
  /// tensor; -1 when none).
  int64_t DeviceArg() const;
  /// Per dimension of an allocated output: (-1, literal) or (schema argument, its dimension).
  std::vector<std::pair<int64_t, int64_t>> AllocDims(const SigParam& p) const;
};

/// What a caller chooses beyond the metadata (kffi.torch.register_op's arguments).
struct SignatureOptions {
  bool has_mutates = false;  // mutates_args given
  std::vector<std::string> mutates;
  int allocate = 0;  // 0: none, 1: every `mut` tensor (allocate=True), 2: allocate_names
  std::vector<std::string> allocate_names;
};

/// The signature of the function whose metadata (JSON text) is `metadata`, as the op
/// `qualname`. `fallback_label` names it in messages when the metadata has no name. TypeError or
/// ValueError (kffi::Error) with kffi.torch's messages when no op can be made from it.
OpSignature SignatureOf(const std::string& metadata, const std::string& qualname,
                        const std::string& fallback_label, const SignatureOptions& options);

/// The type text of every parameter of the metadata (JSON text), "" where it has none: what a
/// plan's records are checked against (RegisterOp's param_types).
std::vector<std::string> MetadataParamTypes(const std::string& metadata);

/// Whether the metadata (JSON text) carries a structured contract (a "mutates" field).
bool HasStructuredContract(const std::string& metadata);

/// One field of a record type: its name and the runtime's record of it (process lifetime).
struct RecordField {
  std::string name;
  const KFFIFieldInfo* info;
};

/// The fields of the registered type `type_index` and its ancestors, the ancestors' first, a
/// name declared again resolved to its nearest declaration: the one order and resolution of a
/// record's fields, for the signature and for the plan reader.
std::vector<RecordField> RecordFieldsOf(int32_t type_index);

}  // namespace torchglue
}  // namespace kffi

#endif  // KFFI_TORCH_SIGNATURE_H_
