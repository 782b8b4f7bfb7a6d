"""torch.compile and eager element-wise ops in the memory model (cost.memory.footprint: eager_kept_bytes,
compiled_unsaved_bytes, loss_temporary_bytes), each checked against bytes counted by hand from the code the
stack runs, and the refusal of compile where a stack does not compile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel import estimate, load_hardware, load_model
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import eager_kept_bytes, layer_activation_bytes
from perfmodel.errors import InputError
from perfmodel.published.memory_peaks import memory_cases, predicted
from perfmodel.spec.plan.layout import Plan, resolve

ROOT = Path(__file__).parents[1]
DENSE = ROOT / "benchmarks" / "data" / "measured_memory_dev.csv"
MOE = ROOT / "benchmarks" / "data" / "published_moe_runs_dev.csv"
GiB = 2.0 ** 30
H, F, L, V = 4096, 14336, 32, 128256  # Llama 3 8B: hidden, ffn, layers, vocab


def _plan(**kw) -> tuple:
    model, system = load_model("llama-3-8b"), load_hardware("dgx-h100")
    base = dict(gpus=8, tp=1, pp=1, micro_batch=2, global_batch=16, seq_len=8192, zero=3, recompute="per-op",
                stack="torchtitan")
    return model, system, resolve(Plan(**(base | kw)), model, system)


def test_eager_norm_and_glu_bytes_by_hand(tmp_path):
    """torchtitan eager, no recompute: SwiGLU's mul saves silu's output (2 f B per token; tp 2 splits the MLP's
    width). A profile with a Python RMSNorm (norm in eager_unfused) also keeps two fp32 upcasts (4 h B per token
    each, /tp with SP)."""
    model, _, plan = _plan(recompute="none")
    T = 2 * 8192
    assert eager_kept_bytes(model, Layouts.from_plan(plan))[0] == pytest.approx(T * 2 * F)
    _, _, tp2 = _plan(gpus=8, tp=2, sequence_parallel=True, recompute="none")
    assert eager_kept_bytes(model, Layouts.from_plan(tp2))[0] == pytest.approx(T * 2 * F / 2)
    text = (ROOT / "hardware_specs" / "stacks" / "torchtitan.yaml").read_text()
    custom = tmp_path / "titan-python-norm.yaml"
    custom.write_text(text.replace("eager_unfused: [glu]\n", "eager_unfused: [norm, glu]\n", 1))
    _, _, norm = _plan(gpus=8, tp=2, sequence_parallel=True, recompute="none", stack=str(custom))
    assert eager_kept_bytes(model, Layouts.from_plan(norm))[0] == pytest.approx(T * (2 * 4 * H + 2 * F) / 2)
    # compiled: fused, nothing more; megatron-core: fused kernels already
    _, _, comp = _plan(recompute="none", compile="model")
    assert eager_kept_bytes(model, Layouts.from_plan(comp))[0] == 0
    _, _, meg = _plan(recompute="none", stack="megatron-core")
    assert eager_kept_bytes(model, Layouts.from_plan(meg))[0] == 0
    # per-op and full keep none of it in the layers they checkpoint
    with_eager = layer_activation_bytes(model, Layouts.from_plan(plan))[0]
    fused = layer_activation_bytes(model, Layouts.from_plan(meg))[0]
    assert with_eager - fused == pytest.approx(T * 2 * F)
    assert layer_activation_bytes(model, Layouts.from_plan(_plan()[2]))[0] == layer_activation_bytes(
        model, Layouts.from_plan(_plan(stack="megatron-core")[2]))[0]


def test_nanotron_qkv_buffer_and_out_proj_copy_by_hand():
    """nanotron's llama (models/llama.py): with as many kv heads as query heads, q is a view of one permuted
    [3, b, s, H, d] qkv buffer whose k and v slots stay beside the rotated kv copy (2 x 2 h B per token, /tp);
    with micro_batch > 1 the transposed attention output is copied by o_proj's matmul (2 h B per token, /tp);
    plus SwiGLU's silu output (2 f B per token, /tp). Llama 2 7B (MHA): h 4096, f 11008."""
    model, system = load_model("llama-2-7b"), load_hardware("dgx-h100")
    h, f = 4096, 11008
    for mb, tp in ((2, 2), (1, 2), (4, 1)):
        plan = resolve(Plan(gpus=8, tp=tp, pp=1, micro_batch=mb, global_batch=64, seq_len=4096, zero=1,
                            recompute="none", sequence_parallel=tp > 1, stack="nanotron"), model, system)
        T = mb * 4096
        expected = T * (2 * f + 2 * 2 * h + (2 * h if mb > 1 else 0)) / tp
        assert eager_kept_bytes(model, Layouts.from_plan(plan))[0] == pytest.approx(expected)
    # GQA (Llama 3 8B: 8 kv heads of 32) takes the branch that keeps q, k and v apart: no buffer
    gqa, _, plan = _plan(stack="nanotron", recompute="none", zero=1)
    T = 2 * 8192
    assert eager_kept_bytes(gqa, Layouts.from_plan(plan))[0] == pytest.approx(T * (2 * F + 2 * H))

def test_eager_glu_of_a_moe_model_by_hand():
    """Qwen3-30B-A3B (48 MoE layers, 128 experts of width 768, top 8, no shared experts) under torchtitan, eager:
    silu's output per routed copy, 2 x 768 B; a micro-batch of 4096 tokens routes 8 x 4096 copies, ep 8 keeps
    the busiest device's 16 experts' share, 4096 x 8 x 8 / 128 x 16 = 32768 copies."""
    model, system = load_model("qwen3-30b-a3b"), load_hardware("dgx-h100")
    plan = resolve(Plan(gpus=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=8, seq_len=4096, zero=1,
                        stack="torchtitan"), model, system)
    m = model.moe
    assert (m.n_experts, m.top_k, m.expert_ffn_hidden, m.shared_ffn_hidden or 0) == (128, 8, 768, 0)
    copies = 4096 * 8 * 8 / 128 * 16
    assert eager_kept_bytes(model, Layouts.from_plan(plan))[0] == pytest.approx(copies * 2 * 768)


def test_compile_of_the_blocks_by_hand():
    """Per-op under compile (blocks only): the 31 layers waiting for their backward no longer keep w2's output
    (2 h B per token, read by no backward; the layer being rebuilt holds its whole unrecomputed set either way),
    and that layer holds no eager silu output: 31 x 2 x 16384 x 4096 + 16384 x 2 f = 4.63e9 B = 4.31 GiB less
    allocated. torchtitan's own table measured 82.4 -> 77.0 GiB reserved (-5.4) for this job (dev rows M001 ->
    M002)."""
    model, system, eager = _plan()
    _, _, comp = _plan(compile="model")
    T = 2 * 8192
    drop = estimate(model, system, eager).memory_bytes.allocated - estimate(model, system, comp).memory_bytes.allocated
    assert drop == pytest.approx((L - 1) * 2 * T * H + T * 2 * F, rel=1e-9)
    assert drop / GiB == pytest.approx(4.31, abs=0.01)


def test_compiled_loss_by_hand():
    """model+loss: the loss holds 4 B per logit (saved bf16 logits and the bf16 gradient) instead of eager
    F.cross_entropy(logits.float())'s 12: 8 x 16384 x 128256 B = 15.7 GiB less on the last stage."""
    model, system, blocks = _plan(compile="model")
    _, _, both = _plan(compile="model+loss")
    a, b = estimate(model, system, blocks).memory_bytes, estimate(model, system, both).memory_bytes
    assert a.transient - b.transient == pytest.approx(8 * 2 * 8192 * V, rel=1e-9)
    assert a.activations == b.activations


def test_dev_rows_read_compile():
    cases = {c.row_id: c for c in memory_cases(DENSE, MOE)}
    assert cases["M001"].plan.compile == "none" and cases["M002"].plan.compile == "model"
    assert cases["M013"].plan.compile == "model"  # "+ torch.compile + AsyncTP"
    assert cases["M030"].plan.compile == "none" and cases["M030"].plan.stack == "nanotron"
    # the measured effect of compile and the predicted one, both views reserved: same sign, within 1 GiB
    d_meas = cases["M001"].measured_gib - cases["M002"].measured_gib
    d_pred = (predicted(cases["M001"], estimate(cases["M001"].model, cases["M001"].system, cases["M001"].plan))
              ["predicted_gib"] - predicted(cases["M002"], estimate(cases["M002"].model, cases["M002"].system,
                                                                      cases["M002"].plan))["predicted_gib"])
    assert d_meas == pytest.approx(5.4) and 4.0 < d_pred < d_meas + 1.0


def test_compile_refused_where_the_stack_does_not_compile():
    with pytest.raises(InputError, match=r"compile = model with stack = 'megatron-core', which runs no torch.compile"
                                         r"; valid: compile = none, or a stack that compiles: torchtitan, nanogpt, "
                                         r"hf-transformers, maxtext"):
        _plan(compile="model", stack="megatron-core")
    run = subprocess.run([sys.executable, "-m", "perfmodel", "predict", "--model", "llama-3-8b", "--hardware",
                          "dgx-h100", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1",
                          "--global-batch", "8", "--seq-len", "4096", "--compile", "model+loss"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == ["error: compile = model+loss with stack = 'megatron-core', which runs "
                                               "no torch.compile; valid: compile = none, or a stack that compiles: "
                                               "torchtitan, nanogpt, hf-transformers, maxtext"]


def test_search_carries_compile(tmp_path):
    """A search of a compiled torchtitan job ranks plans with the compiled memory, and writes compile into the
    plan file it keeps; predict --plan reads it back to the same memory."""
    from perfmodel.search.ranking import search
    from perfmodel.spec.plan.file import load_plan_file

    out = tmp_path / "best.json"
    run = subprocess.run([sys.executable, "-m", "perfmodel", "search", "--model", "llama-3-8b", "--hardware",
                          "dgx-b200", "--gpus", "4", "--global-batch", "128", "--seq-len", "2048", "--stack",
                          "torchtitan", "--compile", "model+loss", "--only", "recompute=per-op", "--output", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    pf = load_plan_file(out)
    assert pf.plan.compile == "model+loss" and pf.plan.stack == "torchtitan"
    again = estimate(pf.model, pf.hardware, pf.plan).memory_bytes.reserved
    assert pf.prediction.memory_bytes == pytest.approx(again, rel=1e-9)
    eager = estimate(pf.model, pf.hardware, pf.plan.model_copy(update={"compile": "none"})).memory_bytes.reserved
    assert eager > again
    res = search("llama-3-8b", "dgx-b200", 4, 128, 2048, stack="torchtitan", compile="model",
                 space={"recompute": ["per-op"]})
    assert res.plan(0).compile == "model"
