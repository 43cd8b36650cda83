"""ModuleInfo conformance: every module of PyTorch's module_db, forward and backward,
train and eval, on oxide against the same module on CPU (same initial weights)."""

import copy

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

import torch_oxide  # noqa: F401

from common import MODE, cpu_copy, fallback_calls, record, tensors_in, to_cpu
from expectations import SKIP_MODULES, SUBSET_MODULES

torch.oxide.set_fallback_mode("silent")

MODULES = module_db if MODE == "full" else [m for m in module_db if m.name in SUBSET_MODULES]


class TestOxideModules(TestCase):
    @modules(MODULES, allowed_dtypes=(torch.float32, torch.float64) if MODE == "full" else (torch.float32,))
    def test_forward_backward(self, device, dtype, module_info, training):
        reason = SKIP_MODULES.get(module_info.name)
        if reason:
            self.skipTest(reason)
        inputs = module_info.module_inputs_func(module_info, device=device, dtype=dtype, requires_grad=True,
                                                training=training)
        native = True
        checked = 0
        for mi in inputs:
            if mi.forward_input is None:
                continue
            c_args, c_kwargs = mi.constructor_input.args, mi.constructor_input.kwargs
            torch.manual_seed(0)
            cpu_module = module_info.module_cls(*cpu_copy(c_args), **cpu_copy(c_kwargs)).to(dtype)
            dev_module = copy.deepcopy(cpu_module).to(device)
            cpu_module.train(training)
            dev_module.train(training)
            f_args, f_kwargs = mi.forward_input.args, mi.forward_input.kwargs
            cpu_args, cpu_kwargs = cpu_copy(f_args), cpu_copy(f_kwargs)
            start = fallback_calls()
            dev_out = dev_module(*f_args, **f_kwargs)
            cpu_out = cpu_module(*cpu_args, **cpu_kwargs)
            self.assertEqual(to_cpu(dev_out), cpu_out, exact_device=False)
            dev_outs = [t for t in tensors_in(dev_out) if t.requires_grad]
            cpu_outs = [t for t in tensors_in(cpu_out) if t.requires_grad]
            if cpu_outs:
                weights = [torch.randn(t.shape, dtype=t.dtype, generator=torch.Generator().manual_seed(1)) for t in cpu_outs]
                torch.autograd.backward(cpu_outs, weights)
                torch.autograd.backward(dev_outs, [w.to(device) for w in weights])
                for (name, p_cpu), (_, p_dev) in zip(cpu_module.named_parameters(), dev_module.named_parameters()):
                    self.assertEqual(p_dev.grad is None, p_cpu.grad is None, msg=name)
                    if p_cpu.grad is not None:
                        self.assertEqual(to_cpu(p_dev.grad), p_cpu.grad, exact_device=False, msg=name)
                dev_in = [t for t in tensors_in([f_args, f_kwargs]) if t.requires_grad]
                cpu_in = [t for t in tensors_in([cpu_args, cpu_kwargs]) if t.requires_grad]
                for a, b in zip(dev_in, cpu_in):
                    self.assertEqual(None if a.grad is None else to_cpu(a.grad), b.grad, exact_device=False)
            native = native and fallback_calls() == start
            checked += 1
        if checked == 0:
            self.skipTest("no module inputs")
        record(self, "module", f"{module_info.name}.{'train' if training else 'eval'}", dtype, native)


instantiate_device_type_tests(TestOxideModules, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
