// Shared helpers of the C++ glue: the generated C ABI header, the status
// check that turns a Rust error into the matching c10 exception, and the
// few small functions several glue files need.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "oxide_abi.h"

// The dtypes the ABI has a code for, each with its code: copies convert between any
// two of them; kernels compute in all but complex32 and the float8 types, which (as on
// CPU) only convert. The codes are c10::ScalarType values (checked on the Rust side
// against oxide_kernels::DType, and here below).
#define OXIDE_FORALL_ABI_DTYPES(_)    \
  _(Byte, UINT8)                      \
  _(Char, INT8)                       \
  _(Short, INT16)                     \
  _(Int, INT32)                       \
  _(Long, INT64)                      \
  _(Half, FLOAT16)                    \
  _(Float, FLOAT32)                   \
  _(Double, FLOAT64)                  \
  _(ComplexFloat, COMPLEX64)          \
  _(ComplexDouble, COMPLEX128)        \
  _(Bool, BOOL)                       \
  _(BFloat16, BFLOAT16)               \
  _(UInt16, UINT16)                   \
  _(UInt32, UINT32)                   \
  _(UInt64, UINT64)                   \
  _(ComplexHalf, COMPLEX32)           \
  _(Float8_e5m2, FLOAT8_E5M2)         \
  _(Float8_e4m3fn, FLOAT8_E4M3FN)     \
  _(Float8_e5m2fnuz, FLOAT8_E5M2FNUZ) \
  _(Float8_e4m3fnuz, FLOAT8_E4M3FNUZ) \
  _(Float8_e8m0fnu, FLOAT8_E8M0FNU)

#define OXIDE_CHECK_DTYPE_CODE(scalar, code) \
  static_assert(static_cast<int>(c10::ScalarType::scalar) == OXIDE_DTYPE_##code);
OXIDE_FORALL_ABI_DTYPES(OXIDE_CHECK_DTYPE_CODE)
#undef OXIDE_CHECK_DTYPE_CODE

namespace at {
class Tensor;
}

namespace oxide {

// True for the dtypes of OXIDE_FORALL_ABI_DTYPES.
constexpr bool is_abi_dtype(c10::ScalarType t) {
#define OXIDE_ABI_DTYPE_CASE(scalar, code) \
  case c10::ScalarType::scalar:            \
    return true;
  switch (t) {
    OXIDE_FORALL_ABI_DTYPES(OXIDE_ABI_DTYPE_CASE)
    default:
      return false;
  }
#undef OXIDE_ABI_DTYPE_CASE
}

// The calling thread's last runtime error message.
inline std::string last_error() {
  std::string msg(oxide_last_error(nullptr, 0), '\0');
  oxide_last_error(msg.data(), msg.size() + 1);
  return msg;
}

// A native kernel (or its glue) has no loop for the call's dtypes. The operator's
// registration wrapper (device_check.h) catches it and hands the whole call to the
// counted CPU fallback, so a dtype the fallback can run never fails on oxide; where
// nothing catches it (OXIDE_FALLBACK=error, an oxide:: operator) Python sees a
// NotImplementedError, which it is.
class UnsupportedDtype : public c10::NotImplementedError {
 public:
  using c10::NotImplementedError::NotImplementedError;
};

#define OXIDE_THROW_UNSUPPORTED_DTYPE(...)                                                                  \
  throw ::oxide::UnsupportedDtype(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, \
                                  c10::str(__VA_ARGS__))

// Raises UnsupportedDtype with the message unless `cond` holds.
#define OXIDE_CHECK_DTYPE(cond, ...)              \
  do {                                            \
    if (C10_UNLIKELY(!(cond))) {                  \
      OXIDE_THROW_UNSUPPORTED_DTYPE(__VA_ARGS__); \
    }                                             \
  } while (0)

// Counts and announces (OXIDE_FALLBACK) a CPU fallback of the aten operator `op` that
// a glue file runs itself after a kernel refused its dtypes (runtime/fallback.cpp).
void note_dtype_fallback(const std::string& op, const UnsupportedDtype& refused);

// Throws the c10 exception for a failed ABI call, with the caller's location
// (TORCH_CHECK records __FILE__/__LINE__ of the expansion site).
#define OXIDE_CHECK(expr)                                                                          \
  do {                                                                                             \
    const int32_t oxide_status_ = (expr);                                                          \
    if (C10_UNLIKELY(oxide_status_ != OXIDE_STATUS_SUCCESS)) {                                     \
      const std::string oxide_msg_ = ::oxide::last_error();                                        \
      TORCH_CHECK_WITH(OutOfMemoryError, oxide_status_ != OXIDE_STATUS_OUT_OF_MEMORY, oxide_msg_); \
      TORCH_CHECK_VALUE(oxide_status_ != OXIDE_STATUS_INVALID_VALUE, oxide_msg_);                  \
      OXIDE_CHECK_DTYPE(oxide_status_ != OXIDE_STATUS_UNSUPPORTED_DTYPE, oxide_msg_);              \
      TORCH_CHECK_INDEX(oxide_status_ != OXIDE_STATUS_INDEX_ERROR, oxide_msg_);                    \
      TORCH_CHECK(false, oxide_msg_);                                                              \
    }                                                                                              \
  } while (0)

inline c10::DeviceIndex current_device() {
  int32_t d = 0;
  OXIDE_CHECK(oxide_get_device(&d));
  return static_cast<c10::DeviceIndex>(d);
}

inline int64_t current_stream(c10::DeviceIndex device) {
  int64_t s = 0;
  OXIDE_CHECK(oxide_stream_current(device, &s));
  return s;
}

// True while the current stream of `device` captures a graph (runtime/graph.cpp).
inline bool stream_is_capturing(c10::Device device) {
  bool capturing = false;
  OXIDE_CHECK(oxide_stream_is_capturing(device.index(), current_stream(device.index()), &capturing));
  return capturing;
}

// The registered device allocator (runtime/allocator.cpp).
c10::Allocator* device_allocator();

// A CPU tensor over an oxide tensor's memory at its host address, keeping the oxide
// storage alive (runtime/host_view.cpp; oxide::_host_view). It does not wait for the device.
at::Tensor host_view(const at::Tensor& self);

// Grows or shrinks a storage to `nbytes`, keeping min(old, new) bytes
// (shared by resize_, set_ and untyped_storage().resize_()).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

}  // namespace oxide

#include <ATen/core/Generator.h>

namespace oxide {
// Philox state for one kernel that consumes `blocks` 128-bit blocks: the
// generator's seed and current offset; the offset then advances by `blocks`.
// `gen` empty means the default generator of `device`; a generator of another
// device type raises (runtime/generator.cpp).
OxidePhilox philox_reserve(const std::optional<at::Generator>& gen, c10::Device device, uint64_t blocks);
// During a graph capture on `device`'s current stream, the Philox state of a random
// kernel drawing `blocks` blocks from `gen`, relative to the state each replay gives
// the graph (runtime/graph.cpp); nullopt when that stream is not capturing.
std::optional<OxidePhilox> graph_philox_reserve(c10::GeneratorImpl* gen, c10::Device device, uint64_t blocks);
// A new generator on `device` (-1: current device); raises for an invalid index (runtime/generator.cpp).
at::Generator make_generator(c10::DeviceIndex device);
// The default generator of `device` (-1: current device), created on first use (runtime/generator.cpp).
const at::Generator& default_generator(c10::DeviceIndex device);
}  // namespace oxide
