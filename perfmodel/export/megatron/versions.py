"""Which Megatron-LM versions perfmodel writes for, what each can express, and the nearest plan it can.

Versions are Megatron-LM release branches; each is checked against the megatron-core release of the branch
(perfmodel.export.checks.megatron_check). What differs between them, from megatron-core's own code:
- `--pipeline-model-parallel-layout` (any split of layers over pipeline stages and virtual chunks):
  TransformerConfig.pipeline_model_parallel_layout and megatron/core/transformer/pipeline_parallel_layer_layout.py
  are in megatron-core 0.14.0 and 0.16.1, not in 0.12.3;
- ZeRO-2/3: DistributedDataParallelConfig.use_megatron_fsdp with data_parallel_sharding_strategy in 0.14.0+
  (Megatron-FSDP); 0.12.3 has the same strategies under use_custom_fsdp;
- FP4 GEMMs: TransformerConfig.fp4 ('--fp4-format e2m1') in 0.16.1, not in 0.12.3;
- recompute_modules: 'shared_experts' from 0.14.0 (0.12.3 and 0.13.1 refuse it).
"""

from __future__ import annotations

from ...spec.plan.layout import chunk_layers
from ..plan_facts import grouped_dispatch, plan_change
from ...spec.plan.file import PlanFile
from ...spec.plan.recompute import DEFAULT_RECOMPUTE_MODULES

# version -> the PyPI release whose checks its exports pass, newest first
VERSIONS = {"core_r0.16": "megatron-core==0.16.1", "core_r0.12": "megatron-core==0.12.3"}
LAYOUT = {"core_r0.16": True, "core_r0.12": False}
FSDP_FLAG = {"core_r0.16": "--use-megatron-fsdp", "core_r0.12": "--use-custom-fsdp"}
FP4 = {"core_r0.16": True, "core_r0.12": False}
SHARED_EXPERTS_RECOMPUTE = {"core_r0.16": True, "core_r0.12": False}


def first_last_args(stage_layers: list[int]) -> list[str] | None:
    """--decoder-first/last-pipeline-num-layers for a split whose middle stages are equal ([] for an even split),
    None when the middle stages differ (Megatron splits everything but the first and last stage evenly)."""
    sl = stage_layers
    if len(set(sl)) == 1:
        return []
    if len(set(sl[1:])) == 1:
        return [f"--decoder-first-pipeline-num-layers {sl[0]}"]
    if len(set(sl[:-1])) == 1:
        return [f"--decoder-last-pipeline-num-layers {sl[-1]}"]
    if len(sl) > 2 and len(set(sl[1:-1])) == 1:
        return [f"--decoder-first-pipeline-num-layers {sl[0]}", f"--decoder-last-pipeline-num-layers {sl[-1]}"]
    return None


def first_last_split(n_layers: int, pp: int) -> tuple[int, int]:
    """(first, last) stage layers leaving the pp - 2 middle stages an equal count k, the most even such split:
    the one whose largest stage is smallest, then whose stages differ least, then whose first stage (which also
    holds the embedding) is smaller."""
    def unevenness(split: tuple[int, int, int]) -> tuple[int, int, int]:
        return max(split), max(split) - min(split), split[0]

    splits = [(first, n_layers - (pp - 2) * k - first, k) for k in range(1, n_layers + 1)
              for first in range(1, n_layers) if n_layers - (pp - 2) * k - first >= 1]
    first, last, _ = min(splits, key=unevenness)
    return first, last


def needs_layout(pf: PlanFile) -> bool:
    """The plan's split needs --pipeline-model-parallel-layout: virtual chunks of unequal size, or stages whose
    middle ones differ (a split --decoder-first/last-pipeline-num-layers cannot write)."""
    p = pf.plan
    if p.pp == 1 or p.account_for_embedding or p.account_for_loss:
        return False
    if p.first_stage_layers is not None or p.last_stage_layers is not None:
        return False
    if p.vpp > 1:
        return len(set(chunk_layers(p, pf.model.n_layers))) > 1
    return first_last_args(pf.stage_layers) is None


def layout_string(pf: PlanFile) -> str:
    """The --pipeline-model-parallel-layout of the plan: one '|'-separated entry per virtual stage in model order
    (chunk c of rank r is entry c*pp + r, as PipelineParallelLayerLayout reads it), 'E' the embedding on the
    first, 't' a decoder layer, 'm' a multi-token-prediction block and 'L' the loss on the last."""
    chunks = chunk_layers(pf.plan, pf.model.n_layers)
    entries = ["t" * n for n in chunks]
    entries[0] = "E" + entries[0]
    entries[-1] += "m" * pf.model.mtp_layers + "L"
    return "|".join(entries)


def selective_modules(pf: PlanFile, version: str) -> list[str]:
    """The --recompute-modules this version runs for the plan's selective policy: the plan's, less those the
    version refuses (shared_experts before core_r0.14; moe_act and layernorm under FP8, which megatron-core
    refuses with its default delayed-scaling recipe)."""
    p = pf.plan
    mods = list(p.recompute_modules or DEFAULT_RECOMPUTE_MODULES)
    if not SHARED_EXPERTS_RECOMPUTE[version]:
        mods = [x for x in mods if x != "shared_experts"]
    if p.precision in ("fp8", "fp4"):
        mods = [x for x in mods if x not in ("moe_act", "layernorm")]
    return mods or list(DEFAULT_RECOMPUTE_MODULES)


def nearest_plan(pf: PlanFile, version: str) -> tuple[dict, list[str]]:
    """Plan-field updates to the nearest plan Megatron-LM `version` runs as written, and why each was made."""
    p, up, why = pf.plan, {}, []
    if p.pp > 1 and p.schedule == "gpipe":
        plan_change(pf, up, why, "schedule", "1f1b", "Megatron-LM has no GPipe schedule (all forwards, then all "
                    "backwards)")
    grouped_dispatch(pf, up, why, "Megatron-LM")
    if p.loss_chunks > 1:
        plan_change(pf, up, why, "loss_chunks", 1, "Megatron-LM computes the LM head and loss in one piece (its "
                    "cross-entropy fusion keeps the whole logits)")
    if p.optimizer_offload:
        plan_change(pf, up, why, "optimizer_offload", False, "Megatron-LM's --optimizer-cpu-offload runs Adam on the "
                    "host's CPUs (HybridDeviceOptimizer), which this model does not price (Plan.optimizer_offload "
                    "copies the state to the device for the update); the state stays on the device")
    if p.dp_replicate > 1:
        plan_change(pf, up, why, "dp_replicate", 1, "this export shards Megatron-LM's distributed optimizer and "
                    "FSDP over the whole data-parallel group, not over replicas of a smaller one")
    if p.compile != "none":
        plan_change(pf, up, why, "compile", "none", "Megatron-LM runs no torch.compile of its layers or loss (its "
                    "fused kernels come from Transformer Engine)")
    if p.recompute == "per-op":
        up |= {"recompute": "selective", "recompute_modules": list(DEFAULT_RECOMPUTE_MODULES)}
        why.append("recompute per-op -> selective [core_attn]: torchtitan's per-op policy has no Megatron-LM "
                   "setting; the attention core is Megatron's nearest selective recompute")
    elif p.recompute == "names":  # JAX's save_only_these_names: nothing saved is full recompute
        new = {"recompute": "full"} if not p.recompute_saved else {
            "recompute": "selective", "recompute_modules": list(DEFAULT_RECOMPUTE_MODULES)}
        up |= {**new, "recompute_saved": None, "recompute_offloaded": None}
        why.append(f"recompute names (saved {p.recompute_saved or []}) -> {new['recompute']}"
                   + (" [core_attn]" if p.recompute_saved else "") + ": Megatron-LM has no per-tensor save policy; "
                   "its nearest keeps " + ("the layer input alone" if not p.recompute_saved else
                                           "every GEMM's input and rebuilds the attention core")
                   + (f", on the device: no named tensors offloaded to the host ({', '.join(p.recompute_offloaded)})"
                      if p.recompute_offloaded else ""))
    elif p.recompute == "selective" and selective_modules(pf, version) != list(p.recompute_modules
                                                                                or DEFAULT_RECOMPUTE_MODULES):
        mods = selective_modules(pf, version)
        up["recompute_modules"] = mods
        why.append(f"recompute_modules {p.recompute_modules} -> {mods}: {version} refuses the others with this "
                   f"precision ({p.precision}) or version (shared_experts: core_r0.14+)")
    for when, field, new, reason in (
            (p.precision == "fp4" and not FP4[version], "precision", "fp8",
             f"{version} has no FP4 GEMM recipe (--fp4-format is core_r0.16+)"),
            (p.precision == "int8", "precision", "bf16", "Megatron-LM trains no int8 GEMMs (int8 training is JAX's "
             "AQT); bf16 is its unquantised recipe"),
            (p.grad_dtype == "bf16", "grad_dtype", "fp32", "Megatron-LM accumulates and all-reduces gradients in "
             "fp32 with --bf16 (validate_args sets accumulate_allreduce_grads_in_fp32)"),
            (p.grad_compression != "none", "grad_compression", "none",
             "Megatron-LM has no compressed gradient reduction"),
            (p.weight_dtype == "bf16", "weight_dtype", "fp32", "Megatron-LM keeps an fp32 master beside the bf16 "
             "weights: --main-params-dtype takes fp32 or fp16 (arguments.py, core_v0.16.1 55ac708 and core_v0.12.3 "
             "3ea68ad)"),
            (p.moment_dtype == "bf16" and version == "core_r0.12", "moment_dtype", "fp32", "core_r0.12's "
             "--exp-avg-dtype / --exp-avg-sq-dtype take fp32, fp16 or fp8 (arguments.py, core_v0.12.3 3ea68ad; bf16 "
             "from core_r0.13)"),
            (p.moment_dtype == "bf16" and p.zero == 0, "moment_dtype", "fp32", "Megatron-LM sets the moments' dtype "
             "only in --use-precision-aware-optimizer, which needs the distributed optimizer (OptimizerConfig "
             "__post_init__, core_v0.16.1), and the plan has zero 0"),
            (p.cp > 1 and p.attention == "unfused", "attention", "flash", "Megatron-LM's context parallelism runs "
             "only in Transformer Engine's fused attention")):
        if when:
            plan_change(pf, up, why, field, new, reason)
    if p.zero >= 2 and p.pp > 1:
        up["zero"] = 1
        why.append(f"zero {p.zero} -> 1 (distributed optimizer): perfmodel exports Megatron-FSDP "
                   f"({FSDP_FLAG[version]}) only without pipeline parallelism, where its sharding is documented")
    if needs_layout(pf) and not LAYOUT[version]:
        if p.vpp > 1 and len(set(chunk_layers(p, pf.model.n_layers))) > 1:
            up["vpp"] = 1
            why.append(f"vpp {p.vpp} -> 1: the chunks {chunk_layers(p, pf.model.n_layers)} differ in size and "
                       f"{version} has no --pipeline-model-parallel-layout (core_r0.14+) to place them")
        else:
            first, last = first_last_split(pf.model.n_layers, p.pp)
            up |= {"stage_layers": None, "first_stage_layers": first, "last_stage_layers": last}
            why.append(f"stage_layers {pf.stage_layers} -> first stage {first}, last {last}, the rest even: "
                       f"{version} sets only the first and last stage (--decoder-first/last-pipeline-num-layers) "
                       "and has no --pipeline-model-parallel-layout")
    if pf.model.moe is not None and p.precision == "fp16" and p.ep > 1:
        plan_change(pf, up, why, "precision", "bf16", f"Megatron-LM refuses expert parallelism (ep={p.ep}) with "
                    "fp16")
    return up, why
