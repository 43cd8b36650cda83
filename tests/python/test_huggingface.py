"""Hugging Face on oxide: the Trainer through accelerate, and transformers' device-spec hook.

(Generation of Llama-, GPT-2- and T5-shaped models is in test_workloads.py.)
Each runs in a fresh interpreter: accelerate reads `ACCELERATE_TORCH_DEVICE` and
transformers' testing utilities read `TRANSFORMERS_TEST_DEVICE_SPEC` when they are imported.
"""

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_python

pytest.importorskip("transformers", reason="transformers is installed by requirements.txt")
pytest.importorskip("accelerate", reason="accelerate is installed by requirements.txt (the Trainer needs it)")

SPEC = Path(__file__).parents[1] / "huggingface" / "transformers_device_spec.py"

# A few Trainer steps of a tiny GPT-2 without dropout (so oxide and CPU see the same
# numbers), the Trainer's default optimizer (fused AdamW); prints what it saw as JSON.
TRAINER = """
import json, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=32, vocab_size=100, resid_pdrop=0.0,
                 embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2)
model = GPT2LMHeadModel(cfg)
g = torch.Generator().manual_seed(0)
data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 100, (32, 16), generator=g)]
args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=8, num_train_epochs=1,
                         logging_steps=1, report_to=[], save_strategy="no", seed=0, data_seed=0,
                         disable_tqdm=True, use_cpu=sys.argv[2] == "cpu", fp16=sys.argv[3] == "fp16")
trainer = Trainer(model=model, args=args, train_dataset=data)
trainer.train()
opt = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
fallback = torch.oxide.fallback_stats() if hasattr(torch, "oxide") else {}
print(json.dumps({
    "device": str(args.device),
    "params": str(next(model.parameters()).device),
    "optimizer": type(opt).__name__,
    "fused": bool(opt.defaults.get("fused")),
    "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
    "fallback": {str(k): v for k, v in dict(fallback).items()},
}))
"""


def run_trainer(tmp_path, device: str, precision: str = "fp32") -> dict:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {"ACCELERATE_TORCH_DEVICE": "oxide", "OXIDE_FALLBACK": "error"} if device == "oxide" else {}
    out = run_python(
        f"import runpy, sys; sys.argv = [{str(script)!r}, {str(tmp_path / device)!r}, {device!r}, {precision!r}]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')",
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_trainer_trains_on_oxide_with_fused_adamw_as_on_cpu(tmp_path):
    oxide = run_trainer(tmp_path, "oxide")
    assert oxide["device"] == "oxide" and oxide["params"] == "oxide:0"
    assert oxide["optimizer"] == "AdamW" and oxide["fused"], oxide
    assert oxide["fallback"] == {}
    cpu = run_trainer(tmp_path, "cpu")
    assert cpu["device"] == "cpu" and len(cpu["losses"]) == len(oxide["losses"]) == 4
    assert oxide["losses"] == pytest.approx(cpu["losses"], rel=1e-4)


def test_trainer_fp16_mixed_precision_on_oxide(tmp_path):
    # fp16=True: the Trainer's autocast and GradScaler on the oxide device. (bf16=True is
    # refused by transformers' own device list, "Your setup doesn't support bf16/gpu".)
    fp32 = run_trainer(tmp_path, "oxide")
    fp16 = run_trainer(tmp_path, "oxide", "fp16")
    assert fp16["fallback"] == {} and fp16["params"] == "oxide:0"
    assert fp16["losses"] == pytest.approx(fp32["losses"], rel=1e-3)


def test_transformers_device_spec_selects_oxide(tmp_path):
    # transformers imports the spec by its bare file name from the working directory.
    shutil.copy(SPEC, tmp_path / SPEC.name)
    out = run_python(
        f"""
        import os
        os.chdir({str(tmp_path)!r})
        import torch
        from transformers import testing_utils as tu
        assert tu.torch_device == "oxide", tu.torch_device
        tu.backend_manual_seed("oxide", 7)
        a = torch.rand(3, device=tu.torch_device)
        tu.backend_manual_seed("oxide", 7)
        assert torch.equal(a, torch.rand(3, device="oxide"))
        assert tu.backend_device_count("oxide") == torch.oxide.device_count() >= 1
        tu.backend_empty_cache("oxide")
        print("ok")
        """,
        env={"TRANSFORMERS_TEST_DEVICE_SPEC": SPEC.name},
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
