"""MaxText's dense MoE dispatch (Plan.moe_dense_dispatch, cost.compute.moe_dense): the capacity, the dispatch and combine
einsums and the experts on capacity-padded rows, worked out by hand for Mixtral 8x7B (hidden 4096, 8 experts
top-2 of 14336, every layer MoE) on one sequence of 4096 tokens per device; the flag, the refusal and the dev-set
rows that state it."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.cost.compute.moe_dense import MAXTEXT_CAPACITY_FACTOR, dense_capacity
from perfmodel.errors import InputError
from perfmodel.published.tpu_amd_runs import dense_moe_of

H, F, E, K, S = 4096, 14336, 8, 2, 4096


@pytest.fixture(scope="module")
def mixtral():
    return load_model("mixtral-8x7b")


def layer_ops(model, **kw):
    plan = Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=S, zero=3, stack="maxtext", **kw)
    e = estimate(model, load_hardware("tpu-v5p"), plan)
    return {o.name: o for o in e.ops if o.where == "layer"}


def test_capacity_as_generate_masks_sets_it(mixtral):
    # int(max(ceil(S k / E) x cf, cf)): ceil(4096 x 2 / 8) = 1024 tokens a sequence, x 1.25
    assert dense_capacity(mixtral, S, 1.25) == 1280
    assert dense_capacity(mixtral, 8, 0.5) == 1  # ceil(2) x 0.5 = 1
    # base.yml's -1 (no dropping): every expert takes every token of the sequence
    assert MAXTEXT_CAPACITY_FACTOR == -1.0 and dense_capacity(mixtral, S, None) == S


def test_einsums_and_padded_experts_by_hand(mixtral):
    ops = layer_ops(mixtral, moe_dense_dispatch=True, moe_capacity_factor=1.25)
    C = 1280
    # "BSM,BSEC -> EBCM" and "EBCM,BSEC -> BSM": 2 S E C h FLOPs each for the device's one sequence
    assert ops["moe_dispatch"].fwd_flops == ops["moe_combine"].fwd_flops == 2 * S * E * C * H
    # the dispatch's backward is the tokens' gradient alone (integer one-hot mask), the combine's both gradients
    assert ops["moe_dispatch"].bwd_s == pytest.approx(ops["moe_dispatch"].fwd_s)
    # the experts on E x C padded rows: gate and up (2 f wide) and down, 2 FLOPs a multiply-add
    assert ops["experts_in"].fwd_flops == 2 * E * C * 2 * F * H
    assert ops["experts_out"].fwd_flops == 2 * E * C * F * H
    assert "permute" not in ops and "unpermute" not in ops
    sparse = layer_ops(mixtral)  # MaxText's default sparse path: the routed S k copies
    assert sparse["experts_in"].fwd_flops == 2 * S * K * 2 * F * H and "moe_dispatch" not in sparse


def test_without_a_capacity_every_expert_runs_every_token(mixtral):
    ops = layer_ops(mixtral, moe_dense_dispatch=True)
    assert ops["experts_in"].fwd_flops == 2 * S * E * 2 * F * H  # "BSM,EMH -> BSEH"
    assert "moe_dispatch" not in ops and "moe_weight_sum" in ops  # "BSEM,BSE -> BSM"


def test_a_dense_model_is_refused_naming_the_field():
    with pytest.raises(InputError, match="moe_dense_dispatch = true: llama-2-7b is a dense model .* valid: "
                                         "moe_dense_dispatch = false"):
        estimate(load_model("llama-2-7b"), load_hardware("tpu-v5p"),
                 Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=S, moe_dense_dispatch=True))


def test_the_cli_flag():
    base = [sys.executable, "-m", "perfmodel", "predict", "--hardware", "tpu-v5p", "--gpus", "8", "--tp", "1",
            "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096", "--stack", "maxtext",
            "--zero", "3", "--moe-dense-dispatch"]
    out = subprocess.run(base + ["--model", "mixtral-8x7b", "--moe-capacity-factor", "1.25"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert "moe_dispatch" in out.stdout
    bad = subprocess.run(base + ["--model", "llama-2-7b"], capture_output=True, text=True)
    assert bad.returncode == 2 and "moe_dense_dispatch = true" in bad.stderr and "Traceback" not in bad.stderr


def test_dev_set_rows_that_state_it(mixtral):
    def row(notes, framework="MaxText"):
        return pd.Series({"notes": notes, "framework": framework})

    recipe = "Same recipe as the tpu-recipes row (mixtral_8x7b_dropped, pdbs 12, cf 1.25)"
    assert dense_moe_of(row(recipe), mixtral) == dict(moe_dense_dispatch=True, moe_capacity_factor=1.25)
    stated = "16 experts top-2, capacity_factor=1.5 (token dropping), sparse_matmul=False"
    assert dense_moe_of(row(stated), mixtral) == dict(moe_dense_dispatch=True, moe_capacity_factor=1.5)
    assert dense_moe_of(row("sparse_matmul=False"), mixtral) == dict(moe_dense_dispatch=True,
                                                                      moe_capacity_factor=None)
    assert dense_moe_of(row("megablox"), mixtral) == {}
    assert dense_moe_of(row(recipe, framework="NeMo"), mixtral) == {}
    assert dense_moe_of(row(recipe), load_model("llama-2-7b")) == {}
