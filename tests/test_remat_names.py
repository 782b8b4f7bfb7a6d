"""recompute = names: JAX's save_only_these_names, MaxText's remat policies (cost.compute.remat_names). What a layer keeps
and what its backward re-runs, worked out by hand for Llama 2 7B; the exports' mappings; the refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.cost.compute.flops import attention_flops_per_token, recompute_flops_per_token
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import layer_activation_bytes
from perfmodel.cost.compute.operator_table import operators, recomputed_in
from perfmodel.errors import InputError
from perfmodel.export.checks.spread import maxtext_plan_file
from perfmodel.export.maxtext.mesh import remat_keys
from perfmodel.export.targets import export, nearest_updates
from perfmodel.spec.plan.layout import resolve
from perfmodel.spec.plan.recompute import MAXTEXT_OFFLOADED, MAXTEXT_REMAT

H, F, T = 4096, 11008, 4096  # Llama 2 7B: hidden, SwiGLU width (32 heads of 128, no GQA); one sequence of 4096


def layer_bytes(llama2_7b, tpu_v5p, **kw) -> float:
    plan = resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, stack="maxtext", **kw), llama2_7b, tpu_v5p)
    return float(layer_activation_bytes(llama2_7b, Layouts.from_plan(plan))[0])


@pytest.mark.parametrize("saved, per_token", [
    ([], 2 * H),  # the layer input alone (bf16), as full recompute
    (["qkv", "out_proj"], 2 * H + 2 * 3 * H + 2 * H),  # + q, k, v; + out_proj's output (norm2's input, x + it)
    (["qkv", "attention", "out_proj", "mlp_in"],  # + the flash log-sum-exp (fp32 per head) and the context;
     2 * H + 2 * 3 * H + 4 * 32 + 2 * H + 2 * H + 2 * 2 * F),  # + gate and up (the activation's input)
])
def test_a_layer_keeps_its_input_and_the_saved_tensors(llama2_7b, tpu_v5p, saved, per_token):
    assert layer_bytes(llama2_7b, tpu_v5p, recompute="names", recompute_saved=saved) == T * per_token


def test_nothing_saved_keeps_what_full_recompute_keeps(llama2_7b, tpu_v5p):
    names, full = (layer_bytes(llama2_7b, tpu_v5p, recompute=rc) for rc in ("names", "full"))
    assert names == full == T * 2 * H


def test_the_backward_reruns_what_is_not_saved(llama2_7b):
    ops = operators(llama2_7b)
    rebuilt = {n for n in ops if "names" in recomputed_in(ops[n], ("core_attn",), llama2_7b, ("qkv", "out_proj"))}
    # MaxText's save_dot_except_mlp: the norms, residual1 and the activation always (cheap); attention and mlp_in
    # because unsaved; qkv and out_proj saved; mlp_out never (its output feeds only the residual add)
    assert rebuilt == {"norm1", "norm2", "residual1", "attention", "mlp_in", "activation"}
    every = {n for n in ops if "names" in recomputed_in(ops[n], ("core_attn",), llama2_7b, ())}
    assert "mlp_out" not in every and {"qkv", "out_proj", "mlp_in", "attention"} <= every


def test_tensor_parallel_collectives_go_again_where_both_ends_rerun():
    from perfmodel.cost.compute.remat_names import names_edge_reruns

    # save_dot_except_mlp: the gather into mlp_in again (norm2 and mlp_in re-run), not into qkv (saved), not the
    # reduction of out_proj's partial sums (saved), never mlp_out's
    saved = ("qkv", "out_proj")
    assert names_edge_reruns("norm2", "mlp_in", saved) and not names_edge_reruns("norm1", "qkv", saved)
    assert not names_edge_reruns("out_proj", "residual1", saved) and not names_edge_reruns("mlp_out", "residual2", ())
    assert names_edge_reruns("out_proj", "residual1", ()) and names_edge_reruns("norm1", "qkv", ())


def test_names_prices_the_tp_collectives_it_reruns(llama2_7b):
    from perfmodel import estimate

    h100 = load_hardware("dgx-h100")

    def tp_comm(**kw):
        e = estimate(llama2_7b, h100, Plan(gpus=8, tp=8, sequence_parallel=True, micro_batch=1, global_batch=8,
                                       seq_len=T, **kw))
        return e.time_s.tp_comm

    none, full = tp_comm(), tp_comm(recompute="full")
    nothing, minimal = tp_comm(recompute="names"), tp_comm(recompute="names", recompute_saved=["qkv", "out_proj",
                                                                                               "mlp_in"])
    # names[] re-runs 3 of a layer's 4 forward collectives (not mlp_out's reduce-scatter): between none and full
    assert none < nothing < full
    assert minimal == pytest.approx(none)  # every collective's producer or consumer is saved: nothing again


def test_recompute_flops_count_the_unsaved_gemms_and_attention(llama2_7b):
    attention = attention_flops_per_token(llama2_7b, T)
    mlp_in = 2 * llama2_7b.n_layers * H * 2 * F  # 2 FLOPs per weight of the gate and up projections, every layer
    assert recompute_flops_per_token(llama2_7b, T, "names", ("qkv", "out_proj")) == pytest.approx(mlp_in + attention)
    assert recompute_flops_per_token(llama2_7b, T, "names", ("qkv", "attention", "out_proj", "mlp_in")) == 0
    qkv_out = 2 * llama2_7b.n_layers * (3 * H * H + H * H)
    assert recompute_flops_per_token(llama2_7b, T, "names", ()) == pytest.approx(qkv_out + mlp_in + attention)


def test_saving_more_is_faster_and_larger(llama2_7b, tpu_v5p):
    from perfmodel import estimate

    def run(saved):
        e = estimate(llama2_7b, tpu_v5p, Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, stack="maxtext",
                                      recompute="names", recompute_saved=saved))
        return e.step_time_s, e.memory_bytes.activations

    few, more = run(["qkv"]), run(["qkv", "out_proj", "mlp_in"])
    assert more[0] < few[0] and more[1] > few[1]


def test_bad_names_input(llama2_7b, tpu_v5p):
    with pytest.raises(InputError, match=r"recompute_saved = \['qkv'\] with recompute = full: .* valid: recompute = "
                                         "names"):
        resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, recompute="full", recompute_saved=["qkv"]),
                llama2_7b, tpu_v5p)
    moe = load_model("mixtral-8x7b")
    with pytest.raises(InputError, match=r"recompute = names with mixtral-8x7b, a model with experts \(MoE\) with "
                                         "mlp_in saved: .* or recompute_saved without mlp_in"):
        resolve(Plan(gpus=64, micro_batch=1, global_batch=64, seq_len=T, recompute="names",
                     recompute_saved=["mlp_in"]), moe, tpu_v5p)


def test_latent_attention_saves_its_up_projected_queries_keys_values(tpu_v5p):
    """DeepSeek-V3 (hidden 7168, 128 heads, q_lora 1536, kv_lora 512, d_nope 128, d_rope 64, d_v 128): MaxText's
    MLA names query_proj [T, 128, 192], key_proj [T, 128, 192] (the rotary key broadcast to every head) and
    value_proj [T, 128, 128] (layers/attention_mla.py at e591f30); saving them keeps 2 B x 128 x 512 a token besides
    the layer input (2 B x 7168), and the backward still re-runs the down projections wq_a and wkv_a (their
    latents feed the up projections' weight gradients) but neither the up projections nor the rotary part."""
    ds, h = load_model("deepseek-v3"), 7168
    lay = Layouts.from_plan(resolve(Plan(gpus=256, micro_batch=1, global_batch=256, seq_len=T, stack="maxtext",
                                         zero=3, recompute="names", recompute_saved=["qkv"]), ds, tpu_v5p))
    assert float(layer_activation_bytes(ds, lay)[0]) == T * (2 * h + 2 * 128 * (192 + 192 + 128))
    up = 1536 * 128 * 192 + 512 * 128 * (128 + 128)  # wq_b, wkv_b: what saving qkv spares, 2 FLOPs a weight
    spared = recompute_flops_per_token(ds, T, "names", ()) - recompute_flops_per_token(ds, T, "names", ("qkv",))
    assert spared == pytest.approx(2 * 61 * up)
    e = estimate(ds, tpu_v5p, Plan(gpus=256, micro_batch=1, global_batch=256, seq_len=T, stack="maxtext", zero=3,
                                   recompute="names", recompute_saved=["qkv"]))
    ops = {o.name: o for o in e.ops if o.where == "layer"}
    down = h * (1536 + 512 + 64)  # wq_a, wkv_a
    assert ops["qkv"].recompute_s == pytest.approx(ops["qkv"].fwd_s * down / (down + up))
    assert ops["rope"].recompute_s == 0 and ops["attention"].recompute_s == ops["attention"].fwd_s


def test_a_moe_layer_under_names_keeps_its_input_and_reruns_its_experts_whole(tpu_v5p):
    """Mixtral 8x7B (every layer MoE, 8 experts top-2, hidden 4096): names with nothing saved keeps the layer input
    alone and re-runs every MoE op and its dispatch, as full recompute does."""
    moe = load_model("mixtral-8x7b")

    def run(recompute):
        p = Plan(gpus=64, ep=8, micro_batch=1, global_batch=64, seq_len=T, zero=1, recompute=recompute)
        return estimate(moe, tpu_v5p, p)

    names, full = run("names"), run("full")
    lay = Layouts.from_plan(resolve(Plan(gpus=64, ep=8, micro_batch=1, global_batch=64, seq_len=T,
                                         recompute="names"), moe, tpu_v5p))
    assert float(layer_activation_bytes(moe, lay)[0]) == T * 2 * H
    rerun = {o.name: o.recompute_s for o in names.ops if o.where == "layer"}
    assert all(rerun[n] > 0 for n in ("router", "experts_in", "expert_swiglu", "experts_out", "unpermute"))
    ep = lambda e: sorted((c.name, c.calls) for c in e.comms if c.group == "ep")  # noqa: E731
    assert ep(names) == ep(full) and ep(names)  # the dispatch and combine again in the backward
    # every layer is MoE (no dense mlp_out to spare): names [] re-runs the same FLOPs as full recompute
    assert recompute_flops_per_token(moe, T, "names", ()) == pytest.approx(recompute_flops_per_token(moe, T, "full"))


def test_cli_flags():
    cmd = [sys.executable, "-m", "perfmodel", "predict", "--model", "llama-2-7b", "--hardware", "tpu-v5p", "--gpus",
           "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096",
           "--stack", "maxtext", "--recompute", "names"]
    ok = subprocess.run(cmd + ["--recompute-saved", "out_proj,qkv"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "recompute=names[qkv,out_proj]" in ok.stdout
    bad = subprocess.run(cmd + ["--recompute-saved", "qkv,mlp_out"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "'mlp_out' is not a saved tensor; valid: names separated by commas, of qkv, kv, attention, " \
           "out_proj, mlp_in" in bad.stderr


def test_maxtext_writes_the_named_policy_or_custom():
    for policy, saved in MAXTEXT_REMAT.items():
        written = remat_keys(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, recompute="names",
                                  recompute_saved=saved, recompute_offloaded=MAXTEXT_OFFLOADED.get(policy))
                             )["remat_policy"]
        # save_dot_except_mlpwi saves the same tensors as save_dot_except_mlp (mlpwo's output is never needed)
        # (and minimal_flash is minimal_with_context's old name)
        assert written == {"save_dot_except_mlpwi": "save_dot_except_mlp",
                           "minimal_flash": "minimal_with_context"}.get(policy, policy)
    custom = remat_keys(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, recompute="names",
                             recompute_saved=["attention", "mlp_in"]))
    assert custom["remat_policy"] == "custom" and custom["context"] == custom["mlpwi_0"] == "device"
    assert custom["query_proj"] == custom["out_proj"] == "remat"
    text = export(maxtext_plan_file("v6e-names-custom"), "maxtext")
    assert "remat_policy: \"custom\"" in text and "context: \"device\"" in text


def test_the_torch_targets_take_the_nearest_policy():
    pf = maxtext_plan_file("v5p-names-save-dot")
    up, why = nearest_updates(pf, "megatron", "core_r0.16.1")
    assert (up["recompute"], up["recompute_modules"], up["recompute_saved"]) == ("selective", ["core_attn"], None)
    assert any("no per-tensor save policy" in w for w in why)
    up, _ = nearest_updates(pf, "torchtitan", "0.3.0")
    assert (up["recompute"], up["recompute_saved"]) == ("per-op", None)
    none_saved = pf.model_copy(update={"plan": pf.plan.model_copy(update={"recompute_saved": []})})
    assert nearest_updates(none_saved, "megatron", "core_r0.16.1")[0]["recompute"] == "full"
    assert "recompute=names (saved ['qkv', 'out_proj']): not expressible" in export(pf, "deepspeed")


def test_the_executor_refuses_it(monkeypatch):
    from perfmodel.execute import run_plans

    monkeypatch.setattr(run_plans, "check_device", lambda *a: None)  # this machine has no H100: the plan is the point

    pf = maxtext_plan_file("h100-fsdp-tp2")
    pf = pf.model_copy(update={"plan": pf.plan.model_copy(update={"recompute": "names", "recompute_saved": ["qkv"]})})
    with pytest.raises(InputError, match=r"plan.json: recompute = names \(saved \['qkv'\]\): .* the torch executor "
                                         "does not build"):
        run_plans.check_runnable(pf, "plan.json", 16, 1, "cuda")
