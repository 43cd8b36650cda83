"""Graph capture and replay: torch.accelerator.Graph on oxide.

Capturing keeps the launches aimed at the current stream as graph nodes; a replay
runs them all as one launch. The oracle is the same code run eagerly (on oxide and
on the CPU): a replay must give what running the captured code again would give.
"""

import gc
import os
import warnings

import pytest
import torch
import torch.nn as nn

DEV = "oxide"


def capturing() -> bool:
    assert torch.oxide.is_current_stream_capturing() == torch.accelerator.current_stream().is_capturing()
    return torch.oxide.is_current_stream_capturing()


def test_capture_runs_nothing_and_each_replay_runs_everything():
    x = torch.arange(4.0, device=DEV)
    y = torch.zeros(4, device=DEV)
    g = torch.accelerator.Graph()
    assert not capturing()
    with g:
        assert capturing()
        y.add_(x * 2)
        z = y + 1  # allocated during the capture, from the graph's pool
    assert not capturing()
    assert y.cpu().tolist() == [0, 0, 0, 0], "the capture must not run the captured work"
    g.replay()
    assert y.cpu().tolist() == [0, 2, 4, 6] and z.cpu().tolist() == [1, 3, 5, 7]
    g.replay()
    g.replay()
    assert y.cpu().tolist() == [0, 6, 12, 18] and z.cpu().tolist() == [1, 7, 13, 19]


def test_a_side_stream_capture_replays_after_earlier_work():
    x = torch.ones(1000, device=DEV)
    s = torch.Stream(device=DEV)
    g = torch.accelerator.Graph()
    s.wait_stream(torch.accelerator.current_stream())
    with torch.accelerator.StreamContext(s) if hasattr(torch.accelerator, "StreamContext") else s:
        with g:
            assert s.is_capturing() and not torch.Stream(device=DEV).is_capturing()
            x.mul_(3)
    x.add_(1)  # queued on the default stream, before the replay
    g.replay()  # on the current stream: after the add
    assert torch.equal(x.cpu(), torch.full((1000,), 6.0))


def _mlp_steps(device, steps, graphed):
    """Loss per step of a small MLP with dropout and Adam, eager or replayed from a graph."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.05, capturable=device != "cpu")
    data = [(torch.randn(6, 8), torch.randint(0, 4, (6,))) for _ in range(steps)]
    static_x = torch.zeros(6, 8, device=device)
    static_t = torch.zeros(6, dtype=torch.long, device=device)
    torch.oxide.manual_seed(1)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(model(static_x), static_t)
        loss.backward()
        opt.step()
        return loss

    losses = []
    g = None
    for i, (x, t) in enumerate(data):
        static_x.copy_(x)
        static_t.copy_(t)
        if not graphed or i == 0:  # the first step creates gradients and optimizer state
            losses.append(step().item())
            continue
        if g is None:
            g = torch.accelerator.Graph()
            with g:
                static_loss = step()
        g.replay()
        losses.append(static_loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_a_captured_training_step_trains_as_the_eager_one():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # capturable=True without a capture warns once
        eager, eager_params = _mlp_steps(DEV, 6, graphed=False)
        replayed, replayed_params = _mlp_steps(DEV, 6, graphed=True)
    # Same kernels, same Philox numbers for dropout: the same bits.
    assert replayed == eager
    for a, b in zip(eager_params, replayed_params):
        assert torch.equal(a, b)
    assert eager[-1] != eager[1], "the replays must have trained"


def test_random_operators_draw_new_numbers_on_each_replay():
    for gen in (None, torch.Generator(device=DEV)):
        seed = lambda: gen.manual_seed(5) if gen is not None else torch.oxide.manual_seed(5)  # noqa: E731
        seed()
        expected = [torch.randn(3, device=DEV, generator=gen).cpu() for _ in range(3)]
        after = torch.randn(3, device=DEV, generator=gen).cpu()
        seed()
        out = torch.empty(3, device=DEV)
        g = torch.accelerator.Graph()
        with g:
            out.normal_(generator=gen)
        got = []
        for _ in range(3):
            g.replay()
            got.append(out.cpu())
        for e, r in zip(expected, got):
            assert torch.equal(e, r), "replay k draws what the k-th eager call would"
        # The capture did not advance the generator; the replays did, by one call each.
        assert torch.equal(torch.randn(3, device=DEV, generator=gen).cpu(), after)


def test_replays_reuse_the_pool_and_memory_does_not_grow():
    x = torch.randn(4096, device=DEV)
    g = torch.accelerator.Graph()
    with g:
        y = (x * 2).exp()  # a temporary freed and reused inside the capture
        z = y.sin()
    ptrs = (y.data_ptr(), z.data_ptr())
    allocated = torch.oxide.memory_allocated()
    for _ in range(20):
        g.replay()
    torch.oxide.synchronize()
    assert torch.oxide.memory_allocated() == allocated
    assert (y.data_ptr(), z.data_ptr()) == ptrs
    # The pool's blocks belong to the graph: empty_cache keeps them and eager
    # allocations never receive them, so replays after both still write what they should.
    del y
    torch.oxide.empty_cache()
    others = [torch.full((4096,), 7.0, device=DEV) for _ in range(8)]
    g.replay()
    assert torch.equal(z.cpu(), (x * 2).exp().sin().cpu())
    assert all(torch.equal(o.cpu(), torch.full((4096,), 7.0)) for o in others)


def test_a_pool_shared_by_two_graphs_and_reset():
    x = torch.randn(1024, device=DEV)
    g1 = torch.accelerator.Graph()
    with g1:
        a = x + 1
    g2 = torch.accelerator.Graph(pool=g1.pool())
    with g2:
        b = a * 3
    assert g2.pool() == g1.pool()
    g1.replay()
    g2.replay()
    assert torch.allclose(b.cpu(), (x.cpu() + 1) * 3)
    g1.reset()
    with pytest.raises(RuntimeError, match="needs a finished capture"):
        g1.replay()
    with g1:  # a reset graph captures again
        a.mul_(2)
    g1.replay()
    assert torch.allclose(a.cpu(), (x.cpu() + 1) * 2)


def test_keep_graph_instantiates_on_first_replay_or_explicitly():
    x = torch.zeros(3, device=DEV)
    for explicit in (False, True):
        g = torch.accelerator.Graph(keep_graph=True)
        with g:
            x.add_(1)
        if explicit:
            g.instantiate()
        g.replay()
    assert x.cpu().tolist() == [2, 2, 2]


def test_scalars_are_frozen_at_capture():
    x = torch.zeros(2, device=DEV)
    scale = 1.5
    g = torch.accelerator.Graph()
    with g:
        x.add_(scale)
    scale = 100.0  # noqa: F841  (a Python number is a kernel argument: captured by value)
    g.replay()
    g.replay()
    assert x.cpu().tolist() == [3.0, 3.0]


def test_a_graph_freed_with_a_replay_queued_still_runs_it():
    x = torch.ones(100_000, device=DEV)
    g = torch.accelerator.Graph()
    with g:
        for _ in range(20):
            x.mul_(1.01)
    for _ in range(5):
        g.replay()
    del g
    gc.collect()
    assert torch.allclose(x.cpu(), torch.full((100_000,), 1.01**100), rtol=1e-4)


def test_replay_with_launch_blocking_runs_at_the_call():
    x = torch.zeros(4, device=DEV)
    g = torch.accelerator.Graph()
    with g:
        x.add_(1)
    with torch.oxide._LaunchBlocking():
        g.replay()
    assert x.cpu().tolist() == [1, 1, 1, 1]


def test_a_kernel_error_in_a_replay_names_the_capturing_line():
    src = torch.randn(4, device=DEV)
    index = torch.tensor([0, 1], device=DEV)
    out = torch.empty(2, device=DEV)
    g = torch.accelerator.Graph()
    with g:
        torch.index_select(src, 0, index, out=out)
    index.fill_(9)  # out of range for the replay
    g.replay()
    with pytest.raises(RuntimeError, match=r"in a graph replay, launch \d+ of \d+: index_select .*test_graphs.py:\d+"):
        torch.oxide.synchronize()


UNCAPTURABLE = {
    ".item()": lambda x: x.sum().item(),
    ".cpu()": lambda x: x.cpu(),
    "printing": lambda x: str(x),
    "a data-dependent output size": lambda x: torch.nonzero(x),
    "the CPU fallback": lambda x: torch.igamma(x, x),
    "synchronizing the stream": lambda x: torch.accelerator.current_stream().synchronize(),
    "synchronizing the device": lambda x: torch.accelerator.synchronize(),
    "querying the stream": lambda x: torch.accelerator.current_stream().query(),
    "recording an event": lambda x: torch.accelerator.current_stream().record_event(),
    "a copy to another device": lambda x: x.to("oxide:1"),
    "another stream waiting": lambda x: torch.Stream(device=DEV).wait_stream(torch.accelerator.current_stream()),
}

MESSAGES = {
    ".item()": "pageable host memory",
    ".cpu()": "pageable host memory",
    "printing": "pageable host memory|oxide_nonzero",  # the formatter looks for non-finite values first
    "a data-dependent output size": "oxide_nonzero",
    "the CPU fallback": "igamma.*CPU fallback",
    "synchronizing the stream": "synchronizing the capturing stream",
    "synchronizing the device": "synchronizing the device",
    "querying the stream": "querying the capturing stream",
    "recording an event": "recording an event",
    "a copy to another device": "another stream wait for the capturing stream",
    # torch.Stream.wait_stream records an event on the capturing stream first.
    "another stream waiting": "recording an event on the capturing stream",
}


@pytest.mark.parametrize("what", list(UNCAPTURABLE))
def test_what_cannot_be_captured_fails_during_capture_and_leaves_nothing(what):
    x = torch.rand(64, device=DEV) + 0.5
    before = torch.oxide.memory_allocated()
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match=MESSAGES[what]) as err:
        with g:
            x.mul_(2)
            UNCAPTURABLE[what](x)
    # The with-block's capture_end reports the invalidated capture, chained to the
    # error raised at the offending call.
    assert "invalidated" in str(err.value)
    assert not capturing()
    with pytest.raises(RuntimeError, match="needs a finished capture"):
        g.replay()
    assert torch.oxide.memory_allocated() == before
    # Nothing half-captured ran, and the stream and the graph work again.
    assert torch.all(x.cpu() < 1.5 + 1e-6)
    with g:
        x.mul_(2)
    g.replay()
    assert torch.all(x.cpu() >= 1.0)


def test_copies_with_pinned_memory_are_captured():
    x = torch.zeros(4, device=DEV)
    src = torch.arange(4.0).pin_memory()
    dst = torch.empty(4).pin_memory()
    g = torch.accelerator.Graph()
    with g:
        x.copy_(src, non_blocking=True)
        x.mul_(2)
        dst.copy_(x, non_blocking=True)
    src.add_(1)  # the replay reads the pinned buffer as it is then
    g.replay()
    torch.oxide.synchronize()
    assert dst.tolist() == [2, 4, 6, 8]


def test_a_pinned_buffer_of_a_captured_copy_lives_as_long_as_the_graph():
    x = torch.full((1024,), 7.0, device=DEV)
    g = torch.accelerator.Graph()
    with g:
        x.to("cpu", non_blocking=True)  # a pinned tensor the capture creates and drops
    keep = [torch.zeros(1024).pin_memory() for _ in range(4)]  # would take its memory
    for _ in range(3):
        g.replay()
    torch.oxide.synchronize()
    assert all(torch.equal(k, torch.zeros(1024)) for k in keep), "the replay wrote freed pinned memory"
    del g


def test_gather_scatter_and_index_add_are_captured():
    src = torch.randn(4, 8, device=DEV)
    idx = torch.randint(0, 8, (4, 8), device=DEV)
    rows = torch.tensor([0, 2], device=DEV)
    g = torch.accelerator.Graph()
    with g:
        a = src.gather(1, idx)
        b = torch.zeros(4, 8, device=DEV).scatter_add_(1, idx, src)
        c = torch.zeros(4, 8, device=DEV).index_add_(0, rows, src[:2])
    g.replay()
    assert torch.equal(a.cpu(), src.cpu().gather(1, idx.cpu()))
    torch.testing.assert_close(b.cpu(), torch.zeros(4, 8).scatter_add_(1, idx.cpu(), src.cpu()))
    assert torch.equal(c.cpu(), torch.zeros(4, 8).index_add_(0, rows.cpu(), src.cpu()[:2]))
    # Out-of-range indices (negative ones too: gather does not wrap them) fail the replay.
    for bad in (-1, 8):
        idx[0, 0] = bad
        g.replay()
        with pytest.raises(RuntimeError, match="in a graph replay"):
            torch.oxide.synchronize()
        idx[0, 0] = 0


def test_a_random_graph_cannot_be_replayed_inside_another_capture():
    g1 = torch.accelerator.Graph()
    with g1:
        torch.randn(3, device=DEV)
    plain = torch.accelerator.Graph()
    x = torch.zeros(2, device=DEV)
    with plain:
        x.add_(1)
    g2 = torch.accelerator.Graph()
    with g2:
        plain.replay()  # no random numbers: one node of g2
    g2.replay()
    assert x.cpu().tolist() == [1, 1]
    with pytest.raises(RuntimeError, match="draws random numbers cannot be replayed inside another capture"):
        with torch.accelerator.Graph():
            g1.replay()


def test_a_compiled_function_is_captured_and_replayed():
    # Inductor's C++ kernels are launch records (README, Graphs), so they are captured like eager launches.
    f = torch.compile(lambda t: (t * 2).sin(), backend="inductor")
    x = torch.randn(16, device=DEV)
    f(x)  # compiled outside the capture
    g = torch.accelerator.Graph()
    if os.environ.get("OXIDE_SANITIZE") == "1":
        # The sanitizer calls C++ kernels on the host with host views after synchronizing
        # the stream (test_compile's skips), and synchronizing a capturing stream is refused.
        with pytest.raises(RuntimeError, match="synchronizing the capturing stream"):
            with g:
                f(x)
        assert not capturing()
        return
    with g:
        y = f(x)
    assert not capturing()
    fresh = torch.randn(16)
    x.copy_(fresh)
    g.replay()
    torch.testing.assert_close(y.cpu(), (fresh * 2).sin())


def test_an_optimizer_without_capturable_refuses_the_capture():
    p = nn.Parameter(torch.randn(4, device=DEV))
    p.grad = torch.randn(4, device=DEV)
    opt = torch.optim.Adam([p], capturable=False)
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="capturable is False"):
        with g:
            opt.step()


def test_debug_dump_lists_the_launches(tmp_path):
    x = torch.randn(8, device=DEV)
    g = torch.accelerator.Graph()
    g.enable_debug_mode()
    with g:
        y = x.exp()
        y.add_(1)
    path = tmp_path / "graph.txt"
    g.debug_dump(str(path))
    text = path.read_text()
    assert "2 launches" in text and "oxide:0" in text
    assert [line.split() for line in text.splitlines()[2:]] == [["1", "oxide_pointwise"], ["2", "oxide_pointwise"]]
    with pytest.raises(RuntimeError, match="enable_debug_mode"):
        h = torch.accelerator.Graph()
        with h:
            x.add_(1)
        h.debug_dump(str(path))


def test_capture_misuse_raises():
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="without capture_begin"):
        g.capture_end()
    g.capture_begin()
    try:
        with pytest.raises(RuntimeError, match="while this graph is capturing"):
            g.capture_begin()
        with pytest.raises(RuntimeError, match="already capturing"):
            torch.accelerator.Graph().capture_begin()
    finally:
        g.capture_end()
    with pytest.raises(RuntimeError, match="holds a capture already"):
        g.capture_begin()
