"""The loss check of benchmarks/models.py: a benchmark run whose oxide losses drift from
the CPU's must fail, so that a fast but wrong training step is never reported as a result."""

import math
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import models  # noqa: E402


def _losses(cpu, oxide, blocking=None):
    def side(vals, dev):
        return [torch.tensor(v, device=dev) for v in vals]

    return {
        "cpu": side(cpu, "cpu"),
        "oxide": side(oxide, "oxide"),
        "oxide-blocking": side(oxide if blocking is None else blocking, "oxide"),
    }


CPU = [2.5, 1.5, 0.9, 0.4, 0.1, 0.01]


def test_equal_losses_agree_and_report_zero_difference():
    r = models._compare_losses(_losses(CPU, CPU))
    assert r["losses_agree"] is True
    assert r["loss_rel_diff_first_oxide"] == 0.0 and r["loss_rel_diff_all_oxide"] == 0.0
    assert r["loss_steps"] == len(CPU)


@pytest.mark.parametrize("step", range(models.JUDGED_STEPS))
def test_a_judged_step_off_by_more_than_the_tolerance_fails(step):
    wrong = list(CPU)
    wrong[step] *= 1 + 10 * models.LOSS_RTOL
    assert models._compare_losses(_losses(CPU, wrong))["losses_agree"] is False
    # The blocking side is judged as well.
    assert models._compare_losses(_losses(CPU, CPU, blocking=wrong))["losses_agree"] is False


def test_a_nan_loss_fails():
    wrong = list(CPU)
    wrong[0] = math.nan
    assert models._compare_losses(_losses(CPU, wrong))["losses_agree"] is False


def test_drift_after_the_judged_steps_is_reported_not_judged():
    drift = list(CPU)
    drift[-1] *= 1.5
    r = models._compare_losses(_losses(CPU, drift))
    assert r["losses_agree"] is True
    assert r["loss_rel_diff_all_oxide"] == pytest.approx(0.5)
