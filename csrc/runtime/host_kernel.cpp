// The call of an Inductor-generated C++ kernel from a stream worker (a launch
// record made by oxide_launch_host_kernel, crates/torch-oxide-ext/src/abi/host_kernel.rs).
//
// Such a kernel is `extern "C" void kernel(T0 a0, T1 a1, ...)` where every parameter
// is a pointer or an int64_t (the Python wrapper checks the signature before it
// launches one this way; anything else is called on the host thread as before). On
// the x86-64 System V and AArch64 calling conventions those all travel in the same
// integer registers and stack slots, and the caller removes what it pushed, so a call
// through a 64-parameter integer signature passes the first n arguments in the
// places the kernel reads them and the unused rest is never looked at. The kernel can
// throw (Inductor's bound checks use TORCH_CHECK); C++ exceptions must not unwind
// into Rust, so they end here and come back as an error message.
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <exception>

namespace {

using Arg = uint64_t;
using Kernel64 = void (*)(Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg,
                          Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg,
                          Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg, Arg,
                          Arg, Arg, Arg, Arg, Arg, Arg, Arg);

}  // namespace

// Calls `kernel` with the 64 values of `a` (the first n are its arguments). Returns 0,
// or 1 with the exception's message in `error` (NUL-terminated, truncated to `len`).
extern "C" int32_t oxide_glue_call_host_kernel(void* kernel, const uint64_t* a, char* error, size_t len) noexcept {
  auto k = reinterpret_cast<Kernel64>(kernel);
  try {
    k(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16],
      a[17], a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27], a[28], a[29], a[30], a[31], a[32],
      a[33], a[34], a[35], a[36], a[37], a[38], a[39], a[40], a[41], a[42], a[43], a[44], a[45], a[46], a[47], a[48],
      a[49], a[50], a[51], a[52], a[53], a[54], a[55], a[56], a[57], a[58], a[59], a[60], a[61], a[62], a[63]);
    return 0;
  } catch (const c10::Error& e) {
    std::snprintf(error, len, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(error, len, "%s", e.what());
  } catch (...) {
    std::snprintf(error, len, "%s", "an unknown C++ exception");
  }
  return 1;
}
