"""Devices: count, current device, switching, context manager, invalid indices, torch.accelerator."""

import threading

import pytest
import torch


def test_device_count_and_availability():
    assert torch.oxide.is_available()
    assert torch.oxide.device_count() == 2  # OXIDE_DEVICE_COUNT default
    assert torch.accelerator.device_count() == 2
    assert torch.accelerator.is_available()


def test_current_accelerator_is_oxide():
    acc = torch.accelerator.current_accelerator()
    assert acc.type == "oxide"
    assert torch._C._get_privateuse1_backend_name() == "oxide"


def test_set_device_and_context_manager():
    assert torch.oxide.current_device() == 0
    with torch.oxide.device(1):
        assert torch.oxide.current_device() == 1
        assert torch.accelerator.current_device_index() == 1
        t = torch.empty(3, device="oxide")
        assert t.device == torch.device("oxide:1")
    assert torch.oxide.current_device() == 0
    torch.oxide.set_device("oxide:1")
    try:
        assert torch.oxide.current_device() == 1
        assert torch.ones(1, device="oxide").device.index == 1
    finally:
        torch.oxide.set_device(0)
    with torch.oxide.device(None):
        assert torch.oxide.current_device() == 0


def test_accelerator_device_index_switch():
    torch.accelerator.set_device_index(1)
    try:
        assert torch.oxide.current_device() == 1
    finally:
        torch.accelerator.set_device_index(0)
    with torch.accelerator.device_index(1):
        assert torch.oxide.current_device() == 1
    assert torch.oxide.current_device() == 0


def test_current_device_is_thread_local():
    seen = []

    def worker():
        torch.oxide.set_device(1)
        seen.append(torch.oxide.current_device())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [1]
    assert torch.oxide.current_device() == 0


def test_tensor_device_placement():
    a = torch.zeros(2, device="oxide:1")
    assert a.device == torch.device("oxide", 1)
    assert a.is_oxide
    assert torch.device("oxide").type == "oxide"


@pytest.mark.parametrize("bad", ["oxide:99", "oxide:2"])
def test_invalid_device_index_for_tensors(bad):
    with pytest.raises(RuntimeError, match=r"invalid device index \d+: oxide has 2 device"):
        torch.ones(2, device=bad)
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.ones(2).to(bad)
    # the process and the device are still fine
    assert torch.ones(2, device="oxide").sum().item() == 2


def test_invalid_device_index_for_generators():
    with pytest.raises(RuntimeError, match="invalid device index 99"):
        torch.Generator(device="oxide:99")
    g = torch.Generator(device="oxide:1")
    assert g.device == torch.device("oxide:1")


def test_invalid_device_in_module_functions():
    with pytest.raises(RuntimeError, match="invalid device index 5"):
        torch.oxide.set_device(5)
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.oxide.memory_allocated(7)
    with pytest.raises(ValueError, match="expected an oxide device"):
        torch.oxide.memory_allocated("cpu")
    with pytest.raises(RuntimeError, match="invalid device index"):
        with torch.oxide.device(3):
            pass
    assert torch.oxide.current_device() == 0


def test_synchronize():
    x = torch.ones(10, device="oxide:1")
    torch.oxide.synchronize()
    torch.oxide.synchronize(1)
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)
    assert x.cpu().sum().item() == 10


def test_device_name_and_seed_api():
    assert torch.oxide.get_device_name(1).startswith("oxide:1")
    torch.manual_seed(1234)  # reaches torch.oxide.manual_seed_all
    assert torch.oxide.initial_seed() == 1234
    state = torch.oxide.get_rng_state(1)
    assert state.dtype == torch.uint8
    torch.oxide.manual_seed_all(7)
    torch.oxide.set_rng_state(state, 1)
    assert torch._C._accelerator_getDefaultGenerator(1).initial_seed() == 1234


def test_device_properties_with_torch_cuda_names():
    props = torch.oxide.get_device_properties(1)
    assert props.name == torch.oxide.get_device_name(1)
    assert props.total_memory == torch.oxide.mem_get_info(1)[1] > 0
    assert props.multi_processor_count >= 1
    assert props.is_integrated
    assert torch.oxide.get_device_capability("oxide:1") == (props.major, props.minor) == (1, 0)
    assert torch.oxide.get_device_properties(torch.device("oxide", 0)).total_memory == props.total_memory
    with pytest.raises(RuntimeError):
        torch.oxide.get_device_properties(5)
    assert torch.oxide.is_bf16_supported()
    assert torch.oxide._initialized is torch.oxide.is_initialized()


# Every dtype the ABI has a code for: allocated, and converted between any two.
ABI_DTYPES = {
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex32, torch.complex64,
    torch.complex128, torch.bool, torch.float8_e5m2, torch.float8_e4m3fn, torch.float8_e5m2fnuz,
    torch.float8_e4m3fnuz, torch.float8_e8m0fnu,
}  # fmt: skip


@pytest.mark.filterwarnings("ignore:Casting complex values to real discards")  # as on CPU
def test_accelerator_device_capability_lists_convertible_dtypes():
    cap = torch.accelerator.get_device_capability("oxide:1")
    supported = cap["supported_dtypes"]
    assert supported == ABI_DTYPES
    assert torch.accelerator.get_device_capability() == cap
    # What the capability promises: allocation, and conversion between any two, as on CPU.
    for a in supported:
        x = torch.tensor([0, 1, 3], dtype=torch.int64).to(a)
        on_device = x.to("oxide:1")
        for b in supported:
            # Bytes, as CPU has no torch.equal for complex32.
            assert torch.equal(on_device.to(b).cpu().view(torch.uint8), x.to(b).view(torch.uint8)), (a, b)


def test_memory_summary_reports_the_allocator_statistics():
    torch.oxide.synchronize()
    before = torch.oxide.memory_allocated(1)
    x = torch.empty(1 << 20, dtype=torch.uint8, device="oxide:1")
    summary = torch.oxide.memory_summary(1)
    allocated = next(line for line in summary.splitlines() if line.startswith("Allocated memory"))
    current = allocated.split()[2:4]  # "Allocated memory <value> <unit> ..."
    value = float(current[0]) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[current[1]]
    assert abs(value - (before + (1 << 20))) <= 0.01 * value
    assert "Reserved memory" in summary and "Segments" in summary
    assert "Segments" not in torch.oxide.memory_summary(1, abbreviated=True)
    del x


def test_memory_fraction_is_enforced_and_the_process_stays_usable():
    torch.oxide.synchronize()
    torch.oxide.empty_cache()
    total = torch.oxide.mem_get_info(1)[1]
    try:
        torch.oxide.set_per_process_memory_fraction(0.25, 1)
        assert torch.oxide.get_per_process_memory_fraction("oxide:1") == pytest.approx(0.25, abs=1e-6)
        ooms = torch.oxide.memory_stats(1)["num_ooms"]
        fits = torch.empty(total // 8, dtype=torch.uint8, device="oxide:1")
        with pytest.raises(torch.OutOfMemoryError, match="set_per_process_memory_fraction"):
            torch.empty(total // 5, dtype=torch.uint8, device="oxide:1")
        assert torch.oxide.memory_stats(1)["num_ooms"] == ooms + 1
        # The other device has no limit, and this one still allocates within it.
        big = torch.empty(total // 3, dtype=torch.uint8, device="oxide:0")
        small = torch.ones(1000, device="oxide:1")
        assert small.sum().item() == 1000
        del fits, big
        with pytest.raises(ValueError):
            torch.oxide.set_per_process_memory_fraction(1.5, 1)
    finally:
        torch.oxide.set_per_process_memory_fraction(1.0, 1)
    assert torch.oxide.get_per_process_memory_fraction(1) == 1.0
    again = torch.empty(total // 3, dtype=torch.uint8, device="oxide:1")
    del again


def test_module_conversion_moves_parameters_in_place_and_keeps_ties():
    # As on CUDA: Module.to(), .oxide() and .cpu() set each Parameter's data in place
    # (the oxide _has_compatible_shallow_copy_type kernel admits the pair), so a
    # Parameter shared between modules stays shared and optimizers keep their references.
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    w = emb.weight
    w.grad = torch.ones_like(w)
    expected = w.detach().clone()
    for move, device in (
        (lambda m: m.to("oxide"), "oxide:0"),
        (lambda m: m.to("oxide:1"), "oxide:1"),
        (lambda m: m.cpu(), "cpu"),
        (lambda m: m.oxide(), "oxide:0"),
        (lambda m: m.to(torch.float64), "oxide:0"),
    ):
        move(model)
        assert emb.weight is w and head.weight is w
        assert list(model.parameters()) == [w]
        assert w.device == torch.device(device) and w.grad.device == w.device
        torch.testing.assert_close(w.detach().cpu(), expected.to(w.dtype))
    assert w.dtype == torch.float64 and w.grad.dtype == torch.float64

    # The registration is live both ways round; CPU-CPU pairs keep PyTorch's answer,
    # and a sparse tensor still cannot lend its metadata to a dense oxide one.
    cpu, dev = torch.ones(2), torch.ones(2, device="oxide")
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert not torch._has_compatible_shallow_copy_type(dev, cpu.to_sparse())
    p = torch.nn.Parameter(torch.zeros(3))
    p.data = torch.arange(3.0, device="oxide:1")
    assert p.device == torch.device("oxide:1") and isinstance(p, torch.nn.Parameter)
    torch.testing.assert_close(p.detach().cpu(), torch.arange(3.0))
