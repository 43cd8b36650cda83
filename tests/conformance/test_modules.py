"""ModuleInfo conformance: every module of PyTorch's module_db, forward and backward,
train and eval, on oxide against the same module on CPU (same initial weights)."""

import torch
from common import MODE, cpu_copy, expecting, fallback_calls, leaf_copy, record, tensors_in, to_cpu
from expectations import SKIP_MODULES, SUBSET_MODULES
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

import torch_oxide  # noqa: F401

torch.oxide.set_fallback_mode("silent")

MODULES = module_db if MODE == "full" else [m for m in module_db if m.name in SUBSET_MODULES]


class TestOxideModules(TestCase):
    @modules(MODULES, allowed_dtypes=(torch.float32, torch.float64) if MODE == "full" else (torch.float32,))
    def test_forward_backward(self, device, dtype, module_info, training):
        reason = SKIP_MODULES.get(module_info.name)
        if reason:
            self.skipTest(reason)
        key = f"{module_info.name}.{'train' if training else 'eval'}"
        expecting(self, "module", key, dtype, lambda: self._forward_backward(device, dtype, module_info, training, key))

    def _forward_backward(self, device, dtype, module_info, training, key):
        inputs = module_info.module_inputs_func(
            module_info, device=device, dtype=dtype, requires_grad=True, training=training
        )
        native = True
        checked = 0
        for mi in inputs:
            if mi.forward_input is None:
                continue
            c_args, c_kwargs = mi.constructor_input.args, mi.constructor_input.kwargs
            # Leaf copies on both sides, so input gradients are kept on both.
            f_args, f_kwargs = leaf_copy(mi.forward_input.args, device), leaf_copy(mi.forward_input.kwargs, device)
            cpu_args, cpu_kwargs = cpu_copy(f_args), cpu_copy(f_kwargs)
            # CPU first (it materialises lazy modules), then the same weights on oxide. Each side is
            # constructed from its own device's arguments, as a user would, so tensor attributes that
            # are neither parameters nor buffers live on the right device too.
            torch.manual_seed(0)
            cpu_ctor_kwargs = cpu_copy(c_kwargs)
            if "device" in cpu_ctor_kwargs:  # factory kwargs name the test device
                cpu_ctor_kwargs["device"] = "cpu"
            cpu_module = module_info.module_cls(*cpu_copy(c_args), **cpu_ctor_kwargs).to(dtype)
            cpu_module.train(training)
            cpu_out = cpu_module(*cpu_args, **cpu_kwargs)
            dev_module = module_info.module_cls(*leaf_copy(c_args, device), **leaf_copy(c_kwargs, device)).to(dtype)
            dev_module.load_state_dict(cpu_module.state_dict())
            dev_module = dev_module.to(device)
            dev_module.train(training)
            start = fallback_calls()
            dev_out = dev_module(*f_args, **f_kwargs)
            self.assertEqual(to_cpu(dev_out), cpu_out, exact_device=False)
            dev_outs = [t for t in tensors_in(dev_out) if t.requires_grad]
            cpu_outs = [t for t in tensors_in(cpu_out) if t.requires_grad]
            if cpu_outs:
                weights = [
                    torch.randn(t.shape, dtype=t.dtype, generator=torch.Generator().manual_seed(1)) for t in cpu_outs
                ]
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
        record(self, "module", key, dtype, native)


instantiate_device_type_tests(TestOxideModules, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
