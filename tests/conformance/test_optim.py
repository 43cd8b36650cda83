"""OptimizerInfo conformance: every optimizer of PyTorch's optim_db, each of its
configurations (with foreach / fused variants where supported), a few steps on
oxide leave the same parameters as on CPU."""

import torch
from common import MODE, fallback_calls, record
from expectations import SKIP_OPTIMIZERS, SUBSET_OPTIMIZERS
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_optimizers import (
    _get_optim_inputs_including_global_cliquey_kwargs,
    optim_db,
    optims,
)
from torch.testing._internal.common_utils import TestCase, run_tests

import torch_oxide  # noqa: F401

torch.oxide.set_fallback_mode("silent")

OPTIMS = optim_db if MODE == "full" else [o for o in optim_db if o.optim_cls.__name__ in SUBSET_OPTIMIZERS]
STEPS = 3


# Parameter shapes: a matrix and a vector; Muon (orthogonalised matrix updates) takes
# only matrices, and refuses anything else on CPU too.
SHAPES = [(4, 3), (5,)]
MATRIX_ONLY = {"Muon": [(4, 3), (3, 5)]}


def _run(optim_cls, kwargs, device, dtype):
    gen = torch.Generator().manual_seed(0)
    shapes = MATRIX_ONLY.get(optim_cls.__name__, SHAPES)
    init = [torch.randn(*shape, generator=gen, dtype=dtype) for shape in shapes]
    grads = [[torch.randn(p.shape, generator=gen, dtype=dtype) for p in init] for _ in range(STEPS)]
    params = [torch.nn.Parameter(p.clone().to(device)) for p in init]
    opt = optim_cls(params, **kwargs)
    for step in range(STEPS):
        for p, g in zip(params, grads[step]):
            p.grad = g.to(device)
        opt.step()
    return [p.detach().cpu() for p in params]


class TestOxideOptimizers(TestCase):
    @optims(OPTIMS, dtypes=[torch.float32])
    def test_steps_match_cpu(self, device, dtype, optim_info):
        name = optim_info.optim_cls.__name__
        reason = SKIP_OPTIMIZERS.get(name)
        if reason:
            self.skipTest(reason)
        configs = _get_optim_inputs_including_global_cliquey_kwargs(device, dtype, optim_info, skip=("differentiable",))
        native = True
        checked = 0
        for config in configs:
            if config.params is not None:
                continue  # configs with their own param groups exercise grouping, not kernels
            kwargs = dict(config.kwargs)
            cpu_kwargs = {k: v for k, v in kwargs.items() if k != "fused" or v is False}
            if isinstance(kwargs.get("lr"), torch.Tensor):
                kwargs["lr"] = kwargs["lr"].clone()
                cpu_kwargs["lr"] = kwargs["lr"].clone().cpu()
            start = fallback_calls()
            actual = _run(optim_info.optim_cls, kwargs, device, dtype)
            native = native and fallback_calls() == start
            expected = _run(optim_info.optim_cls, cpu_kwargs, "cpu", dtype)
            self.assertEqual(actual, expected, msg=f"{name} {config.desc} {kwargs}")
            checked += 1
        if checked == 0:
            self.skipTest("no configuration without explicit param groups")
        record(self, "optim", name, dtype, native)


instantiate_device_type_tests(TestOxideOptimizers, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
