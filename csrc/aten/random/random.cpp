// Random-number kernels. PyTorch's own native functions (at::native::uniform_,
// normal_, bernoulli_, random_, exponential_, ...) check arguments and build the
// TensorIterator exactly as on CPU, then call a DispatchStub; we register the
// PrivateUse1 entries of those stubs (REGISTER_PRIVATEUSE1_DISPATCH) and hand
// the loop to the Rust Philox4x32-10 kernels. native_dropout, randperm and
// multinomial have no stub and are implemented here on the same kernels.
#include "common/device_check.h"
#include "common/launch.h"
#include "common/oxide.h"

#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/bernoulli_native.h>
#include <ATen/ops/cauchy_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/exponential_native.h>
#include <ATen/ops/geometric_native.h>
#include <ATen/ops/log_normal_native.h>
#include <ATen/ops/normal_native.h>
#include <ATen/ops/random_native.h>
#include <ATen/ops/uniform_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <vector>

namespace oxide {
namespace {

int32_t dtype_code(c10::ScalarType t) { return static_cast<int32_t>(t); }

// One sample per element of a strided operand of `self`'s dtype (sizes/strides in elements).
void sample(const at::TensorBase& self, c10::IntArrayRef sizes, c10::IntArrayRef strides, void* data,
            OxideDistribution dist, const std::optional<at::Generator>& gen) {
  const int64_t numel = c10::multiply_integers(sizes);
  if (numel == 0) {
    return;
  }
  const c10::DeviceGuard guard(self.device());
  const OxidePhilox state = philox_reserve(gen, self.device(), static_cast<uint64_t>(numel));
  const OxideTensor dst{
      data, dtype_code(self.scalar_type()), sizes.size(), sizes.data(), strides.data(), OXIDE_ACCESS_WRITE};
  OXIDE_CHECK(oxide_random_sample(launch_on(at::Tensor(self)), dst, dist, state));
}

// TensorIterator operands carry byte strides; the kernels take element strides.
void sample_iter(at::TensorIteratorBase& iter, OxideDistribution dist, const std::optional<at::Generator>& gen) {
  const auto out = iter.tensor_base(0);
  const int64_t elem = static_cast<int64_t>(iter.element_size(0));
  std::vector<int64_t> strides;
  for (const auto s : iter.strides(0)) {
    strides.push_back(s / elem);
  }
  sample(out, iter.shape(), strides, iter.data_ptr(0), dist, gen);
}

void sample_tensor(const at::TensorBase& self, OxideDistribution dist, const std::optional<at::Generator>& gen) {
  sample(self, self.sizes(), self.strides(), self.mutable_data_ptr(), dist, gen);
}

// CPU's distribution kernels dispatch on floating types only; match its error.
void check_floating(c10::ScalarType t, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t), "\"", kernel, "\" not implemented for '", c10::toString(t), "'");
}

OxideDistribution dist(int32_t kind, double a = 0, double b = 0) { return OxideDistribution{kind, a, b, 0, 0}; }

void uniform_kernel(at::TensorIteratorBase& iter, double from, double to, std::optional<at::Generator> gen) {
  check_floating(iter.dtype(), "uniform_kernel_oxide");
  sample_iter(iter, dist(OXIDE_DIST_UNIFORM, from, to), gen);
}

void normal_kernel(const at::TensorBase& self, double mean, double std, std::optional<at::Generator> gen) {
  check_floating(self.scalar_type(), "normal_kernel_oxide");
  sample_tensor(self, dist(OXIDE_DIST_NORMAL, mean, std), gen);
}

void exponential_kernel(at::TensorIteratorBase& iter, double lambda, std::optional<at::Generator> gen) {
  TORCH_CHECK(at::isFloatingType(iter.dtype()),
              "Exponential distribution is a continuous probability distribution. dtype must be a floating point "
              "but you specified ",
              iter.dtype());
  sample_iter(iter, dist(OXIDE_DIST_EXPONENTIAL, lambda), gen);
}

void cauchy_kernel(at::TensorIteratorBase& iter, double median, double sigma, std::optional<at::Generator> gen) {
  check_floating(iter.dtype(), "cauchy_oxide");
  sample_iter(iter, dist(OXIDE_DIST_CAUCHY, median, sigma), gen);
}

void log_normal_kernel(at::TensorIteratorBase& iter, double mean, double std, std::optional<at::Generator> gen) {
  check_floating(iter.dtype(), "log_normal_oxide");
  sample_iter(iter, dist(OXIDE_DIST_LOG_NORMAL, mean, std), gen);
}

void geometric_kernel(at::TensorIteratorBase& iter, double p, std::optional<at::Generator> gen) {
  sample_iter(iter, dist(OXIDE_DIST_GEOMETRIC, p), gen);
}

void bernoulli_scalar_kernel(const at::TensorBase& self, double p, std::optional<at::Generator> gen) {
  sample_tensor(self, dist(OXIDE_DIST_BERNOULLI, p), gen);
}

void bernoulli_tensor_kernel(const at::TensorBase& self, const at::TensorBase& p_, std::optional<at::Generator> gen) {
  check_floating(p_.scalar_type(), "bernoulli_tensor_oxide_p_");
  if (self.numel() == 0) {
    return;
  }
  const c10::DeviceGuard guard(self.device());
  // Probabilities as float64 on self's device, broadcast to self (as the CPU kernel's expand_inplace).
  const at::Tensor p = at::Tensor(p_).to(self.device(), at::kDouble).expand(self.sizes());
  const OxidePhilox state = philox_reserve(gen, self.device(), static_cast<uint64_t>(self.numel()));
  const at::Tensor dst(self);
  OXIDE_CHECK(oxide_bernoulli_tensor(launch_on(dst), out_arg(dst), in_arg(p), state));
}

OxideDistribution integers(int64_t base, uint64_t range) {
  return OxideDistribution{OXIDE_DIST_INTEGERS, 0, 0, base, range};
}

// random_() without bounds: [0, 2^digits] for floating types (every integer
// exactly representable), [0, max] for integral types, {0, 1} for bool.
void random_kernel(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
  uint64_t range = 0;
  switch (iter.dtype()) {
    case at::kFloat:
      range = (1ULL << std::numeric_limits<float>::digits) + 1;
      break;
    case at::kDouble:
      range = (1ULL << std::numeric_limits<double>::digits) + 1;
      break;
    case at::kHalf:
      range = (1ULL << 11) + 1;
      break;
    case at::kBFloat16:
      range = (1ULL << 8) + 1;
      break;
    case at::kBool:
      range = 2;
      break;
    case at::kByte:
      range = 256;
      break;
    case at::kChar:
      range = 128;
      break;
    case at::kShort:
      range = 1ULL << 15;
      break;
    case at::kInt:
      range = 1ULL << 31;
      break;
    case at::kLong:
      range = 1ULL << 63;
      break;
    case at::kUInt16:
      range = 1ULL << 16;
      break;
    case at::kUInt32:
      range = 1ULL << 32;
      break;
    case at::kUInt64:
      range = 0;
      break;  // 2^64: every value
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "\"random_\" not implemented for '", iter.dtype(), "'");
  }
  sample_iter(iter, integers(0, range), gen);
}

void random_from_to_kernel(at::TensorIteratorBase& iter, uint64_t range, int64_t base,
                           std::optional<at::Generator> gen) {
  sample_iter(iter, integers(base, range), gen);
}

void random_full_64_bits_range_kernel(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
  sample_iter(iter, integers(0, 0), gen);
}

void masked_scale(const at::Tensor& out, const at::Tensor& input, const at::Tensor& mask, double scale) {
  const c10::DeviceGuard guard(out.device());
  const at::Tensor m = mask.expand(out.sizes());
  const at::Tensor in = input.expand(out.sizes());
  OXIDE_CHECK(oxide_masked_scale(launch_on(out), out_arg(out), in_arg(in), in_arg(m), scale));
}

// native_dropout as the CPU kernel defines it: in training, mask ~ Bernoulli(1 - p)
// and output = input * mask / (1 - p); in eval, a copy and an all-true mask.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  if (input.numel() == 0) {
    return {input.clone(), mask};
  }
  if (train.has_value() && !*train) {
    mask.fill_(true);
    return {input.clone(), mask};
  }
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), "result type ", input.scalar_type(),
              " can't be cast to the desired output type Float for dropout in training");
  bernoulli_scalar_kernel(mask, 1 - p, std::nullopt);
  at::Tensor output = at::empty_like(input);
  masked_scale(output, input, mask, p == 1 ? 0.0 : 1.0 / (1.0 - p));
  return {output, mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be Bool Scalar Type", mask.scalar_type());
  // CPU computes grad * mask * scale: a floating-point scale promotes integral and
  // bool gradients to the default dtype.
  const at::Tensor grad = at::isFloatingType(grad_output.scalar_type())
                              ? grad_output
                              : grad_output.to(c10::typeMetaToScalarType(c10::get_default_dtype()));
  at::Tensor grad_input = at::empty_like(grad);
  masked_scale(grad_input, grad, mask, scale);
  return grad_input;
}

// A generator may route a CPU call here; answer as CPU's own check would.
void check_generator_device(const std::optional<at::Generator>& gen, const at::Tensor& t) {
  if (gen.has_value() && gen->defined()) {
    TORCH_CHECK(t.device().type() == gen->device().type(), "Expected a '", t.device().type(),
                "' device type for generator but found '", gen->device().type(), "'");
  }
}

at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  check_generator_device(gen, out);
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool && !at::isComplexType(out.scalar_type()),
                              "\"randperm_oxide\" not implemented for '", c10::toString(out.scalar_type()), "'");
  at::native::check_supported_max_int_with_precision(n, out);
  out.resize_({n});
  if (n == 0) {
    return out;
  }
  const c10::DeviceGuard guard(out.device());
  const OxidePhilox state = philox_reserve(gen, out.device(), static_cast<uint64_t>(n));
  OXIDE_CHECK(oxide_randperm(launch_on(out), out_arg(out), state));
  return out;
}

// multinomial with CPU's argument checks; weights go to the kernel as a
// contiguous float32/float64 matrix, samples come back as int64.
at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& result) {
  check_generator_device(gen, self);
  TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(result.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ", result.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t categories = self.size(-1);
  TORCH_CHECK(replacement || (n_sample <= categories),
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(categories <= (int64_t(1) << 24), "number of categories cannot exceed 2^24");
  const int64_t rows = self.dim() == 1 ? 1 : self.size(0);
  if (self.dim() == 1) {
    result.resize_({n_sample});
  } else {
    result.resize_({rows, n_sample});
  }
  if (result.numel() == 0) {
    return result;
  }
  const c10::DeviceGuard guard(self.device());
  const auto compute = self.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor weights = self.to(compute).contiguous();
  at::Tensor samples = result.is_contiguous() ? result : at::empty(result.sizes(), result.options());
  const uint64_t blocks = static_cast<uint64_t>(rows) * static_cast<uint64_t>(replacement ? n_sample : categories);
  const OxidePhilox state = philox_reserve(gen, self.device(), blocks);
  OXIDE_CHECK(oxide_multinomial(launch_on(samples), out_arg(samples), in_arg(weights), replacement, state));
  if (!samples.is_same(result)) {
    result.copy_(samples);
  }
  return result;
}

at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen) {
  at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  multinomial_out(self, n_sample, replacement, std::move(gen), result);
  return result;
}

// Thin wrappers pick one overload of PyTorch's (overloaded) native functions.
at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  return at::native::bernoulli_(self, p, std::move(gen));
}
at::Tensor& bernoulli_float_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return at::native::bernoulli_(self, p, std::move(gen));
}
at::Tensor bernoulli(const at::Tensor& self, std::optional<at::Generator> gen) {
  return at::native::bernoulli(self, std::move(gen));
}
at::Tensor& random_from_(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  return at::native::random_(self, from, to, std::move(gen));
}
at::Tensor& random_to_(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return at::native::random_(self, to, std::move(gen));
}
at::Tensor& random_all_(at::Tensor& self, std::optional<at::Generator> gen) {
  return at::native::random_(self, std::move(gen));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "uniform_", TORCH_FN(at::native::uniform_));
  OXIDE_IMPL(m, "normal_", TORCH_FN(at::native::normal_));
  OXIDE_IMPL(m, "exponential_", TORCH_FN(at::native::exponential_));
  OXIDE_IMPL(m, "cauchy_", TORCH_FN(at::native::cauchy_));
  OXIDE_IMPL(m, "log_normal_", TORCH_FN(at::native::log_normal_));
  OXIDE_IMPL(m, "geometric_", TORCH_FN(at::native::geometric_));
  OXIDE_IMPL(m, "bernoulli_.Tensor", TORCH_FN(bernoulli_tensor_));
  OXIDE_IMPL(m, "bernoulli_.float", TORCH_FN(bernoulli_float_));
  OXIDE_IMPL(m, "bernoulli", TORCH_FN(bernoulli));
  OXIDE_IMPL(m, "random_.from", TORCH_FN(random_from_));
  OXIDE_IMPL(m, "random_.to", TORCH_FN(random_to_));
  OXIDE_IMPL(m, "random_", TORCH_FN(random_all_));
  OXIDE_IMPL(m, "native_dropout", TORCH_FN(native_dropout));
  OXIDE_IMPL(m, "native_dropout_backward", TORCH_FN(native_dropout_backward));
  OXIDE_IMPL(m, "randperm.generator_out", TORCH_FN(randperm_out));
  OXIDE_IMPL(m, "multinomial", TORCH_FN(multinomial));
  OXIDE_IMPL(m, "multinomial.out", TORCH_FN(multinomial_out));
}

}  // namespace oxide

// The stubs' registries live in at::native, where the macro must expand.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(uniform_stub, &oxide::uniform_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(normal_stub, &oxide::normal_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(exponential_stub, &oxide::exponential_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(cauchy_stub, &oxide::cauchy_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(log_normal_stub, &oxide::log_normal_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(geometric_stub, &oxide::geometric_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(bernoulli_scalar_stub, &oxide::bernoulli_scalar_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(bernoulli_tensor_stub, &oxide::bernoulli_tensor_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(random_stub, &oxide::random_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(random_from_to_stub, &oxide::random_from_to_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(random_full_64_bits_range_stub, &oxide::random_full_64_bits_range_kernel)
}  // namespace at::native
