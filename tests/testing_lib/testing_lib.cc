// tests/testing_lib/testing_lib.cc: testing.* globals that the C++ and Python tests call.
#include <kffi/function.h>

#include <string>

namespace {

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

}  // namespace
