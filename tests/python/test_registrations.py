"""Every static registration of the glue is live (the linker could drop it silently).

Operator kernels (TORCH_LIBRARY_IMPL at PrivateUse1, AutogradPrivateUse1 and
AutocastPrivateUse1) are compared with a committed snapshot of the dispatcher's own
registrations; the other registrations get one test each: REGISTER_ALLOCATOR, C10_REGISTER_GUARD_IMPL,
RegisterPrivateUse1HooksInterface, the generator behind the hooks,
TORCH_LIBRARY_IMPL(aten, PrivateUse1), TORCH_LIBRARY_IMPL(_, PrivateUse1),
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1) and REGISTER_GRAPH_IMPL.
"""

import gc
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# The committed snapshot of every operator with a kernel at oxide's dispatch keys, as the
# dispatcher itself reports them. Regenerate after adding or removing a registration:
#     .venv/bin/python tests/python/test_registrations.py --update
SNAPSHOT = Path(__file__).with_name("registrations.txt")
KEYS = ("PrivateUse1", "AutogradPrivateUse1", "AutocastPrivateUse1")


def live_registrations() -> set[str]:
    """``"<dispatch key> <operator>"`` for every kernel registered at oxide's keys."""
    return {f"{key} {op}" for key in KEYS for op in torch._C._dispatch_get_registrations_for_dispatch_key(key)}


def test_registrations_match_snapshot():
    # A fresh interpreter: what importing the extension registers, not what earlier tests added.
    out = subprocess.run([sys.executable, __file__, "--print"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    expected = {line for line in SNAPSHOT.read_text().splitlines() if line and not line.startswith("#")}
    live = set(out.stdout.splitlines())
    missing, extra = sorted(expected - live), sorted(live - expected)
    assert not missing and not extra, (
        f"registrations differ from {SNAPSHOT.name} (regenerate with "
        f"`python tests/python/test_registrations.py --update` if intended): "
        f"missing {missing[:20]} ({len(missing)}), new {extra[:20]} ({len(extra)})"
    )


@pytest.mark.parametrize("key", KEYS)
def test_snapshot_covers_each_key(key):
    # A snapshot taken without the extension loaded would hold (almost) nothing.
    assert sum(1 for line in SNAPSHOT.read_text().splitlines() if line.startswith(key + " ")) > 0


def test_device_allocator_registered():
    # torch.accelerator casts the registered allocator to c10::DeviceAllocator and would
    # hit an internal assert for a plain Allocator, or CPU's when nothing is registered.
    gc.collect()  # garbage of earlier tests must not be freed between the two readings
    before = torch.accelerator.memory_allocated()
    x = torch.empty(1024, dtype=torch.uint8, device="oxide")
    assert torch.accelerator.memory_allocated() == before + 1024
    assert torch._C._accelerator_isAllocatorInitialized()
    del x


def test_guard_impl_registered():
    assert torch._C._accelerator_hooks_device_count() == 2
    s = torch.Stream(device="oxide:1")  # getNewStream of the guard
    assert s.device.index == 1
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1


def test_graph_impl_registered():
    # Without REGISTER_GRAPH_IMPL(OXIDE, ...) this raises "Graph is not supported on device type".
    g = torch.accelerator.Graph()
    x = torch.zeros(1, device="oxide")
    with g:
        x.add_(1)
    g.replay()
    assert x.item() == 1


def test_hooks_registered():
    assert torch._C._get_privateuse1_backend_name() == "oxide"
    assert torch.accelerator.is_available()  # isAvailable
    x = torch.ones(2, device="oxide")
    x.requires_grad_()
    (x * 3).sum().backward()  # backward asks hasPrimaryContext
    assert x.grad is not None
    p = torch.ones(3).pin_memory()  # getPinnedMemoryAllocator / isPinnedPtr
    assert p.is_pinned() and not torch.ones(3).is_pinned()


def test_generator_via_hooks():
    g = torch.Generator(device="oxide")  # getNewGenerator
    g.manual_seed(5)
    assert g.initial_seed() == 5
    assert g.device.type == "oxide"
    d = torch._C._accelerator_getDefaultGenerator(0)  # getDefaultGenerator
    assert d.device == torch.device("oxide:0")
    clone = g.clone_state() if hasattr(g, "clone_state") else g.graphsafe_get_state()
    assert clone.initial_seed() == 5


def test_cpu_fallback_registered_and_counted():
    torch.oxide.reset_fallback_stats()
    x = torch.tensor([1.0, 2.0]).to("oxide")
    y = torch.igamma(x, x)  # no native kernel: runs on the counted fallback
    assert y.device.type == "oxide"
    torch.testing.assert_close(y.cpu(), torch.igamma(x.cpu(), x.cpu()))
    assert torch.oxide.fallback_stats() == {"aten::igamma.out": 1}


def test_autocast_fallthrough_registered():
    x = torch.ones(4, device="oxide")
    with torch.autocast("oxide", dtype=torch.bfloat16):
        assert torch.oxide.is_autocast_enabled()
        assert torch.oxide.get_autocast_dtype() == torch.bfloat16
        y = x + 1  # no policy for add: falls through to the kernel
    assert y.dtype == torch.float32 and y.sum().item() == 8
    with torch.autocast("oxide", enabled=False):
        assert not torch.oxide.is_autocast_enabled()


def test_hooks_device_calls():
    assert torch._C._accelerator_hooks_device_count() == 2
    old = torch._C._accelerator_hooks_exchange_device(1)
    try:
        assert old == 0 and torch._C._accelerator_hooks_get_current_device() == 1
    finally:
        torch._C._accelerator_hooks_set_current_device(0)
    assert torch._C._accelerator_hooks_maybe_exchange_device(0) == 0


def test_generated_backend_methods():
    x = torch.ones(3)
    assert x.oxide().is_oxide and x.oxide(1).device.index == 1
    m = torch.nn.Linear(2, 2).oxide()
    assert next(m.parameters()).is_oxide
    s = torch.ones(4).untyped_storage().oxide()
    assert s.is_oxide and s.device.type == "oxide"
    seq = torch.nn.utils.rnn.pack_sequence([torch.ones(3, 2), torch.ones(2, 2)])
    packed = seq.oxide()
    assert packed.is_oxide and packed.data.device.type == "oxide"


if __name__ == "__main__":
    if sys.argv[1:] not in (["--update"], ["--print"]):
        sys.exit("usage: python tests/python/test_registrations.py --update | --print")
    import torch_oxide  # noqa: F401  (autoload may be disabled)

    if sys.argv[1] == "--print":
        print("\n".join(sorted(live_registrations())))
        sys.exit(0)
    lines = sorted(live_registrations())
    header = "# Generated by `python tests/python/test_registrations.py --update`; one kernel per line.\n"
    SNAPSHOT.write_text(header + "\n".join(lines) + "\n")
    print(f"wrote {len(lines)} registrations to {SNAPSHOT}")
