"""A tiled loss (Plan.loss_chunks, MaxText's num_vocab_tiling): the LM head and cross entropy over chunks of a
micro-batch's tokens. It keeps no logits for the backward, holds one chunk's at a time, and rebuilds each chunk's
logits in the backward (the head's forward again). Worked out by hand for Llama 2 7B on one sequence of 4096."""

from __future__ import annotations

import subprocess
import sys

import pytest

from perfmodel import Plan, estimate
from perfmodel.cost.compute.flops import tiled_loss_flops_per_token
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import head_activation_bytes, loss_temporary_bytes
from perfmodel.errors import InputError
from perfmodel.export.checks.spread import maxtext_plan_file
from perfmodel.export.targets import export, nearest_updates
from perfmodel.spec.plan.layout import resolve
from perfmodel.spec.stack.profile import load_stack

H, V, T = 4096, 32000, 4096


def lay(llama2_7b, tpu_v5p, **kw):
    return Layouts.from_plan(resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, stack="maxtext", **kw),
                                     llama2_7b, tpu_v5p))


def test_a_tiled_loss_keeps_no_logits_and_holds_one_chunk(llama2_7b, tpu_v5p):
    per_logit = load_stack("maxtext").loss_bytes_per_logit
    one, four = lay(llama2_7b, tpu_v5p), lay(llama2_7b, tpu_v5p, loss_chunks=4)
    # final-norm and LM-head inputs (bf16), + the fp32 logits the untiled backward keeps; tiled, the final-norm
    # input alone (MaxText applies the output head, final norm included, chunk by chunk in the backward)
    assert float(head_activation_bytes(llama2_7b, one)[0]) == T * (2 * H + 2 * H + 4 * V)
    assert float(head_activation_bytes(llama2_7b, four)[0]) == T * 2 * H
    # untiled: the loss's temporaries beyond the kept logits; tiled: one chunk's, logits included
    assert float(loss_temporary_bytes(llama2_7b, one)[0]) == (per_logit - 4) * T * V
    assert float(loss_temporary_bytes(llama2_7b, four)[0]) == per_logit * T * V / 4


def test_the_backward_rebuilds_the_logits(llama2_7b, tpu_v5p):
    def run(n):
        return estimate(llama2_7b, tpu_v5p, Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, stack="maxtext",
                                         loss_chunks=n))

    one, four = run(1), run(4)
    head = {o.name: o for o in four.ops if o.where == "head"}
    assert head["lm_head"].recompute_s == pytest.approx(head["lm_head"].fwd_s) and head["lm_head"].fwd_s > 0
    assert head["cross_entropy"].recompute_s == pytest.approx(head["cross_entropy"].fwd_s)
    assert head["final_norm"].recompute_s == pytest.approx(head["final_norm"].fwd_s) and head["final_norm"].fwd_s > 0
    assert all(o.recompute_s == 0 for o in one.ops if o.where == "head")
    assert four.step_time_s > one.step_time_s
    assert tiled_loss_flops_per_token(llama2_7b, 4) == 2 * V * H and tiled_loss_flops_per_token(llama2_7b, 1) == 0
    tokens = 8 * T
    assert four.hardware_flops_per_step - one.hardware_flops_per_step == pytest.approx(tokens * 2 * V * H)


def test_chunks_must_divide_the_tokens(llama2_7b, tpu_v5p):
    with pytest.raises(InputError, match=r"loss_chunks = 3 does not divide the 4096 tokens of a micro-batch on a "
                                         r"context-parallel rank \(micro_batch x seq_len / cp\); valid: 1, 2, 4"):
        lay(llama2_7b, tpu_v5p, loss_chunks=3)
    run = subprocess.run([sys.executable, "-m", "perfmodel", "predict", "--model", "llama-2-7b", "--hardware",
                          "tpu-v5p", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--global-batch",
                          "8", "--seq-len", "4096", "--loss-chunks", "0"], capture_output=True, text=True)
    assert run.returncode == 2 and "--loss-chunks" in run.stderr and "Traceback" not in run.stderr


def test_exports():
    pf = maxtext_plan_file("v5p-names-save-dot")
    pf = pf.model_copy(update={"plan": pf.plan.model_copy(update={"loss_chunks": 4})})
    assert "num_vocab_tiling: 4" in export(pf, "maxtext")
    for to, version in (("megatron", "core_r0.16.1"), ("torchtitan", "0.2.2"), ("deepspeed", "0.19.8")):
        up, why = nearest_updates(pf, to, version)
        assert up["loss_chunks"] == 1 and any(w.startswith("loss_chunks 4 -> 1: ") for w in why), to
    # torchtitan 0.3.0 chunks the LM head and loss itself (ChunkedLossWrapper, components/loss.py)
    assert "loss_chunks" not in nearest_updates(pf, "torchtitan", "0.3.0")[0]
    per_op = pf.model_copy(update={"plan": pf.plan.model_copy(update={"recompute": "per-op", "recompute_saved": None})})
    assert "ChunkedLossWrapper.Config(\n            num_chunks=4," in export(per_op, "torchtitan", "0.3.0")
    # MaxText tiles per_device_batch_size x max_target_length tokens (here 1 x 8192), which 3 does not divide: the
    # nearest count it runs is 2
    odd = pf.model_copy(update={"plan": pf.plan.model_copy(update={"loss_chunks": 3})})
    up, why = nearest_updates(odd, "maxtext", "0.2.5")
    assert up["loss_chunks"] == 2 and "validate_vocab_tiling" in why[0]


def test_the_executor_refuses_it(monkeypatch):
    from perfmodel.execute import run_plans

    monkeypatch.setattr(run_plans, "check_device", lambda *a: None)
    pf = maxtext_plan_file("h100-fsdp-tp2")
    pf = pf.model_copy(update={"plan": pf.plan.model_copy(update={"loss_chunks": 2})})
    with pytest.raises(InputError, match="loss_chunks = 2: the torch executor computes the loss in one piece"):
        run_plans.check_runnable(pf, "plan.json", 16, 1, "cuda")


@pytest.mark.parametrize("name, hidden, vocab", [("llama-3-8b", 4096, 128256), ("gemma-3-27b", 5376, 262208)])
@pytest.mark.parametrize("chunks", [1, 4])
def test_maxtext_prices_fp32_logits_at_large_vocabularies(tpu_v5p, name, hidden, vocab, chunks):
    """MaxText computes the LM head in bf16 and casts the logits to fp32 (base.yml at e591f30:
    logits_dot_in_fp32: false, cast_logits_to_fp32: true; layers/decoders.py `logits.astype(jnp.float32)`), so the
    last stage holds tokens x vocab x 4 B of logits: kept for the backward untiled, one chunk's (/ chunks) at a time
    under num_vocab_tiling (utils/vocabulary_tiling.py rebuilds each chunk's logits in the backward). Besides them:
    the final norm's and LM head's bf16 inputs (2 B x hidden each), the final norm's alone when tiled."""
    from perfmodel import load_model

    model, tokens = load_model(name), 8192
    plan = resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=tokens, stack="maxtext", loss_chunks=chunks),
                   model, tpu_v5p)
    lay_ = Layouts.from_plan(plan)
    held = float(head_activation_bytes(model, lay_)[0] + loss_temporary_bytes(model, lay_)[0])
    inputs = tokens * 2 * hidden * (2 if chunks == 1 else 1)
    assert held == inputs + tokens * vocab * 4 / chunks
