// python/kffi/torch/_register.cc: kffi::torch::RegisterOps, kffi ops registered from C++.
//
// RegisterOps(module, ns) registers every contract function of a loaded kffi module as ns::name:
// the schema and call plan come from the function's metadata (_signature.cc, the derivation
// kffi.torch uses in Python), the kernels are _dispatch.cc's, and a Meta kernel computed from the
// contract (_meta.cc) serves fake tensors (torch.export, AOTInductor) without Python.
// CheckPackage(pt2) lists the kffi ops (any custom ops) an AOTInductor package calls that are not
// registered, as a kffi error, before torch's loader meets them.
//
// The manifest form, RegisterOps(manifest_path):
// A C++ program that serves a model exported with kffi ops (an AOTInductor .pt2) registers them
// from the manifest kffi.torch.save_ops wrote, with no Python in the process: per op, the schema
// kffi.torch derived, the library (and its SHA-256) and function, and the call plan. The kernels
// are those of _dispatch.cc (RegisterOp), compiled into the same library: one implementation of
// the dispatcher glue for Python and C++.
//
// The manifest is text, one op a line, fields separated by tabs (no field holds a tab or a
// newline; save_ops refuses those):
//   kffi-torch-ops 2
//   <ns::name> <schema> <library> <sha256 hex> <function> <mutated> <written ints> <plan ints>
//       <record names>
// Ints and names are separated by spaces; `mutated` is the comma-separated names the op writes;
// the record names say what the plan's records are (per record its type key, then its fields'
// names: OpSignature::RecordNames), so that nothing in a manifest is an index of the process that
// wrote it. Version 1 (no record names) is read too, as long as its plans have no records.
// Everything read is checked against the library (its SHA-256, its functions and their
// metadata) and the live type registry; a refusal names the manifest, the line and the op.
// SPDX-License-Identifier: Apache-2.0
#include <ATen/core/dispatch/Dispatcher.h>
#include <caffe2/serialize/inline_container.h>
#include <kffi/container/array.h>
#include <kffi/details/json.h>
#include <kffi/details/sha256.h>
#include <kffi/error.h>
#include <kffi/export.h>
#include <kffi/function.h>
#include <kffi/module.h>
#include <kffi/torch.h>
#include <torch/library.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "_dispatch.h"
#include "_meta.h"
#include "_pytext.h"
#include "_signature.h"

namespace kffi {
namespace torchglue {
namespace {

constexpr const char* kMagic = "kffi-torch-ops 2";
constexpr const char* kMagicV1 = "kffi-torch-ops 1";    // no record names
constexpr size_t kMaxManifestBytes = size_t{16} << 20;  // a manifest is a few kB
constexpr size_t kMaxIntsPerField = 1 << 16;

/// The SHA-256 (hex) of the file at path; RuntimeError when it cannot be read.
std::string FileSha256(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  KFFI_CHECK(f != nullptr, RuntimeError)
      << "kffi::torch::RegisterOps: cannot read the kffi library " << path << ": "
      << std::strerror(errno);
  kffi::details::Sha256 hash;  // libkffi's own (kffi/details/sha256.h)
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) hash.Update(buf, n);
  KFFI_CHECK(!std::ferror(f.get()), RuntimeError)
      << "kffi::torch::RegisterOps: reading the kffi library " << path << " failed";
  return hash.HexDigest();
}

// ---- the manifest ---------------------------------------------------------------------------

std::string ReadManifest(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  KFFI_CHECK(f != nullptr, ValueError) << "kffi::torch::RegisterOps: cannot open the manifest "
                                       << path << ": " << std::strerror(errno);
  std::string text;
  char buf[1 << 14];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) {
    text.append(buf, n);
    KFFI_CHECK(text.size() <= kMaxManifestBytes, ValueError)
        << "kffi::torch::RegisterOps: the manifest " << path << " is larger than "
        << kMaxManifestBytes << " bytes; kffi.torch.save_ops writes a few kB";
  }
  KFFI_CHECK(!std::ferror(f.get()), ValueError)
      << "kffi::torch::RegisterOps: reading the manifest " << path << " failed";
  return text;
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

struct OpEntry {
  std::string qualname, schema, library, sha256, function, mutated;
  std::vector<int64_t> written, plan;
  std::vector<std::string> record_names;
  size_t line = 0;
};

class ManifestReader {
 public:
  explicit ManifestReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void Fail(size_t line, const std::string& what) const {
    KFFI_THROW(ValueError) << "kffi::torch::RegisterOps: " << path_ << " line " << line << ": "
                           << what << " (the manifest is written by kffi.torch.save_ops)";
  }

  std::vector<int64_t> Ints(size_t line, const std::string& field, const char* what) const {
    std::vector<int64_t> out;
    if (field.empty()) return out;
    for (const std::string& item : Split(field, ' ')) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || errno == ERANGE) {
        Fail(line, std::string(what) + " holds \"" + item + "\", expected an integer");
      }
      out.push_back(static_cast<int64_t>(v));
      if (out.size() > kMaxIntsPerField) Fail(line, std::string(what) + " is too long");
    }
    return out;
  }

  std::vector<OpEntry> Parse(const std::string& text) const {
    std::vector<std::string> lines = Split(text, '\n');
    const bool v1 = !lines.empty() && lines[0] == kMagicV1;
    if (lines.empty() || (lines[0] != kMagic && !v1)) {
      KFFI_THROW(ValueError) << "kffi::torch::RegisterOps: " << path_
                             << " is not a kffi op manifest (its first line is not \"" << kMagic
                             << "\"; kffi.torch.save_ops writes one)";
    }
    const size_t n_fields = v1 ? 8 : 9;
    std::vector<OpEntry> ops;
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      if (line.empty()) continue;
      std::vector<std::string> f = Split(line, '\t');
      if (f.size() != n_fields) {
        Fail(i + 1, "expected " + std::to_string(n_fields) + " tab-separated fields, got " +
                        std::to_string(f.size()));
      }
      OpEntry op{f[0],
                 f[1],
                 f[2],
                 f[3],
                 f[4],
                 f[5],
                 Ints(i + 1, f[6], "the written arguments"),
                 Ints(i + 1, f[7], "the call plan"),
                 v1 || f[8].empty() ? std::vector<std::string>() : Split(f[8], ' '),
                 i + 1};
      if (op.sha256.size() != 64) Fail(i + 1, "the SHA-256 is not 64 hex digits");
      if (op.qualname.find("::") == std::string::npos) {
        Fail(i + 1, "the op name \"" + op.qualname + "\" is not \"namespace::name\"");
      }
      ops.push_back(std::move(op));
    }
    return ops;
  }

 private:
  std::string path_;
};

std::string Resolve(const std::string& manifest, const std::string& library) {
  if (!library.empty() && library[0] == '/') return library;
  size_t slash = manifest.rfind('/');
  return slash == std::string::npos ? library : manifest.substr(0, slash + 1) + library;
}

// Registrations made here live for the process (the dispatcher may be gone at exit).
std::mutex registry_mu;
std::vector<std::unique_ptr<::torch::Library>>* libraries = nullptr;

/// Defines the op `qualname` with `schema` and registers fn as its kernels (_dispatch.cc), and
/// with a signature, its Meta kernel (_meta.cc). The registrations live for the process.
/// Callers hold registry_mu.
void DefineOp(const std::string& qualname, const std::string& schema, Function fn,
              Array<int64_t> plan, const std::vector<std::string>& record_names,
              const std::vector<std::string>& param_types, const std::string& mutated,
              Array<int64_t> written, const OpSignature* meta_sig) {
  if (libraries == nullptr) libraries = new std::vector<std::unique_ptr<::torch::Library>>();
  size_t sep = qualname.find("::");
  std::string ns = qualname.substr(0, sep), name = qualname.substr(sep + 2);
  auto lib = std::make_unique<::torch::Library>(::torch::Library::FRAGMENT, ns, std::nullopt,
                                                __FILE__, static_cast<uint32_t>(__LINE__));
  size_t num_args = 0;
  try {
    lib->def((name + schema).c_str());
    auto handle = c10::Dispatcher::singleton().findSchema({qualname, ""});
    TORCH_CHECK(handle.has_value(), "the op is not in the dispatcher after its definition");
    num_args = handle->schema().arguments().size();
  } catch (const c10::Error& e) {
    KFFI_THROW(ValueError) << "kffi::torch::RegisterOps: cannot define " << qualname << schema
                           << ": " << e.what_without_backtrace();
  } catch (const std::exception& e) {  // the schema parser's torch::jit::ErrorReport
    KFFI_THROW(ValueError) << "kffi::torch::RegisterOps: cannot define " << qualname << schema
                           << ": " << e.what();
  }
  try {
    Array<String> names, types;
    for (const std::string& n : record_names) names.push_back(String(n));
    for (const std::string& t : param_types) types.push_back(String(t));
    RegisterOp(qualname, std::move(fn), static_cast<int64_t>(num_args), std::move(plan),
               std::move(names), std::move(types), mutated, std::move(written));
    if (meta_sig != nullptr) RegisterMetaKernel(lib.get(), name, *meta_sig);
  } catch (const c10::Error& e) {
    KFFI_THROW(RuntimeError) << "kffi::torch::RegisterOps: cannot register the kernels of "
                             << qualname << ": " << e.what_without_backtrace();
  }
  libraries->push_back(std::move(lib));
}

/// The signature of a manifest's op derived from its function's contract, for its Meta kernel:
/// the outputs the op allocates are the parameters its plan fills with allocated outputs. None
/// when the function has no contract or the derived schema is not the recorded one (the op then
/// has no Meta kernel; kffi.torch's Python fake, where Python runs, is not there either).
std::optional<OpSignature> ManifestSignature(const Module& module, const OpEntry& op) {
  std::optional<std::string> meta = module.GetFunctionMetadata(op.function);
  if (!meta.has_value() || !HasStructuredContract(*meta)) return std::nullopt;
  try {
    OpSignature sig = SignatureOf(*meta, op.qualname, op.function, SignatureOptions());
    SignatureOptions options;
    const std::vector<int64_t>& plan = op.plan;
    for (size_t i = 0; !plan.empty() && i < static_cast<size_t>(plan[0]) &&
                       2 * i + 2 < plan.size() && i < sig.params.size();
         ++i) {
      if (plan[2 * i + 1] == kAlloc) options.allocate_names.push_back(sig.params[i].name);
    }
    if (!options.allocate_names.empty()) {
      options.allocate = 2;
      sig = SignatureOf(*meta, op.qualname, op.function, options);
    }
    if (sig.Schema() != op.schema) return std::nullopt;
    return sig;
  } catch (const Error&) {
    return std::nullopt;  // the kernels still serve the op; fake tensors then have no rule
  }
}

int RegisterFromManifest(const std::string& path) {
  std::vector<OpEntry> ops = ManifestReader(path).Parse(ReadManifest(path));
  std::lock_guard<std::mutex> lock(registry_mu);
  std::map<std::string, Module> modules;  // by resolved path, each checked once
  int count = 0;
  for (const OpEntry& op : ops) {
    try {
      std::string lib_path = Resolve(path, op.library);
      auto it = modules.find(lib_path);
      if (it == modules.end()) {
        std::string digest = FileSha256(lib_path);
        KFFI_CHECK(digest == op.sha256, ValueError)
            << "the kffi library " << lib_path << " has SHA-256 " << digest
            << ", but the manifest recorded " << op.sha256
            << ": deploy the library the model was exported with";
        it = modules.emplace(lib_path, Module::Load(lib_path)).first;
      }
      Function fn = it->second.GetFunctionRequired(op.function);
      std::optional<OpSignature> sig = ManifestSignature(it->second, op);
      std::optional<std::string> meta = it->second.GetFunctionMetadata(op.function);
      DefineOp(op.qualname, op.schema, std::move(fn), Array<int64_t>(op.plan), op.record_names,
               MetadataParamTypes(meta.value_or("")), op.mutated, Array<int64_t>(op.written),
               sig.has_value() ? &*sig : nullptr);
    } catch (const Error& e) {
      // Where the manifest is wrong: its path, the line and the op, before what is wrong.
      std::string what = e.message();
      for (const char* prefix : {"kffi::torch::RegisterOps: ", "kffi.torch: "}) {
        if (what.rfind(prefix, 0) == 0) what = what.substr(std::strlen(prefix));
      }
      throw Error(e.kind(), "kffi::torch::RegisterOps: " + path + " line " +
                                std::to_string(op.line) + ": " + op.qualname + ": " + what);
    }
    ++count;
  }
  return count;
}

int RegisterFromModule(const Module& module, const char* ns_arg) {
  const std::string ns = ns_arg == nullptr ? "" : ns_arg;
  KFFI_CHECK(IsIdentifier(ns), ValueError)
      << "kffi::torch::RegisterOps: the op namespace is an identifier, got \"" << ns << "\"";
  std::lock_guard<std::mutex> lock(registry_mu);
  int count = 0;
  for (const std::string& name : module.ListFunctions()) {
    std::optional<std::string> meta = module.GetFunctionMetadata(name);
    if (!meta.has_value() || !HasStructuredContract(*meta)) continue;  // contract functions only
    const std::string qualname = ns + "::" + name;
    KFFI_CHECK(!c10::Dispatcher::singleton().findSchema({qualname, ""}).has_value(), ValueError)
        << "kffi::torch::RegisterOps: torch already has an op " << qualname
        << " (an op name is registered once per process)";
    OpSignature sig = SignatureOf(*meta, qualname, name, SignatureOptions());
    std::vector<int64_t> written = sig.Written();
    std::string mutated;
    for (const std::string& m : sig.Mutated()) mutated += (mutated.empty() ? "" : ", ") + m;
    DefineOp(qualname, sig.Schema(), module.GetFunctionRequired(name), Array<int64_t>(sig.Plan()),
             sig.RecordNames(), MetadataParamTypes(*meta), mutated, Array<int64_t>(written), &sig);
    ++count;
  }
  return count;
}

/// The targets of the extern (fallback) kernel calls an AOTInductor package makes: the
/// "nodes"[i]."node"."target" of its data/aotinductor/<model>/*.json records.
std::vector<std::string> PackageTargets(const std::string& path) {
  std::vector<std::string> targets;
  std::unordered_set<std::string> seen;  // each target once, in the order first met
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    for (const std::string& record : reader.getAllRecords()) {
      const std::string suffix = ".json";
      if (record.rfind("data/aotinductor/", 0) != 0 || record.size() < suffix.size() ||
          record.compare(record.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      auto [data, size] = reader.getRecord(record);
      std::string text(static_cast<const char*>(data.get()), size);
      details::Json doc;
      if (!details::JsonReader(text).Parse(&doc)) continue;  // not the extern kernels' record
      const details::Json* nodes = doc.Get("nodes");
      if (nodes == nullptr || nodes->kind != details::Json::kArray) continue;
      for (const details::Json& n : nodes->items) {
        const details::Json* node = n.Get("node");
        const std::string* target = node == nullptr ? nullptr : node->GetString("target");
        if (target != nullptr && seen.insert(*target).second) targets.push_back(*target);
      }
    }
  } catch (const c10::Error& e) {
    KFFI_THROW(ValueError) << "kffi::torch::CheckPackage: cannot read the package " << path << ": "
                           << e.what_without_backtrace();
  }
  return targets;
}

int CheckPackageOps(const std::string& path) {
  std::vector<std::string> targets = PackageTargets(path), missing;
  for (const std::string& t : targets) {
    size_t dot = t.find('.', t.find("::") == std::string::npos ? 0 : t.find("::"));
    std::string op = dot == std::string::npos ? t : t.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : t.substr(dot + 1);
    if (overload == "default") overload.clear();
    if (!c10::Dispatcher::singleton().findSchema({op, overload}).has_value()) missing.push_back(t);
  }
  if (!missing.empty()) {
    constexpr size_t kListed = 20;  // a message, not a dump: the first ones, then how many more
    std::string list;
    for (size_t i = 0; i < missing.size() && i < kListed; ++i) {
      list += (list.empty() ? "" : ", ") + missing[i];
    }
    if (missing.size() > kListed) {
      list += " and " + std::to_string(missing.size() - kListed) + " more";
    }
    KFFI_THROW(ValueError)
        << "kffi::torch::CheckPackage: the package " << path
        << " calls ops this process has not registered: " << list
        << ". Register kffi ops before loading it: "
           "kffi::torch::RegisterOps(kffi::Module::Load(library), \"<namespace>\") "
           "or RegisterOps(manifest) (kffi.torch.save_ops)";
  }
  return static_cast<int>(targets.size());
}

}  // namespace
}  // namespace torchglue

namespace torch {

int RegisterOps(const Module& module, const char* ns) {
  return torchglue::RegisterFromModule(module, ns);
}

int CheckPackage(const std::string& package_path) {
  return torchglue::CheckPackageOps(package_path);
}

int RegisterOps(const std::string& manifest_path) {
  return torchglue::RegisterFromManifest(manifest_path);
}

}  // namespace torch
}  // namespace kffi

// For Python: the ops of a manifest registered in this process, as a C++ program does (tests and
// bench/python/torch_ops.py compare them with kffi.torch's own).
namespace {
int RegisterManifestOps(const std::string& manifest_path) {
  return kffi::torch::RegisterOps(manifest_path);
}
int RegisterModuleOps(kffi::Module module, const std::string& ns) {
  return kffi::torch::RegisterOps(module, ns.c_str());
}
}  // namespace

// For Python: the ops of a module registered as a C++ program registers them (tests and
// bench/python/torch_ops.py compare them with kffi.torch's own), and the package check.
KFFI_EXPORT_DOC(register_module_ops, RegisterModuleOps,
                "Registers the contract functions of a module as torch ops (C++ RegisterOps)",
                "module, ns");
KFFI_EXPORT_DOC(check_package, kffi::torch::CheckPackage,
                "Checks that the ops an AOTInductor package calls are registered", "package_path");
KFFI_EXPORT_DOC(register_ops, RegisterManifestOps,
                "Registers the ops of a manifest written by kffi.torch.save_ops", "manifest_path");
