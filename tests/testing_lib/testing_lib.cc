// tests/testing_lib/testing_lib.cc: testing.* globals that the C++ and Python tests call.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/container/dict.h>
#include <kffi/container/list.h>
#include <kffi/container/shape.h>
#include <kffi/env.h>
#include <kffi/export.h>
#include <kffi/function.h>
#include <kffi/tensor.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Registered at load time so that loading the library is all a test needs to do.
KFFI_STATIC_INIT_BLOCK() {
  kffi::GlobalDef()
      .def("testing.echo", [](kffi::Any x) { return x; })
      .def("testing.nop", [](kffi::PackedArgs, kffi::Any*) {})
      .def("testing.add_one", [](int64_t x) { return x + 1; })
      .def("testing.raise_error",
           [](const std::string& kind, const std::string& message) {
             const KFFIByteArray* frame = KFFIBacktrace(__FILE__, __LINE__, "raise_error", 0);
             throw kffi::Error(kind, message, std::string(frame->data, frame->size));
           })
      .def("testing.apply",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             if (args.size() < 1) {
               KFFI_THROW(TypeError) << "testing.apply expects a function and its arguments";
             }
             kffi::Function f = args[0].cast<kffi::Function>();
             *rv = f.CallPacked(kffi::PackedArgs(args.data() + 1, args.size() - 1));
           })
      .def("testing.count_args", [](kffi::PackedArgs args, kffi::Any* rv) { *rv = args.size(); });
}

// Values that Python cannot make directly, and probes of the calling environment.
KFFI_STATIC_INIT_BLOCK() {
  kffi::GlobalDef()
      // (int, ...) -> kffi.Shape
      .def("testing.make_shape",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             std::vector<int64_t> dims;
             for (int32_t i = 0; i < args.size(); ++i) dims.push_back(args[i].cast<int64_t>());
             *rv = kffi::Shape(dims);
           })
      // (x, ...) -> kffi.List (mutable, shared by reference)
      .def("testing.make_list",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             kffi::List<kffi::Any> list;
             for (int32_t i = 0; i < args.size(); ++i) list.push_back(kffi::Any(args[i]));
             *rv = list;
           })
      // (key, value, key, value, ...) -> kffi.Dict
      .def("testing.make_dict",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             kffi::Dict<kffi::Any, kffi::Any> dict;
             for (int32_t i = 0; i + 1 < args.size(); i += 2) {
               dict.Set(kffi::Any(args[i]), kffi::Any(args[i + 1]));
             }
             *rv = dict;
           })
      // Calls f(args...) and catches the error in C++: [kind, message] as C++ sees it, or None
      // when f returns normally.
      .def("testing.catch_error",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             kffi::Function f = args[0].cast<kffi::Function>();
             try {
               f.CallPacked(kffi::PackedArgs(args.data() + 1, args.size() - 1));
             } catch (const kffi::Error& e) {
               *rv = kffi::Array<kffi::Any>{kffi::Any(kffi::String(e.kind())),
                                            kffi::Any(kffi::String(e.message()))};
             }
           })
      // Calls f(args...) on a new native thread and returns its result; an error raised there
      // is rethrown on the calling thread (the error slot is per thread).
      .def("testing.call_in_thread",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             kffi::Function f = args[0].cast<kffi::Function>();
             std::vector<kffi::Any> rest;
             for (int32_t i = 1; i < args.size(); ++i) rest.emplace_back(args[i]);
             kffi::Any result;
             std::exception_ptr error;
             std::thread worker([&, f = std::move(f)]() mutable {
               try {
                 std::vector<kffi::AnyView> views(rest.begin(), rest.end());
                 result = f.CallPacked(
                     kffi::PackedArgs(views.data(), static_cast<int32_t>(views.size())));
               }
               KFFI_CATCH_ALL { error = std::current_exception(); }
               f = kffi::Function();  // the last reference may go here, off the Python thread
             });
             worker.join();
             if (error) std::rethrow_exception(error);
             *rv = std::move(result);
           })
      // The native type index of a value as the callee receives it.
      .def("testing.type_index",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             *rv = static_cast<int64_t>(args[0].type_index());
           })
      // f(x) called n times from C++; returns the last result (a callback stress test).
      .def("testing.call_n_times",
           [](kffi::Function f, int64_t n, kffi::Any x) {
             kffi::Any last;
             for (int64_t i = 0; i < n; ++i) last = f(x);
             return last;
           })
      // Sleeps without touching Python; returns the seconds slept (for GIL-release tests).
      .def("testing.sleep",
           [](double seconds) {
             auto start = std::chrono::steady_clock::now();
             std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
             return SecondsSince(start);
           })
      // Polls the signal hook every millisecond for up to max_seconds; a pending Ctrl-C comes
      // back as the hook's error (KeyboardInterrupt in Python). Returns the seconds spun.
      .def("testing.spin_until_signal",
           [](double max_seconds) {
             auto start = std::chrono::steady_clock::now();
             while (SecondsSince(start) < max_seconds) {
               kffi::env::CheckSignals();
               std::this_thread::sleep_for(std::chrono::milliseconds(1));
             }
             return SecondsSince(start);
           })
      // The stream the callee sees for a device (KFFIEnvGetStream), as an int.
      .def("testing.get_stream",
           [](int64_t device_type, int64_t device_id) {
             return static_cast<int64_t>(reinterpret_cast<intptr_t>(KFFIEnvGetStream(
                 static_cast<int32_t>(device_type), static_cast<int32_t>(device_id))));
           })
      // Whether an environment tensor allocator is in force for this call.
      .def("testing.has_env_allocator", []() { return KFFIEnvGetTensorAllocator() != nullptr; })
      // Calls the global function `name` with the other arguments (KeyError when missing).
      .def("testing.call_global",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             kffi::Function f = kffi::Function::GetGlobalRequired(args[0].cast<std::string>());
             *rv = f.CallPacked(kffi::PackedArgs(args.data() + 1, args.size() - 1));
           })
      // What a callee sees of a tensor argument's writability: its tensor_flags (ABI 0.3); for
      // an Array argument, each element's DLPack read-only flag (stored tensors carry no
      // tensor_flags).
      .def("testing.tensor_flags",
           [](kffi::PackedArgs args, kffi::Any* rv) {
             const KFFIAny* raw = reinterpret_cast<const KFFIAny*>(args.data());
             if (raw->type_index == kKFFIArray) {
               kffi::Array<kffi::Any> items = args[0].cast<kffi::Array<kffi::Any>>();
               std::vector<kffi::Any> out;
               for (const kffi::Any& item : items) {
                 out.emplace_back(item.cast<kffi::Tensor>().is_read_only() ? 1 : 0);
               }
               *rv = kffi::Array<kffi::Any>(out.begin(), out.end());
               return;
             }
             *rv = static_cast<int64_t>(raw->tensor_flags);
           })
      // The strong reference count of an object argument (0 for plain values).
      .def("testing.use_count", [](kffi::PackedArgs args, kffi::Any* rv) {
        const KFFIAny* raw = reinterpret_cast<const KFFIAny*>(args.data());
        if (raw->type_index < kKFFIStaticObjectBegin) {
          *rv = static_cast<int64_t>(0);
          return;
        }
        uint64_t count = __atomic_load_n(&raw->v_obj->combined_ref_count, __ATOMIC_RELAXED);
        *rv = static_cast<int64_t>(count & 0xffffffffu);
      });
}

int64_t TestingPing(int64_t x) { return x; }

}  // namespace

// A kffi module needs at least one export for the loader to accept it; loading it from Python
// is what runs the registrations above.
KFFI_EXPORT_DOC(testing_ping, TestingPing, "Returns x (proves the testing library is loaded).",
                "x");
