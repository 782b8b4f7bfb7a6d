"""The stack profiles' `host:` blocks (hardware_specs/stacks/*.yaml) from the calls each stack's code makes: the
counts `python -m benchmarks.tools.host_counts` took from the stacks' own code on CPU
(benchmarks/results/host/call_counts.json), and, for what a CPU run cannot show, the code read (file@commit in each
block's `counted`).

    python -m benchmarks.tools.stack_host_profiles [--write]

No seconds: the system's host prices each call (spec.host.cpu, cost.host.launch_queue). --write rewrites the blocks;
tests/test_stacks.py checks that the YAML holds what this script derives.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import yaml

from benchmarks import RESULTS, ROOT
COUNTS = RESULTS / "host" / "call_counts.json"
STACKS = ROOT / "hardware_specs" / "stacks"
OPS = ("embedding", "embedding_output", "norm1", "qkv", "attention", "out_proj", "residual1", "norm2", "mlp_in",
       "activation", "mlp_out", "moe", "residual2", "final_norm", "lm_head", "loss")
HOW = "python -m benchmarks.tools.host_counts (benchmarks/results/host/call_counts.json)"


def priced(c: dict) -> dict:
    """The priced kinds of a count dict (not the diagnostics), rounded."""
    return {k: round(float(v), 3) for k, v in c.items()
            if not k.startswith("diag") and k != "note" and not isinstance(v, (str, dict)) and float(v)}


def add(*cs: dict, w: float = 1.0) -> dict:
    out: dict = {}
    for c in cs:
        for k, v in priced(c).items():
            out[k] = round(out.get(k, 0.0) + w * v, 3)
    return out


def scale(c: dict, w: float) -> dict:
    return {k: round(v * w, 3) for k, v in priced(c).items()}


def passes(d: dict) -> dict:
    return {"forward": priced(d.get("forward", {})), "backward": priced(d.get("backward", {}))}


def ops_of(counts: dict) -> dict:
    """Every operator's calls (an operator the code lacks: none), less its collective calls: the estimate's
    collectives carry their own calls where their group has more than one rank (cost.comm.sharded: the cross-entropy's
    statistics, the norms', the experts' all-to-alls), which a one-process count cannot see."""
    def own(p: dict) -> dict:
        return {d: {k: n for k, n in p.get(d, {}).items() if k != "nccl_call"} for d in ("forward", "backward")}
    return {op: own(passes(counts[op])) if op in counts else {"forward": {}, "backward": {}} for op in OPS}


def differing(base: dict, other: dict) -> dict:
    """The operators whose calls `other` counts differently from `base` (a Llama-style layer's)."""
    return {op: v for op, v in other.items() if v != base.get(op)}


# MoE layers: no stack's MoE path was counted on CPU here (MoE is priced as the 2026 stacks run it); a
# Megatron-Core MoE layer's calls read from megatron/core/transformer/moe (0.16.1): router (a linear, top-k, softmax,
# aux loss: ~8 eager ops), token permutation (~10), the grouped GEMM (one fused module each way), unpermutation (~6),
# two all-to-alls over ep where ep > 1 (their calls: the estimate's ep collectives, cost.comm.sharded), ~30 backward nodes.
# The other stacks' MoE layers carry these counts as a stand-in (their sources say so)
MOE = {"forward": {"eager_op": 24.0, "view_op": 12.0, "fused_module": 2.0},
       "backward": {"autograd_node": 30.0}}
MOE_SRC = ("read: megatron-core 0.16.1 megatron/core/transformer/moe/{router,token_dispatcher,experts,moe_layer}.py: "
           "router ~8 eager ops, permute ~10, unpermute ~6, a grouped GEMM (TEGroupedLinear) each for fc1 and fc2, "
           "two all-to-alls where ep > 1; ~30 backward nodes")


def fsdp2_call(c: dict) -> dict:
    """FSDP2's calls per ZeRO-3 collective (a block's all-gather before its forward, again before its backward, and
    its reduce-scatter after): the block's hooks per step over its three collectives."""
    b = c["torchtitan"]["_fsdp2"]["block"]
    total = add(b["pre_forward"], b["post_forward"], b["pre_backward"], b["post_backward"])
    return scale(total, 1 / 3)


def optimizer(c: dict, kind: str, groups: int = 1, clip: bool = True) -> tuple[dict, dict]:
    """(per tensor, per step) calls of torch.optim.AdamW(`kind`) with `groups` parameter groups, clip_grad_norm_
    (foreach) where `clip`, zero_grad(set_to_none=True): a fused or foreach call's tensor is one list_tensor each."""
    o = c["nanogpt"]["_optimizer"]
    tensor = add(o[kind]["per_tensor"], {"list_tensor": 1.0} if kind != "adamw_forloop" else {},
                 {"list_tensor": 1.0} if clip else {})
    step = add(scale(o[kind]["per_step"], groups), o["clip_grad_norm_foreach"]["per_step"] if clip else {},
               o["zero_grad_set_to_none"]["per_step"])
    return tensor, step


# A Transformer Engine module's backward is a Python autograd.Function (transformer_engine/pytorch/module/linear.py
# _Linear.backward: its quantizers, the data- and weight-gradient GEMM calls) of its forward's weight: a fused
# module call in the backward for each in the forward
def te_backward(counts: dict) -> dict:
    out = dict(counts)
    for op in OPS:
        if op in counts and counts[op].get("forward", {}).get("fused_module"):
            f = counts[op]["forward"]["fused_module"]
            out[op] = {**counts[op], "backward": add(counts[op].get("backward", {}), {"fused_module": f})}
    return out


# Under fp8 / fp4 a Transformer Engine module quantizes its input (and, in the backward, its output gradient) and
# updates its amax history: calls beside its own; Transformer Engine issue #761 measured the fp8 forward's host at
# 1.8x the bf16 one's (140 against 77 ms with the GPU idle): 3 eager ops per module call (a module ~ 5 eager ops)
TE_NARROW = {"eager_op": 3.0}
TE_NARROW_SRC = ("3 eager ops per fused module call under fp8/fp4 (its quantizers and amax update): Transformer Engine "
                 "issue #761 measured the fp8 forward's host at 1.8x the bf16 one's (140 against 77 ms, GPU idle), a "
                 "fused module being ~5 eager ops")
# Megatron-Core's all-to-all token dispatcher copies the per-expert token counts to the host and synchronises in
# every MoE layer's forward (megatron/core/transformer/moe/token_dispatcher.py@0.16.1: MoEAlltoAllTokenDispatcher
# _maybe_dtoh_and_synchronize at its cuda_sync_point); after it the host reads the splits (.tolist()) and calls the
# all-to-all, the next kernel
MOE_SYNC = {"view_op": 2.0, "nccl_call": 1.0}
# The flex dispatcher synchronises too: DeepEP's normal dispatch returns the received tokens per expert as a host
# list ("the CPU will wait for GPU's signal to arrive, so this is not compatible with CUDA graph":
# megatron/core/transformer/moe/fused_a2a.py@core_v0.16.0 FusedDispatch.forward), and HybridEP reads the permuted
# token count from a GPU tensor ("which causes a D2H synchronization") unless the dispatcher is handed it, as the
# full-iteration graphs' capacity factor does (hybrid_ep_dispatch, same file); priced with the all-to-all's calls
MOE_SYNC_DISPATCHERS = ["alltoall", "flex"]
MOE_SYNC_SRC = ("read: megatron-core 0.16.1 moe/token_dispatcher.py MoEAlltoAllTokenDispatcher "
                "_maybe_dtoh_and_synchronize (the per-expert counts to the host, a sync; then .tolist() and the "
                "all-to-all call: 2 view ops, 1 NCCL call) and core_v0.16.0 moe/fused_a2a.py (DeepEP's normal dispatch: "
                "'the CPU will wait for GPU's signal'; HybridEP without num_permuted_tokens: 'a D2H synchronization')")
# torchtitan trains DTensor parameters (FSDP2, tensor parallelism): AdamW's foreach path runs 8 foreach ops over
# the parameter lists (torch/optim/adamw.py _multi_tensor_adamw: mul_ by 1 - lr wd, lerp_, mul_, addcmul_, sqrt,
# div_, add_, addcdiv_; the step counters are CPU tensors) and clip_grad_norm_ 2 (_foreach_norm, _foreach_mul_),
# each dispatched by DTensor tensor by tensor: 10 DTensor ops per parameter tensor
DTENSOR_FOREACH = 10.0
DTENSOR_SRC = ("10 DTensor ops per parameter tensor: torch/optim/adamw.py _multi_tensor_adamw's 8 foreach ops (mul_, "
               "lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_) and clip_grad_norm_'s 2 (_foreach_norm, "
               "_foreach_mul_), each dispatched by DTensor tensor by tensor")
# FSDP1's hooks (Composer's FullyShardedDataParallel: FULL_SHARD, limit_all_gathers, use_orig_params) over FSDP2's,
# per collective, on one lent H100 (benchmarks/results/host/h100-fifth-host_launch-variants.json: each twin's
# forward + backward issue less nanoGPT's twin's, over 39 collectives)
FSDP1_OVER_FSDP2 = ((21.66 + 35.16) - (7.10 + 10.22)) / ((16.99 + 28.70) - (7.10 + 10.22))
# A train loop's own calls per step: the loss's .item() (one eager op and a sync) and the backward() call
LOOP = {"eager_op": 2.0}
LOOP_SRC = ("a train loop's own calls per step, the loss's .item() and the backward() call (2 eager ops), beside the "
            "optimizer's per-step calls as counted")
# Megatron-Core's pipeline schedule per chunk step after its synchronisation (batch_p2p_sync): the receive buffers
# (torch.empty: no kernel), batch_isend_irecv's two calls, deallocate_output_tensor, set_input_tensor
MEGATRON_PP = {"nccl_call": 2.0, "view_op": 4.0, "eager_op": 1.0}
MEGATRON_PP_SRC = ("read: megatron-core 0.16.1 pipeline_parallel/p2p_communication.py _communicate (torch.empty receive "
                   "buffers, P2POps through batch_isend_irecv, torch.cuda.synchronize() where batch_p2p_sync, True by "
                   "default: model_parallel_config.py) and schedules.py (deallocate_output_tensor, set_input_tensor)")


def profiles(c: dict) -> dict[str, dict]:
    """name -> (host block, its sources) for every stack."""
    out = {}
    z3 = {"zero3_hook": 1.0}  # FSDP2's hooks per collective, measured in a step (spec.host.cpu.HostCalls)

    def block(stack, counts, dispatch="eager", llama=None, compiled=None, tensor_step=None, sync=False, pp=None,
              zero3=None, collective=None, moe=None, counted="", narrow=None, moe_sync=None):
        ops = ops_of(counts)
        ops["moe"] = moe if moe is not None else MOE
        tensor, step = tensor_step
        h = {"dispatch": dispatch, "ops": ops, "layer": passes(counts.get("_layer", {})),
             "model": passes(counts.get("_model", {})), "llama_style": llama or {},
             "compiled_layer": compiled, "graphs": "none",
             "collective": collective or {"nccl_call": 1.0}, "zero3_call": zero3 or z3,
             "optimizer_tensor": tensor, "optimizer_step": add(step, LOOP),
             "narrow_fused_module": narrow or {}, "pipeline_step": pp or {},
             "moe_sync_dispatchers": MOE_SYNC_DISPATCHERS if moe_sync else [], "moe_sync": moe_sync or {},
             "sync_before_optimizer": sync,
             "counted": counted}
        out[stack] = h

    pt = c["plain-torch"]
    block("plain-torch", pt, llama=differing(ops_of(pt), ops_of(pt["_variants"]["llama"])),
          tensor_step=optimizer(c, "adamw_fused", clip=False),
          counted=f"counted: perfmodel's executor (execute/transformer.py, train.py) on CPU, GPT-2 (learned positions, "
                  f"GELU, biases) and Llama (RoPE, SwiGLU, RMSNorm) one-process plans ({HOW}); its Trainer.step: fused "
                  "AdamW, no clipping, zero_grad, the loss's float() each step")
    ng = c["nanogpt"]
    cl = ng["_compiled"]["summary"]
    block("nanogpt", ng, compiled={"forward": priced(cl["per_layer"]["forward"]),
                                   "backward": priced(cl["per_layer"]["backward"])},
          tensor_step=optimizer(c, "adamw_fused", groups=2),
          counted=f"counted: nanoGPT's model.py (benchmarks/probes/host_launch.py's GPT) eager and torch.compile'd ({HOW}: "
                  "one region each way per step, 9 forward and 14 backward Inductor kernels per layer on CPU, a lower "
                  "bound for a GPU build); train.py's fused AdamW in two weight-decay groups, clip_grad_norm_, "
                  "loss.item() each step")
    hf = c["hf-transformers"]
    block("hf-transformers", hf, llama=differing(ops_of(hf), ops_of(hf["_variants"]["llama"])),
          compiled={"forward": priced(cl["per_layer"]["forward"]), "backward": priced(cl["per_layer"]["backward"])},
          tensor_step=optimizer(c, "adamw_foreach"),
          counted=f"counted: transformers {hf.get('_version', '')} GPT2LMHeadModel and LlamaForCausalLM, SDPA, "
                  f"bf16 autocast ({HOW}); Trainer's torch AdamW (foreach), clip_grad_norm_; compiled as nanoGPT's "
                  "(not counted for HF)")
    tt = c["torchtitan"]
    tensor, step = optimizer(c, "adamw_foreach")
    block("torchtitan", tt, tensor_step=(add(tensor, {"dtensor_op": DTENSOR_FOREACH}), step), compiled={"forward": {"compiled_entry": 1.0, **priced(cl["per_layer"]["forward"])},
                                      "backward": {"compiled_entry": 1.0, **priced(cl["per_layer"]["backward"])}},
          counted=f"counted: torchtitan {tt.get('_version', '')} Llama 3 model ({HOW}: flex attention, the block mask "
                  "rebuilt each step: the model's calls); torch.compile per block: one region each way per layer "
                  "with nanoGPT's kernels per layer; AdamW foreach, clip_grad_norm_")
    mc = te_backward(c["megatron-core"])
    mc["_variants"] = {"te_llama": te_backward(c["megatron-core"]["_variants"]["te_llama"])}
    mega = dict(tensor_step=optimizer(c, "adamw_fused"), sync=True, pp=MEGATRON_PP, narrow=TE_NARROW, moe_sync=MOE_SYNC,
                llama=differing(ops_of(mc), ops_of(mc["_variants"]["te_llama"])))
    mc_src = (f"counted: megatron-core 0.16.1 GPTModel, the Transformer Engine spec emulated around Megatron's own "
              f"code (one fused_module and one autograd node per TE module), GPT-2 and Llama ({HOW}); the "
              "distributed optimizer's fused Adam (TE FusedAdam: multi-tensor) and clip_grad_norm's total_norm.item() "
              "before the update (optimizer/clip_grads.py: a sync); " + MEGATRON_PP_SRC)
    block("megatron-core", mc, **mega, counted=mc_src)
    block("nemo", mc, **mega, counted="as megatron-core: NeMo 2 trains Megatron-Core's GPTModel with the Transformer "
                                      "Engine spec and its distributed optimizer; " + mc_src)
    ds = c["deepspeed"]
    per_param = ds["_step"]["per_parameter_per_micro_batch"]
    block("deepspeed", ds, tensor_step=optimizer(c, "adamw_fused"), sync=True, pp=MEGATRON_PP,
          counted=f"{ds['_source'] if isinstance(ds['_source'], str) else json.dumps(ds['_source'])}; the ZeRO-1/2 "
                  f"gradient hook per parameter and micro-batch ({priced(per_param)}) is not priced per tensor here "
                  "(its collective calls are); fp16 loss scaling's overflow check and the gradient norm synchronise "
                  "before the update")
    nt = c["nanotron"]
    block("nanotron", nt, tensor_step=optimizer(c, "adamw_fused"), counted=str(nt["_source"]))
    co = c["composer-fsdp1"]
    block("composer-fsdp1", co, tensor_step=optimizer(c, "adamw_forloop"), counted=str(co["_source"]),
          zero3={"zero3_hook": round(FSDP1_OVER_FSDP2, 3)})
    lc = c["llmc"]
    native = lc["_optimizer"]["per_step"]
    block("llmc", lc, dispatch="native", tensor_step=({}, priced(native)), moe={"forward": {}, "backward": {}},
          collective={"kernel_launch": 1.0}, zero3={"kernel_launch": 1.0}, counted=str(lc["_source"]))
    out["llmc"]["optimizer_step"] = priced(native)  # no Python loop: its own syncs are in the native count
    return out


SOURCES = {
    "host": "the calls the stack's code makes, by kind: `counted` says how each stack's were counted "
            "(benchmarks/tools/stack_host_profiles.py writes this block)",
}


def write(name: str, host: dict, zero3_src: str) -> None:
    """Replace the `host:` block of hardware_specs/stacks/NAME.yaml (and its host source lines)."""
    p = STACKS / f"{name}.yaml"
    text = p.read_text()
    block = yaml.safe_dump({"host": host}, sort_keys=False, width=120, default_flow_style=None).rstrip("\n")
    # the block runs from 'host:' to the next top-level key
    text = re.sub(r"(?ms)^host:.*?(?=^\S)", block + "\n", text, count=1)
    moe = MOE_SRC if name in ("megatron-core", "nemo") else (
        "stand-in: no MoE path of this stack was counted or read; Megatron-Core's MoE layer's calls, " + MOE_SRC)
    src = {"host": SOURCES["host"], "host.ops.moe": moe if host["ops"]["moe"]["forward"] else "no MoE layer calls: "
           "the stack's code has no MoE layer", "host.zero3_call": zero3_src}
    for key, why, on in (("narrow_fused_module", TE_NARROW_SRC, host.get("narrow_fused_module")),
                         ("moe_sync", MOE_SYNC_SRC, host.get("moe_sync")),
                         ("optimizer_tensor", DTENSOR_SRC, "dtensor_op" in host["optimizer_tensor"]),
                         ("optimizer_step", LOOP_SRC, host["dispatch"] != "native")):
        if on:
            src[f"host.{key}"] = why
    text = re.sub(r"(?m)^  host(\.[a-z_.0-9]+)?: .*\n(    .*\n)*", "", text)
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in src.items())
    text = text.replace("\nsources:\n", "\nsources:\n" + lines, 1)
    p.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the stack profiles' host blocks")
    a = ap.parse_args(argv)
    c = json.loads(COUNTS.read_text())
    table = profiles(c)
    for name, h in table.items():
        layer_f = add(*(h["ops"][op]["forward"] for op in OPS[2:11] + ("residual2",)), h["layer"]["forward"])
        layer_b = add(*(h["ops"][op]["backward"] for op in OPS[2:11] + ("residual2",)), h["layer"]["backward"])
        print(f"{name:16s} a dense layer: forward {layer_f}; backward {layer_b}")
    if a.write:
        z3 = ("one FSDP2 hook per ZeRO-3 collective (the host's zero3_hook: measured in a step, its torch calls "
              f"and its Python bookkeeping together); Composer's FSDP1 at {FSDP1_OVER_FSDP2:.2f}x it (each twin's "
              "forward + backward issue less nanoGPT's, over 39 collectives: (21.66 + 35.16 - 7.10 - 10.22) / "
              "(16.99 + 28.70 - 7.10 - 10.22) ms, both on one lent H100: "
              "benchmarks/results/host/h100-fifth-host_launch-variants.json); stacks whose ZeRO-3 was not measured "
              "(DeepSpeed's stage 3, Megatron-FSDP) at FSDP2's")
        native = "llm.c's own CUDA: one kernel launch per ZeRO-3 (ZeRO-1 in its code) collective, no Python hook"
        for name, h in table.items():
            write(name, h, native if h["dispatch"] == "native" else z3)
        print(f"wrote the host blocks of {len(table)} profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
