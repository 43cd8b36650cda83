"""OpInfo conformance: every operator of PyTorch's op_db, every dtype CPU supports
for it, on oxide against CPU (values, gradients, out=, error_inputs).

Instantiated through instantiate_device_type_tests, which adds PrivateUse1TestBase
for the oxide device. OXIDE_CONFORMANCE=full runs all of op_db; the default
(`subset`) runs the fixed representative subset of expectations.py.
"""

import torch
from common import (
    MODE,
    assert_at_least_as_accurate,
    assert_equal_up_to_ties,
    assert_selected_up_to_ties,
    cpu_copy,
    cpu_reference_sample,
    expecting,
    fallback_calls,
    float64_sample,
    metadata,
    record,
    tensors_in,
    to_cpu,
    to_float64,
)
from expectations import (
    AT_LEAST_AS_ACCURATE,
    METADATA_ONLY,
    SELECTION_TIES,
    SKIP_OPS,
    SUBSET_DTYPES,
    SUBSET_OPS,
    TIE_ORDER,
    TOLERANCES,
    comparable_accuracy,
    op_key,
)
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

import torch_oxide  # noqa: F401

torch.oxide.set_fallback_mode("silent")

if MODE == "full":
    OPS = op_db
else:
    OPS = [op for op in op_db if op.name in SUBSET_OPS and not op.variant_test_name]

GRAD_DTYPES = (torch.float32, torch.float64)


def _skip_if_listed(test, op):
    key = op_key(op)
    reason = SKIP_OPS.get(key) or SKIP_OPS.get(op.name)
    if reason:
        test.skipTest(reason)
    if MODE != "full" and test._testMethodName.rsplit("_", 1)[-1] not in SUBSET_DTYPES:
        test.skipTest("outside the make-test subset (make conformance runs it)")


def _expecting(test, kind, op, dtype, body):
    return expecting(test, kind, op_key(op), dtype, body)


def _call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _grad_outputs(op, sample):
    return sample.output_process_fn_grad(_call(op, sample))


class TestOxideOps(TestCase):
    # OpInfo tolerances (toleranceOverride decorators) apply through self.assertEqual.
    exact_dtype = True

    @ops(OPS)
    def test_samples(self, device, dtype, op):
        _skip_if_listed(self, op)
        _expecting(self, "op", op, dtype, lambda: self._samples(device, dtype, op))

    def _samples(self, device, dtype, op):
        key = op_key(op)
        native = True
        compared = 0
        accuracy = comparable_accuracy("op", key, dtype)
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            cpu_sample = cpu_reference_sample(key, sample.transform(cpu_copy))
            start = fallback_calls()
            actual = _call(op, sample)
            native = native and fallback_calls() == start
            expected = _call(op, cpu_sample)
            if key in METADATA_ONLY or op.name in METADATA_ONLY:
                self.assertEqual(metadata(to_cpu(actual)), metadata(expected))
            elif key in TIE_ORDER:
                assert_equal_up_to_ties(self, key, sample, actual, expected)
            elif key in SELECTION_TIES:
                assert_selected_up_to_ties(self, key, sample, actual, expected)
            elif key in AT_LEAST_AS_ACCURATE and dtype in (torch.float16, torch.bfloat16):
                reference = _call(op, float64_sample(key, cpu_sample))
                assert_at_least_as_accurate(self, actual, expected, reference)
            elif accuracy is not None:
                reference = _call(op, float64_sample(key, cpu_sample))
                assert_at_least_as_accurate(self, actual, expected, reference, factor=accuracy)
            elif key in TOLERANCES:
                atol, rtol = TOLERANCES[key]
                self.assertEqual(to_cpu(actual), expected, exact_device=False, atol=atol, rtol=rtol)
            else:
                self.assertEqual(to_cpu(actual), expected, exact_device=False)
            compared += 1
        record(self, "op", key, dtype, native and compared > 0)

    @ops([op for op in OPS if op.supports_autograd], allowed_dtypes=GRAD_DTYPES)
    def test_grad(self, device, dtype, op):
        _skip_if_listed(self, op)
        _expecting(self, "grad", op, dtype, lambda: self._grad(device, dtype, op))

    def _grad(self, device, dtype, op):
        key = op_key(op)
        if key in METADATA_ONLY or op.name in METADATA_ONLY:
            self.skipTest(f"random or uninitialised output ({METADATA_ONLY.get(key) or METADATA_ONLY[op.name]})")
        native = True
        checked = 0
        accuracy = comparable_accuracy("grad", key, dtype)
        for sample in op.sample_inputs(device, dtype, requires_grad=True):
            cpu_sample = cpu_reference_sample(key, sample.transform(cpu_copy))
            dev_inputs = [t for t in tensors_in([sample.input, sample.args, sample.kwargs]) if t.requires_grad]
            cpu_inputs = [
                t for t in tensors_in([cpu_sample.input, cpu_sample.args, cpu_sample.kwargs]) if t.requires_grad
            ]
            # output_process_fn_grad makes the loss well defined where an output is not
            # unique (eigenvectors up to phase: their abs), as PyTorch's own grad tests do.
            expected_out = [t for t in tensors_in(_grad_outputs(op, cpu_sample)) if t.requires_grad]
            if not expected_out or not cpu_inputs:
                continue
            start = fallback_calls()
            actual_out = [t for t in tensors_in(_grad_outputs(op, sample)) if t.requires_grad]
            gen = torch.Generator().manual_seed(0)
            weights = [
                torch.randn(t.shape, dtype=t.dtype, generator=gen)
                if not t.is_complex()
                else torch.randn(t.shape, dtype=t.dtype, generator=gen)
                for t in expected_out
            ]
            # Each weight on its output's device: `to` samples name a device, so some
            # outputs of the CPU reference live on oxide and some of oxide's on the CPU.
            expected = torch.autograd.grad(
                expected_out, cpu_inputs, [w.to(t.device) for w, t in zip(weights, expected_out)], allow_unused=True
            )
            actual = torch.autograd.grad(
                actual_out, dev_inputs, [w.to(t.device) for w, t in zip(weights, actual_out)], allow_unused=True
            )
            native = native and fallback_calls() == start
            if accuracy is not None:
                self._assert_grad_accuracy(op, cpu_sample, weights, actual, expected, accuracy)
            else:
                self.assertEqual(to_cpu(list(actual)), list(expected), exact_device=False)
            checked += 1
        if checked == 0:
            self.skipTest("no sample has a differentiable output")
        record(self, "grad", key, dtype, native)

    def _assert_grad_accuracy(self, op, cpu_sample, weights, actual, expected, factor):
        """Gradients against the same backward run in double precision on the CPU."""
        ref_sample = float64_sample(op_key(op), cpu_sample, leaf=True)
        ref_inputs = [t for t in tensors_in([ref_sample.input, ref_sample.args, ref_sample.kwargs]) if t.requires_grad]
        ref_out = [t for t in tensors_in(_grad_outputs(op, ref_sample)) if t.requires_grad]
        reference = torch.autograd.grad(ref_out, ref_inputs, [to_float64(w) for w in weights], allow_unused=True)
        self.assertEqual([g is None for g in actual], [g is None for g in expected])
        present = [i for i, g in enumerate(expected) if g is not None]
        assert_at_least_as_accurate(
            self,
            [actual[i] for i in present],
            [expected[i] for i in present],
            [reference[i] for i in present],
            factor=factor,
        )

    @ops([op for op in OPS if op.supports_out])
    def test_out(self, device, dtype, op):
        _skip_if_listed(self, op)
        _expecting(self, "out", op, dtype, lambda: self._out(device, dtype, op))

    def _out(self, device, dtype, op):
        key = op_key(op)
        sample = next(iter(op.sample_inputs(device, dtype)), None)
        if sample is None:
            self.skipTest("no sample input")
        expected = _call(op, sample.transform(cpu_copy))
        if not isinstance(expected, torch.Tensor):
            self.skipTest("out= with several outputs is covered by test_samples")
        out = torch.empty(0, dtype=expected.dtype, device=device)  # wrong size: must be resized like CPU
        start = fallback_calls()
        result = op(sample.input, *sample.args, out=out, **sample.kwargs)
        native = fallback_calls() == start
        self.assertTrue(result is out or result.data_ptr() == out.data_ptr())
        if key in METADATA_ONLY or op.name in METADATA_ONLY:
            self.assertEqual(metadata(to_cpu(out)), metadata(expected))
        else:
            self.assertEqual(to_cpu(out), expected, exact_device=False)
        record(self, "out", key, dtype, native)

    @ops([op for op in OPS if op.error_inputs_func is not None], dtypes=(torch.float32,))
    def test_error_inputs(self, device, dtype, op):
        _skip_if_listed(self, op)
        _expecting(self, "error", op, dtype, lambda: self._error_inputs(device, dtype, op))

    def _error_inputs(self, device, dtype, op):
        key = op_key(op)
        checked = 0
        start = fallback_calls()
        on_device = list(op.error_inputs(device))
        on_cpu = list(op.error_inputs("cpu"))
        # Generated on the CPU too (aliasing between out= and inputs kept), where the
        # lists line up: a case CPU accepts is no error on this build of PyTorch either
        # (the generic binary-ufunc cases assume no Python-scalar overloads), so oxide
        # must accept it as well.
        cpu_accepts = [False] * len(on_device)
        if len(on_cpu) == len(on_device):
            for k, ei in enumerate(on_cpu):
                try:
                    op(ei.sample_input.input, *ei.sample_input.args, **ei.sample_input.kwargs)
                except Exception:  # noqa: BLE001  any exception: CPU refuses the case
                    continue
                cpu_accepts[k] = True
        for ei, accepted in zip(on_device, cpu_accepts):
            si = ei.sample_input
            if accepted:
                with torch.oxide._LaunchBlocking():
                    op(si.input, *si.args, **si.kwargs)
                checked += 1
                continue
            # Kernels run at the call, as PyTorch runs CUDA's error inputs under
            # CUDA_LAUNCH_BLOCKING: a data-dependent check raises CPU's exception there.
            with torch.oxide._LaunchBlocking(), self.assertRaisesRegex(ei.error_type, ei.error_regex):
                op(si.input, *si.args, **si.kwargs)
            checked += 1
        record(self, "error", key, dtype, fallback_calls() == start)
        if checked == 0:
            self.skipTest("no error inputs on this device")


instantiate_device_type_tests(TestOxideOps, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
