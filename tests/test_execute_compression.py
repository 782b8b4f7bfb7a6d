"""Gradient compression in the executor (Plan.grad_compression): DDP's bf16 and PowerSGD communication hooks and
FSDP2's bf16 reduce dtype train, on CPU with gloo and 2 ranks, close to the uncompressed run of the same seed;
PowerSGD's first two steps are torch's plain all-reduce (its documented warm-up), so they agree to rounding."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # CI installs torch (README test command); the core install does not

from perfmodel.execute.run_plans import run_plans  # noqa: E402

from test_execute import LLAMA, plan_file, write_all  # noqa: E402

STEPS = 6
PLANS = {"ddp": dict(gpus=2), "ddp-bf16": dict(gpus=2, grad_compression="bf16"),
         "ddp-powersgd": dict(gpus=2, grad_compression="powersgd", powersgd_rank=2),
         "fsdp": dict(gpus=2, zero=3), "fsdp-bf16": dict(gpus=2, zero=3, grad_compression="bf16")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compression")
    paths = write_all(tmp, {name: plan_file(LLAMA, **kw) for name, kw in PLANS.items()})
    ms = run_plans(paths, 2, device="cpu", steps=STEPS, warmup=1, timeout_s=300)
    return dict(zip(PLANS, ms))


def _gap(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a.losses, b.losses))


@pytest.mark.parametrize("name, base", [("ddp-bf16", "ddp"), ("fsdp-bf16", "fsdp")])
def test_bf16_gradients_train_as_fp32_up_to_bf16_rounding(runs, name, base):
    a, b = runs[name], runs[base]
    assert a.losses[0] == b.losses[0]  # before any update
    gap = _gap(a, b)
    assert 0 < gap < 2e-3, (a.losses, b.losses)  # the gradients were rounded, and only that


def test_powersgd_compresses_after_its_warm_up(runs):
    p, ref = runs["ddp-powersgd"], runs["ddp"]
    # steps 0-2: the weights of updates 0 and 1, which torch's hook all-reduces whole
    assert max(abs(x - y) for x, y in zip(p.losses[:3], ref.losses[:3])) < 1e-6
    later = max(abs(x - y) for x, y in zip(p.losses[3:], ref.losses[3:]))
    assert 1e-6 < later < 0.05, (p.losses, ref.losses)  # rank-2 updates: close, not the same
    assert any("PowerSGD (rank 2) compressed from step 2" in n for n in p.notes)


def test_powersgd_plans_are_refused_with_checkpoints(tmp_path):
    from perfmodel.errors import InputError

    (path,) = write_all(tmp_path, {"psgd": plan_file(LLAMA, **PLANS["ddp-powersgd"])})
    with pytest.raises(InputError, match="grad_compression = powersgd: the PowerSGD hook's residuals"):
        run_plans([path], 2, device="cpu", steps=4, checkpoint_dir=tmp_path / "ck", checkpoint_every=2)
    assert not (tmp_path / "ck").exists()
