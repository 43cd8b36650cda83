// Handing a TensorIterator to the Rust kernels (oxide_kernels::engine::iter).
#pragma once

#include "common/launch.h"
#include "common/oxide.h"
#include "oxide_pointwise_ops.h"

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <c10/core/Scalar.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>

namespace oxide {

// The iterator's operands flattened into the ABI struct; owns the arrays.
struct IterArgs {
  explicit IterArgs(const at::TensorIteratorBase& iter) {
    const int nt = iter.ntensors();
    const int nd = iter.ndim();
    TORCH_CHECK(nt <= 8, "oxide kernels take at most 8 operands, got ", nt);
    for (int k = 0; k < nt; ++k) {
      data[k] = iter.data_ptr(k);
      dtypes[k] = static_cast<int32_t>(iter.dtype(k));
      const auto s = iter.strides(k);
      for (int d = 0; d < nd; ++d) {
        strides.push_back(s[d]);
      }
    }
    const auto shape = iter.shape();
    abi = OxideIter{static_cast<size_t>(nd),
                    shape.data(),
                    static_cast<size_t>(nt),
                    static_cast<size_t>(iter.noutputs()),
                    data.data(),
                    dtypes.data(),
                    strides.data()};
  }
  std::array<void*, 8> data{};
  std::array<int32_t, 8> dtypes{};
  c10::SmallVector<int64_t, 32> strides;
  OxideIter abi{};
};

// Scalars as the kernels take them: the same value as double and as int64,
// and the imaginary part of a complex scalar (read by complex kernels only).
struct ScalarArgs {
  std::array<double, 4> f{};
  std::array<int64_t, 4> i{};
  std::array<double, 4> im{};
  // The ABI's form of the same values.
  OxideScalars abi() const {
    OxideScalars s{};
    std::copy(f.begin(), f.end(), s.f);
    std::copy(i.begin(), i.end(), s.i);
    std::copy(im.begin(), im.end(), s.im);
    return s;
  }
  void set(size_t k, const c10::Scalar& s) {
    if (s.isComplex()) {
      const auto z = s.toComplexDouble();
      f[k] = z.real();
      im[k] = z.imag();
      i[k] = static_cast<int64_t>(f[k]);
    } else if (s.isIntegral(false)) {
      i[k] = s.toLong();
      f[k] = static_cast<double>(i[k]);
    } else if (s.isBoolean()) {
      i[k] = s.toBool();
      f[k] = static_cast<double>(i[k]);
    } else {
      f[k] = s.toDouble();
      i[k] = static_cast<int64_t>(f[k]);
    }
  }
  void set(size_t k, double v) {
    f[k] = v;
    i[k] = static_cast<int64_t>(v);
  }
};

// The current stream of `t`'s device: where a kernel on `t` is queued.
inline int64_t stream_of(const at::Tensor& t) { return current_stream(t.device().index()); }

// A kernel over `iter`: on its first operand's device and that device's current stream.
inline OxideLaunch launch_on(const at::TensorIteratorBase& iter) {
  const c10::DeviceIndex device = iter.device(0).index();
  return OxideLaunch{device, current_stream(device), static_cast<int32_t>(at::get_num_threads())};
}

// Runs pointwise op `op` (an OXIDE_POINTWISE_* of the generated oxide_pointwise_ops.h)
// over `iter` on the output's device and current stream, computing in `compute`
// (default: the iterator's common dtype, else the op family's choice).
void pointwise(at::TensorIteratorBase& iter, OxidePointwiseOp op, const ScalarArgs& scalars = {},
               std::optional<at::ScalarType> compute = std::nullopt);

// CPU's kernels read a fill value / alpha / weight with c10's checked conversion
// (`Scalar::to<T>()`), which raises "value cannot be converted to type T without
// overflow"; ScalarArgs carries a double (or int64), which would turn 1e300 into inf
// or wrap 300 into a uint8 silently. Every op taking such a Scalar runs this first
// with the type CPU converts to (the op's dtype, or its opmath type).
void check_scalar_fits(const c10::Scalar& s, at::ScalarType t);

// Runs `reduction` (an OXIDE_REDUCE_* with the scalars std_var and norm take) over
// `iter` (outputs first, then one input).
void reduce(at::TensorIteratorBase& iter, OxideReduction reduction);
inline void reduce(at::TensorIteratorBase& iter, int32_t op) { reduce(iter, OxideReduction{op, 0.0, false, 0.0}); }

}  // namespace oxide
