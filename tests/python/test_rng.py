"""Generators and random kernels: Philox seed/offset semantics, determinism, distributions vs CPU."""

import pytest
import torch
import torch.nn.functional as F
from conftest import run_python

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def test_same_seed_same_numbers_and_generator_is_honoured(native_only):
    g = torch.Generator(device="oxide").manual_seed(123)
    a = torch.randn(1000, device="oxide", generator=g).cpu()
    g.manual_seed(123)
    b = torch.randn(1000, device="oxide", generator=g).cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.oxide.manual_seed(123)  # the default generator is a different object: draws continue independently
    c = torch.randn(1000, device="oxide").cpu()
    torch.testing.assert_close(a, c, rtol=0, atol=0)  # same seed, same offset 0 -> same numbers
    g.manual_seed(124)
    assert not torch.equal(a, torch.randn(1000, device="oxide", generator=g).cpu())


def test_offset_advances_by_elements_and_can_be_set(native_only):
    g = torch.Generator(device="oxide").manual_seed(5)
    assert g.get_offset() == 0
    first = torch.rand(10, device="oxide", generator=g).cpu()
    assert g.get_offset() == 10
    second = torch.rand(10, device="oxide", generator=g).cpu()
    g.manual_seed(5)
    g.set_offset(10)
    torch.testing.assert_close(torch.rand(10, device="oxide", generator=g).cpu(), second, rtol=0, atol=0)
    g.manual_seed(5)
    both = torch.rand(20, device="oxide", generator=g).cpu()
    torch.testing.assert_close(both, torch.cat([first, second]), rtol=0, atol=0)


def test_state_round_trip_and_clone(native_only):
    g = torch.Generator(device="oxide:1").manual_seed(9)
    torch.rand(7, device="oxide:1", generator=g)
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    x = torch.rand(5, device="oxide:1", generator=g).cpu()
    g.set_state(state)
    torch.testing.assert_close(torch.rand(5, device="oxide:1", generator=g).cpu(), x, rtol=0, atol=0)
    h = g.clone_state() if hasattr(g, "clone_state") else g.graphsafe_get_state()
    assert h.initial_seed() == 9 and h.get_offset() == g.get_offset()
    with pytest.raises(ValueError, match="16 bytes"):
        g.set_state(torch.zeros(3, dtype=torch.uint8))


def test_module_seed_functions(native_only):
    torch.manual_seed(42)
    assert torch.oxide.initial_seed() == 42
    assert torch._C._accelerator_getDefaultGenerator(1).initial_seed() == 42
    states = torch.oxide.get_rng_state_all()
    x = torch.rand(3, device="oxide:1").cpu()
    torch.oxide.set_rng_state_all(states)
    torch.testing.assert_close(torch.rand(3, device="oxide:1").cpu(), x, rtol=0, atol=0)
    torch.oxide.manual_seed(7)
    assert torch.oxide.initial_seed() == 7
    torch.oxide.seed()
    assert torch.oxide.initial_seed() != 7  # a fresh 64-bit seed (7 again has probability 2^-64)
    torch.oxide.seed_all()
    seeds = {torch._C._accelerator_getDefaultGenerator(i).initial_seed() for i in range(2)}
    assert len(seeds) == 1 and seeds != {7}
    state = torch.oxide.get_rng_state()
    y = torch.rand(3, device="oxide").cpu()
    torch.oxide.set_rng_state(state)
    torch.testing.assert_close(torch.rand(3, device="oxide").cpu(), y, rtol=0, atol=0)


def test_numbers_do_not_depend_on_thread_count():
    code = """
        import torch, sys
        torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else {n})
        g = torch.Generator(device="oxide").manual_seed(77)
        x = torch.randn(100_000, device="oxide", generator=g).cpu()
        print(float(x.double().sum()), float(x[12345]))
    """
    outs = [run_python(code.format(n=n)) for n in (1, 2)]
    for o in outs:
        assert o.returncode == 0, o.stderr
    assert outs[0].stdout == outs[1].stdout


def test_cpu_generator_is_rejected():
    with pytest.raises(RuntimeError, match="Expected a 'oxide' device type for generator"):
        torch.randn(3, device="oxide", generator=torch.Generator())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_continuous_distributions_moments(dtype, native_only):
    n = 200_000
    torch.manual_seed(0)
    u = torch.empty(n, dtype=dtype, device="oxide").uniform_(-2, 3).cpu().double()
    assert u.min() >= -2 and u.max() < 3
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 25 / 12) < 0.05
    z = torch.empty(n, dtype=dtype, device="oxide").normal_(1.5, 2.0).cpu().double()
    assert abs(z.mean() - 1.5) < 0.03 and abs(z.std() - 2.0) < 0.03
    e = torch.empty(n, dtype=dtype, device="oxide").exponential_(4.0).cpu().double()
    assert e.min() >= 0 and abs(e.mean() - 0.25) < 0.01
    ln = torch.empty(n, dtype=dtype, device="oxide").log_normal_(0.0, 0.25).cpu().double()
    assert ln.min() > 0 and abs(ln.log().mean()) < 0.02
    c = torch.empty(n, dtype=dtype, device="oxide").cauchy_(1.0, 2.0).cpu().double()
    assert abs(c.median() - 1.0) < 0.05
    geo = torch.empty(n, dtype=dtype, device="oxide").geometric_(0.2).cpu().double()
    assert geo.min() >= 1 and abs(geo.mean() - 5.0) < 0.1


def test_functional_factories(native_only):
    torch.manual_seed(1)
    assert torch.rand(2, 3, device="oxide").shape == (2, 3)
    assert torch.randn(4, dtype=torch.float64, device="oxide:1").device == torch.device("oxide:1")
    r = torch.randint(3, 9, (1000,), device="oxide").cpu()
    assert r.dtype == torch.int64 and r.min() == 3 and r.max() == 8
    for shape in [(0,), (3, 0), (0, 4)]:
        assert torch.rand(shape, device="oxide").shape == shape
        assert torch.randn(shape, device="oxide").shape == shape
        assert torch.randint(0, 5, shape, device="oxide").shape == shape


@pytest.mark.parametrize(
    "dtype,lo,hi",
    [
        (torch.uint8, 0, 255),
        (torch.int8, 0, 127),
        (torch.int16, 0, 2**15 - 1),
        (torch.int32, 0, 2**31 - 1),
        (torch.int64, 0, 2**63 - 1),
        (torch.float32, 0, 2**24),
        (torch.float64, 0, 2**53),
        (torch.bool, 0, 1),
        (torch.float16, 0, 2**11),
        (torch.bfloat16, 0, 2**8),
    ],
    ids=str,
)
def test_random_overloads_ranges(dtype, lo, hi, native_only):
    x = torch.empty(20_000, dtype=dtype, device="oxide").random_().cpu()
    assert x.double().min() >= lo and x.double().max() <= hi
    if dtype != torch.bool:
        y = torch.empty(5000, dtype=dtype, device="oxide").random_(2, 7).cpu()
        assert set(y.long().tolist()) == {2, 3, 4, 5, 6}
        z = torch.empty(5000, dtype=dtype, device="oxide").random_(5).cpu()
        assert set(z.long().tolist()) == {0, 1, 2, 3, 4}
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        torch.empty(3, device="oxide").random_(5, 2)


def test_full_64_bit_range(native_only):
    x = torch.empty(10_000, dtype=torch.int64, device="oxide").random_(-(2**63), None).cpu()
    assert (x < 0).any() and (x > 0).any()


def test_bernoulli_scalar_and_tensor_p(native_only):
    torch.manual_seed(3)
    x = torch.empty(100_000, device="oxide").bernoulli_(0.3).cpu()
    assert set(x.unique().tolist()) <= {0.0, 1.0} and abs(x.mean() - 0.3) < 0.01
    p = torch.tensor([0.0, 1.0, 0.25]).repeat(30_000).to("oxide")
    y = torch.bernoulli(p).cpu().view(-1, 3)
    assert (y[:, 0] == 0).all() and (y[:, 1] == 1).all() and abs(y[:, 2].mean() - 0.25) < 0.01
    ints = torch.empty(4, 1000, dtype=torch.int32, device="oxide").bernoulli_(torch.full((1000,), 0.5, device="oxide"))
    assert ints.dtype == torch.int32 and 0.4 < ints.cpu().float().mean().item() < 0.6
    with pytest.raises(RuntimeError, match="bernoulli_ expects p to be in"):
        torch.empty(3, device="oxide").bernoulli_(1.5)


def test_native_dropout_matches_its_mask(native_only):
    torch.manual_seed(0)
    x = torch.randn(200, 50)
    out, mask = torch.ops.aten.native_dropout(x.to("oxide"), 0.3, True)
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool and abs(mask.float().mean() - 0.7) < 0.02
    torch.testing.assert_close(out, x * mask / 0.7)
    eval_out, eval_mask = torch.ops.aten.native_dropout(x.to("oxide"), 0.3, False)
    torch.testing.assert_close(eval_out.cpu(), x)
    assert eval_mask.cpu().all()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout_forward_backward(dtype):
    x = torch.randn(64, 32, dtype=dtype).to("oxide").requires_grad_()
    y = F.dropout(x, p=0.5, training=True)
    y.sum().backward()
    kept = y.detach().cpu() != 0
    torch.testing.assert_close(x.grad.cpu(), kept.to(dtype) * 2.0)
    assert abs(kept.float().mean().item() - 0.5) < 0.06


def test_randperm(native_only):
    torch.manual_seed(0)
    for n, dtype in [(1000, torch.int64), (50, torch.int32), (100, torch.float32), (0, torch.int64)]:
        p = torch.randperm(n, dtype=dtype, device="oxide").cpu()
        assert p.dtype == dtype and sorted(p.long().tolist()) == list(range(n))
    g = torch.Generator(device="oxide").manual_seed(4)
    a = torch.randperm(100, device="oxide", generator=g).cpu()
    g.manual_seed(4)
    assert torch.equal(a, torch.randperm(100, device="oxide", generator=g).cpu())
    out = torch.empty(0, dtype=torch.int64, device="oxide")
    torch.randperm(7, out=out)
    assert out.shape == (7,)


def test_multinomial(native_only):
    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 1.0]], device="oxide")
    s = torch.multinomial(probs, 4000, replacement=True).cpu()
    assert s.shape == (2, 4000) and s.dtype == torch.int64
    assert not (s[0] == 1).any() and abs((s[0] == 2).float().mean() - 0.6) < 0.03
    w = torch.multinomial(probs, 3).cpu()
    assert all(len(set(row.tolist())) == 3 for row in w) and 1 not in w[0].tolist()
    one = torch.multinomial(torch.tensor([0.0, 5.0], device="oxide"), 1).cpu()
    assert one.tolist() == [1]
    # more samples than positive weights without replacement: like CPU, zero-weight categories fill up
    both = torch.multinomial(torch.tensor([0.0, 1.0, 0.0], device="oxide"), 2).cpu()
    assert both[0].item() == 1 and len(set(both.tolist())) == 2


@pytest.mark.usefixtures("launch_blocking")  # a data-dependent kernel check, compared at the call
@pytest.mark.parametrize(
    "probs,n,replacement",
    [([-0.1, 1.0], 1, True), ([0.0, 0.0], 1, True), ([1.0, 1.0], 3, False), ([float("nan"), 1.0], 1, True)],
    ids=["negative", "zero-sum", "too-many-without-replacement", "nan"],
)
def test_multinomial_errors_match_cpu(probs, n, replacement):
    with pytest.raises(RuntimeError) as cpu_err:
        torch.multinomial(torch.tensor(probs), n, replacement)
    with pytest.raises(RuntimeError) as dev_err:
        torch.multinomial(torch.tensor(probs, device="oxide"), n, replacement)
    assert str(dev_err.value).split("\n")[0] == str(cpu_err.value).split("\n")[0]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_random_fills(dtype):
    torch.manual_seed(0)
    x = torch.randn(20_000, dtype=dtype, device="oxide").cpu()
    assert x.real.std().item() == pytest.approx(0.5**0.5, rel=0.05)
    assert x.imag.std().item() == pytest.approx(0.5**0.5, rel=0.05)
    u = torch.empty(1000, dtype=dtype, device="oxide").uniform_(0, 1).cpu()
    assert 0 <= u.real.min() and u.real.max() < 1 and 0 <= u.imag.min() and u.imag.max() < 1


@pytest.mark.usefixtures("launch_blocking")  # a data-dependent kernel check, compared at the call
@pytest.mark.parametrize(
    "call,error,pattern",
    [
        (lambda: torch.bernoulli(torch.tensor([1.5, -0.5], device="oxide")), RuntimeError, "p_in >= 0 && p_in <= 1"),
        (lambda: torch.bernoulli(torch.tensor([float("nan")], device="oxide")), RuntimeError, "p_in >= 0 && p_in <= 1"),
        (
            lambda: torch.bernoulli(torch.tensor([1, 0], device="oxide")),
            NotImplementedError,
            "not implemented for 'Long'",
        ),
        (lambda: torch.randperm(300, dtype=torch.int8, device="oxide"), RuntimeError, "without overflow"),
        (lambda: torch.randperm(3000, dtype=torch.float16, device="oxide"), RuntimeError, "2049 for Half"),
        (
            lambda: torch.randperm(4, dtype=torch.bool, device="oxide"),
            NotImplementedError,
            "not implemented for 'Bool'",
        ),
        (lambda: torch.randn(4, dtype=torch.int64, device="oxide"), NotImplementedError, "not implemented for 'Long'"),
        (
            lambda: torch.empty(4, dtype=torch.int32, device="oxide").exponential_(),
            RuntimeError,
            "continuous probability",
        ),
        (
            lambda: torch.randperm(5, generator=torch.Generator("oxide")),
            RuntimeError,
            "Expected a 'cpu' device type for generator",
        ),
        (lambda: torch.multinomial(torch.ones(2**24 + 1, device="oxide"), 1), RuntimeError, "cannot exceed 2\\^24"),
    ],
    ids=[
        "p>1",
        "p-nan",
        "int-p",
        "randperm-int8",
        "randperm-half",
        "randperm-bool",
        "randn-int",
        "exponential-int",
        "generator-device",
        "multinomial-categories",
    ],
)
def test_random_argument_errors_like_cpu(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# PyTorch facilities that save and restore the device's RNG state. A facility that
# restored the wrong state (or none) recomputes with another dropout mask: the
# gradients below would then differ from the plain run's, silently.
def _dropout_block(x, w):
    return F.dropout(x @ w, 0.5, training=True).sin() @ w


@pytest.mark.parametrize("device", ["cpu", "oxide"])
@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non-reentrant"])
def test_activation_checkpointing_replays_the_dropout_mask(device, reentrant):
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    x = torch.randn(16, 16, device=device, requires_grad=True)
    w = torch.randn(16, 16, device=device, requires_grad=True)
    torch.manual_seed(1)
    plain = _dropout_block(x, w)
    plain.sum().backward()
    grads = [x.grad.cpu(), w.grad.cpu()]
    x.grad = w.grad = None
    torch.manual_seed(1)
    checkpointed = checkpoint(_dropout_block, x, w, use_reentrant=reentrant)
    checkpointed.sum().backward()
    torch.testing.assert_close(checkpointed.cpu(), plain.cpu(), rtol=0, atol=0)
    torch.testing.assert_close([x.grad.cpu(), w.grad.cpu()], grads, rtol=0, atol=0)
    # The recomputation restored the state it saved, and left the generator where the
    # forward pass had: the next draw is the one after the forward's dropout.
    torch.manual_seed(1)
    _dropout_block(x, w)
    after_forward = torch.rand(4, device=device).cpu()
    torch.manual_seed(1)
    checkpoint(_dropout_block, x, w, use_reentrant=reentrant).sum().backward()
    torch.testing.assert_close(torch.rand(4, device=device).cpu(), after_forward, rtol=0, atol=0)


def test_fork_rng_restores_the_forked_devices_only():
    torch.manual_seed(3)
    torch.rand(2, device="oxide:1")
    want0, want1 = torch.oxide.get_rng_state(0), torch.oxide.get_rng_state(1)
    with torch.random.fork_rng(devices=[0, 1], device_type="oxide"):
        torch.oxide.manual_seed_all(99)
        torch.rand(5, device="oxide:0")
        torch.rand(5, device="oxide:1")
    assert torch.equal(torch.oxide.get_rng_state(0), want0) and torch.equal(torch.oxide.get_rng_state(1), want1)
    with torch.random.fork_rng(devices=[1], device_type="oxide"):
        torch.rand(5, device="oxide:0")  # device 0 is not forked: its draw stays drawn
        torch.rand(5, device="oxide:1")
    assert not torch.equal(torch.oxide.get_rng_state(0), want0)
    assert torch.equal(torch.oxide.get_rng_state(1), want1)
    # The CPU generator is forked too, as on any device type.
    cpu_state = torch.get_rng_state()
    with torch.random.fork_rng(devices=[], device_type="oxide"):
        torch.rand(3)
    assert torch.equal(torch.get_rng_state(), cpu_state)


def test_per_device_states_are_independent():
    torch.oxide.manual_seed_all(5)
    s0, s1 = torch.oxide.get_rng_state("oxide:0"), torch.oxide.get_rng_state(1)
    a1 = torch.rand(6, device="oxide:1").cpu()
    torch.rand(100, device="oxide:0")  # draws on device 0 do not move device 1's state
    torch.oxide.set_rng_state(s1, device=1)
    torch.testing.assert_close(torch.rand(6, device="oxide:1").cpu(), a1, rtol=0, atol=0)
    torch.oxide.set_rng_state(s0, device=torch.device("oxide", 0))
    assert torch.equal(torch.oxide.get_rng_state(0), s0)
    # A state is a copy: drawing afterwards does not change it.
    before = s0.clone()
    torch.rand(10, device="oxide:0")
    assert torch.equal(s0, before) and s0.device.type == "cpu"
