"""Acceptance workloads: real models train on oxide with zero CPU fallbacks.

Each test builds one model, copies it to oxide, and runs the same training steps
(forward, loss, backward, optimizer step) on both devices under OXIDE_FALLBACK=error;
losses, gradients and updated parameters must match the CPU run. Dropout is disabled
where a model has it: random streams differ between devices by design.
"""

import copy
import importlib.util
import pathlib

import pytest
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


def train_and_compare(model, batches, loss_fn, make_opt, steps=2, rtol=1e-4, atol=1e-5):
    """Runs `steps` steps on CPU and oxide from the same weights; compares loss, grads, params."""
    model_c = model
    model_o = copy.deepcopy(model)
    params = list(model_o.parameters())
    model_o.to("oxide")
    # As on CUDA, Module.to() moves each Parameter in place: the same objects, so
    # weights tied between modules (GPT-2's lm_head and wte) stay tied.
    assert all(a is b for a, b in zip(model_o.parameters(), params, strict=True))
    opt_c, opt_o = make_opt(model_c.parameters()), make_opt(model_o.parameters())
    names = [n for n, _ in model_c.named_parameters()]
    for step in range(steps):
        inputs = batches(step)
        losses = []
        for m, opt, dev in ((model_c, opt_c, "cpu"), (model_o, opt_o, "oxide")):
            opt.zero_grad()
            loss = loss_fn(m, *[t.to(dev) for t in inputs])
            loss.backward()
            losses.append(loss)
        torch.testing.assert_close(losses[1].detach().cpu(), losses[0].detach(), rtol=rtol, atol=atol)
        for name, pc, po in zip(names, model_c.parameters(), model_o.parameters()):
            if pc.grad is None:
                assert po.grad is None, name
                continue
            torch.testing.assert_close(po.grad.cpu(), pc.grad, rtol=rtol * 10, atol=atol * 10, msg=name)
        opt_c.step()
        opt_o.step()
    for name, pc, po in zip(names, model_c.parameters(), model_o.parameters()):
        torch.testing.assert_close(po.detach().cpu(), pc.detach(), rtol=rtol * 10, atol=atol * 10, msg=name)
    for (name, bc), bo in zip(model_c.named_buffers(), model_o.buffers()):
        torch.testing.assert_close(bo.cpu(), bc, rtol=rtol * 10, atol=atol * 10, msg=name)


def demo_model_and_data():
    """The `make demo` CNN (seeded) and its training images and labels, from examples/digits_cnn.py."""
    spec = importlib.util.spec_from_file_location("digits_cnn", ROOT / "examples" / "digits_cnn.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    x, y, _, _ = demo.load_data(seed=0)
    torch.manual_seed(0)
    return demo.DigitsCNN(), x, y


def test_demo_reports_the_warm_up_epoch_apart_from_steady_ones():
    spec = importlib.util.spec_from_file_location("digits_cnn", ROOT / "examples" / "digits_cnn.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    first, steady, warm_up = demo.epoch_summary([0.5, 0.2, 0.4, 0.1])
    assert (first, steady) == (0.5, 0.2)  # the median of the epochs after the first
    assert warm_up == pytest.approx(0.3)
    assert demo.epoch_summary([0.25]) == (0.25, 0.25, 0.0)


def test_digits_cnn_demo_model():
    model, x, y = demo_model_and_data()
    train_and_compare(
        model,
        lambda s: (x[64 * s : 64 * s + 64], y[64 * s : 64 * s + 64]),
        lambda m, xb, yb: F.cross_entropy(m(xb), yb),
        lambda p: torch.optim.Adam(p, lr=3e-3),
        steps=3,
    )


def test_resnet18_training_step():
    torchvision = pytest.importorskip("torchvision", reason="torchvision is installed by requirements.txt")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    g = torch.Generator().manual_seed(1)
    batches = lambda s: (torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g))  # noqa: E731
    train_and_compare(
        model,
        batches,
        lambda m, xb, yb: F.cross_entropy(m(xb), yb),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        steps=1,
        rtol=1e-3,
        atol=1e-4,
    )


def test_gpt2_training_step():
    transformers = pytest.importorskip("transformers", reason="transformers is installed by requirements.txt")
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=64,
        vocab_size=256,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(2)
    batches = lambda s: (torch.randint(0, 256, (2, 24), generator=g),)  # noqa: E731
    train_and_compare(
        model,
        batches,
        lambda m, ids: m(ids, labels=ids).loss,
        lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True),
        steps=2,
        rtol=1e-3,
        atol=1e-4,
    )


def _generation_models(transformers):
    """Llama-, GPT-2- and T5-shaped models from config (random weights, small)."""
    torch.manual_seed(0)
    common = dict(vocab_size=100, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return {
        "gpt2": transformers.GPT2LMHeadModel(
            transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, **common)
        ),
        "llama": transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                num_hidden_layers=2,
                hidden_size=64,
                intermediate_size=128,
                num_attention_heads=4,
                num_key_value_heads=2,
                **common,
            )
        ),
        "t5": transformers.T5ForConditionalGeneration(
            transformers.T5Config(
                num_layers=2, d_model=64, d_ff=128, num_heads=4, d_kv=16, decoder_start_token_id=0, **common
            )
        ),
    }


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5"])
def test_generation_runs_natively_and_matches_cpu(family):
    # Greedy and beam search pick the same tokens as on the CPU; sampling draws from
    # oxide's own generator (Philox), so only its shape and vocabulary are checked. The
    # stopping criteria call isin at every step: it has a native kernel.
    transformers = pytest.importorskip("transformers", reason="transformers is installed by requirements.txt")
    model = _generation_models(transformers)[family].eval()
    ids = torch.randint(3, 100, (2, 8), generator=torch.Generator().manual_seed(1))
    for kwargs in (dict(do_sample=False), dict(num_beams=3, do_sample=False)):
        want = model.generate(ids, max_new_tokens=6, **kwargs)
        got = copy.deepcopy(model).to("oxide").generate(ids.to("oxide"), max_new_tokens=6, **kwargs)
        assert torch.equal(got.cpu(), want), (kwargs, got, want)
    sampled = copy.deepcopy(model).to("oxide").generate(ids.to("oxide"), max_new_tokens=6, do_sample=True, top_k=10)
    assert sampled.device.type == "oxide" and sampled.shape[0] == 2 and int(sampled.max()) < 100


class SequenceModel(torch.nn.Module):
    """(B, T) token ids -> (B, classes) logits: embedding, 2-layer LSTM, GRU, linear head."""

    def __init__(self, vocab=50, dim=16, classes=5):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.lstm = torch.nn.LSTM(dim, dim, num_layers=2, batch_first=True)
        self.gru = torch.nn.GRU(dim, dim, batch_first=True)
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, ids):
        h, _ = self.lstm(self.embed(ids))
        h, _ = self.gru(h)
        return self.head(h[:, -1])


def test_lstm_gru_sequence_model_training_step():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    batches = lambda s: (torch.randint(0, 50, (4, 7), generator=g), torch.randint(0, 5, (4,), generator=g))  # noqa: E731
    train_and_compare(
        SequenceModel(),
        batches,
        lambda m, ids, yb: F.cross_entropy(m(ids), yb),
        lambda p: torch.optim.Adam(p, lr=1e-2),
        steps=2,
    )
