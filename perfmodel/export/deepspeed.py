"""DeepSpeed: a config JSON for one DeepSpeed release, with the plan settings it cannot carry in
"_perfmodel_not_expressed" and the launch it was written for in "_perfmodel_launch".

Versions (VERSIONS): 0.19.8, the newest on PyPI, and 0.16.9, the last 0.16 release: the oldest line with AutoTP
training ("tensor_parallel": {"autotp_size"}, 0.16.4) and the one pinned by many 2025 training stacks. The rules
followed are those of each release's deepspeed/runtime/config.py (DeepSpeedConfig._batch_assertion),
runtime/engine.py (_do_optimizer_sanity_check, _configure_tensor_parallel_states) and runtime/pipe/engine.py
(PipelineEngine.__init__); perfmodel.export.checks.deepspeed_check runs that code on every export.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..spec.plan.layout import state_dtypes
from ..spec.plan.recompute import DEFAULT_RECOMPUTE_MODULES
from ..spec.plan.file import PlanFile
from .plan_facts import (
    grouped_dispatch,
    devices_per_node,
    hardware_notes,
    placement_deviations,
    plan_change,
    prediction,
    shape,
    summary,
)

VERSIONS = {"0.19.8": "deepspeed==0.19.8", "0.16.9": "deepspeed==0.16.9"}
def _autotp(pf: PlanFile, version: str) -> bool:
    """AutoTP training carries tp: no pipeline or context parallelism (it installs deepspeed.utils.groups as the
    mpu, replacing PipelineModule's grid), and ZeRO <= 2 on 0.16.9 (_configure_tensor_parallel_states asserts it;
    0.19.8 supports AutoTP with ZeRO-3)."""
    p = pf.plan
    return p.tp > 1 and p.pp == 1 and p.cp == 1 and (p.zero <= 2 or version != "0.16.9")


def _zero0_accepts(pf: PlanFile, version: str) -> bool:
    """Whether DeepSpeedEngine._do_optimizer_sanity_check takes ZeRO stage 0 with the model dtype (fp16, else bf16)
    and grad_accum_dtype = grad_dtype: 0.19.8 needs them equal; 0.16.9 refuses fp16 with any other accumulation
    dtype and bf16 accumulation outside a pipeline ("enable ZeRO to use Bfloat16 gradient accumulation")."""
    p = pf.plan
    model = "fp16" if p.precision == "fp16" else "bf16"
    if version == "0.16.9" and model == "bf16":
        return p.grad_dtype == "fp32" or p.pp > 1
    return p.grad_dtype == model


def nearest_plan(pf: PlanFile, version: str) -> tuple[dict, list[str]]:
    """Plan-field updates (for pf.plan.model_copy(update=...)) that make the plan expressible by DeepSpeed `version`
    ({} when it is as planned), and one line per change saying what changed and why."""
    p, up, why = pf.plan, {}, []
    ds = f"DeepSpeed {version}"
    grouped_dispatch(pf, up, why, ds)
    if p.loss_chunks > 1:
        plan_change(pf, up, why, "loss_chunks", 1, f"the {ds} config has no chunked LM head and loss (the model "
                    "code computes the loss)")
    if p.optimizer_offload and (p.optimizer_update == "device" or p.zero == 0):
        plan_change(pf, up, why, "optimizer_offload", False, f"{ds}'s offload_optimizer (ZeRO-Offload) runs Adam on "
                    "the host's CPUs (DeepSpeedCPUAdam) at ZeRO stages 1-3, not the device update this plan has "
                    "(optimizer_update device) nor at stage 0; the state stays on the device")
    elif p.optimizer_update == "host_overlapped" and (p.zero != 3 or version == "0.16.9"):
        plan_change(pf, up, why, "optimizer_update", "host", (f"{ds} has no SuperOffload (DeepSpeed >= 0.18.0)"
                    if p.zero == 3 else f"SuperOffload runs at ZeRO stage 3 only, not {p.zero} (super_offload, "
                    "runtime/zero/offload_config.py)") + ": ZeRO-Offload's update after the backward")
    if p.dp_replicate > 1:
        plan_change(pf, up, why, "dp_replicate", 1, f"this export writes {ds}'s ZeRO over the whole data-parallel "
                    "group (its hierarchical partitioning, MiCS and ZeRO++ hpZ, is not written)")
    if p.compile != "none":
        plan_change(pf, up, why, "compile", "none", f"the {ds} config has no torch.compile of the model's blocks "
                    "and loss as the plan has it (its \"compile\" section compiles the engine's whole module)")
    if p.pp > 1 and p.zero >= 2:
        plan_change(pf, up, why, "zero", 1, f"{ds}'s PipelineEngine asserts ZeRO stage < 2 (\"ZeRO-2 and ZeRO-3 "
                    "are incompatible with pipeline parallelism\"); ZeRO-1 is the nearest stage it runs")
    elif p.zero == 0 and not _zero0_accepts(pf, version):
        plan_change(pf, up, why, "zero", 1, f"{ds}'s _do_optimizer_sanity_check refuses ZeRO stage 0 with "
                    f"{'fp16' if p.precision == 'fp16' else 'bf16'} weights and grad_accum_dtype {p.grad_dtype}; "
                    f"ZeRO-1 keeps the {p.grad_dtype} gradient accumulation as planned (the same reduce volume, "
                    "reduce-scatter + all-gather for the all-reduce, and less optimizer memory), where changing "
                    "grad_dtype would change the numerics and the gradient memory")
    if p.pp > 1 and (p.vpp > 1 or p.schedule == "gpipe"):
        field, new = ("vpp", 1) if p.vpp > 1 else ("schedule", "1f1b")
        plan_change(pf, up, why, field, new, f"{ds}'s PipelineEngine runs only its TrainSchedule (1F1B, one model "
                    "chunk per stage)")
    if p.overlap_dp_comm and (p.pp > 1 or up.get("zero", p.zero) == 0):
        plan_change(pf, up, why, "overlap_dp_comm", False, (
            f"{ds}'s PipelineEngine reduces gradients once after the last micro-batch (ReduceGrads)" if p.pp > 1
            else f"{ds}'s ZeRO stage 0 all-reduces gradients after the backward pass (overlap_comm is for ZeRO "
                 "stages 1-3)"))
    if p.precision == "int8":
        plan_change(pf, up, why, "precision", "bf16", f"{ds} trains no int8 GEMMs (int8 training is JAX's AQT); "
                    "bf16 is its unquantised recipe")
    if p.grad_compression == "powersgd":
        plan_change(pf, up, why, "grad_compression", "none", f"{ds} has no PowerSGD (torch DDP's communication hook "
                    f"runs it, perfmodel execute); gradients go uncompressed in {p.grad_dtype}")
    if p.moe_overlap:
        plan_change(pf, up, why, "moe_overlap", False, "DeepSpeed-MoE runs its all-to-alls in line with compute")
    _state_dtypes(pf, version, up, why)
    return up, why


# DeepSpeed's bf16 section: bf16_master_weights_and_grads (no fp32 master; the gradient partitions in bf16 too) and
# bf16_optimizer_states (Adam's moments in bf16, only with it), ZeRO stages 1-3 only (runtime/precision_config.py
# DeepSpeedBF16Config and runtime/config.py _do_error_check, from v0.18.3 6eb98aa; absent in v0.16.9 bdba823)
BF16_STATES = {"0.19.8": True, "0.16.9": False}


def _state_dtypes(pf: PlanFile, version: str, up: dict, why: list[str]) -> None:
    """The plan's weight / moment dtypes as DeepSpeed `version` keeps them (BF16_STATES), or fp32 with the reason."""
    p, ds = pf.plan, f"DeepSpeed {version}"
    weight, moment = state_dtypes(p.stack, p.weight_dtype, p.moment_dtype)
    lacks = (f"{ds}'s bf16 section has no bf16_master_weights_and_grads (v0.18.3+)" if not BF16_STATES[version]
             else "fp16 training keeps an fp32 master (fp16_master_weights_and_grads would be fp16)"
             if up.get("precision", p.precision) == "fp16"
             else f"{ds} keeps bf16 master weights only in ZeRO stages 1-3 (config.py _do_error_check)"
             if up.get("zero", p.zero) == 0 else None)
    if weight == "bf16" and lacks:
        plan_change(pf, up, why, "weight_dtype", "fp32", lacks)
        weight = "fp32"
    if moment == "bf16" and weight == "fp32":
        plan_change(pf, up, why, "moment_dtype", "fp32", lacks or f"{ds}'s bf16_optimizer_states requires "
                    "bf16_master_weights_and_grads, and the plan keeps an fp32 master")
    if weight == "bf16" and up.get("grad_dtype", p.grad_dtype) != "bf16":
        plan_change(pf, up, why, "grad_dtype", "bf16", f"{ds}'s bf16_master_weights_and_grads keeps the gradient "
                    "partitions in bf16 beside the bf16 master")


def _launch(pf: PlanFile, version: str, autotp: bool) -> tuple[dict, int]:
    """The launch the config is written for, and the data-parallel size DeepSpeedConfig's batch check divides by:
    the mpu deepspeed.initialize gets decides it (runtime/config.py: mpu.get_data_parallel_world_size(), else
    dist.get_world_size(), all ranks)."""
    p = pf.plan
    per_node, nodes, _ = devices_per_node(pf)
    args = "train.py --deepspeed --deepspeed_config THIS_FILE.json"
    launch = {"pip": f"pip install {VERSIONS[version]}",
              "command": f"deepspeed --num_nodes {nodes} --num_gpus {per_node} --hostfile HOSTFILE {args}",
              "torchrun": (f"torchrun --nnodes {nodes} --nproc_per_node {per_node} --rdzv_backend c10d "
                           f"--rdzv_endpoint MASTER_HOST:29500 {args}"),
              "env": {}, "world_size": p.gpus, "pipeline_stages": p.pp, "model_parallel_size": 1}
    if p.pp > 1:
        mp = p.tp * p.cp
        launch["model_parallel_size"] = mp
        topo = (f"PipeModelDataParallelTopology(num_pp={p.pp}, num_mp={mp}, num_dp={p.dp})" if mp > 1 else
                f"PipeDataParallelTopology(num_pp={p.pp}, num_dp={p.dp})")
        launch["mpu"] = (f"PipelineModule(layers=..., topology={topo}, ...).mpu(): deepspeed.initialize(model="
                         "<the PipelineModule>, mpu=None) takes it (deepspeed.runtime.pipe.topology)")
        dp = p.dp
    elif (p.tp > 1 and not autotp) or p.cp > 1:
        launch["mpu"] = (f"Megatron-DeepSpeed's mpu (tensor {p.tp}, sequence {p.cp}, data {p.dp}): "
                         "deepspeed.initialize(..., mpu=mpu), whose get_data_parallel_world_size() is "
                         f"{p.dp}")
        launch["data_parallel_size"] = dp = p.dp
    else:
        launch["mpu"] = ("none: deepspeed.initialize(model, optimizer, config=THIS_FILE.json) counts all "
                         f"{p.gpus} ranks as data-parallel" + (f" (AutoTP groups {p.tp} of them per replica)"
                                                                 if autotp else ""))
        dp = p.gpus
    if p.tp > 1 and not autotp:
        launch["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # Megatron's tensor-parallel overlap needs it
    return launch, dp


def _experts(pf: PlanFile) -> list[str]:
    """Notes for a model with experts: DeepSpeed-MoE (deepspeed.moe.layer.MoE, DeepSpeed 0.16.9 and 0.19.8) takes the
    expert-parallel size and the routing in model code; the config JSON has no MoE keys."""
    m, p = pf.model, pf.plan
    e = m.moe
    if e is None:
        return []
    etp = "False" if p.etp == 1 else "True" if p.etp == p.tp else None  # enable_expert_tensor_parallelism
    notes = [(f"ep={p.ep}: the DeepSpeed config has no expert-parallel key; DeepSpeed-MoE takes it in model code, "
              f"one deepspeed.moe.layer.MoE per MoE layer ({m.moe_layers()} of {m.n_layers}): MoE(hidden_size="
              f"{m.hidden}, expert=<the expert MLP, ffn {e.expert_ffn_hidden}>, num_experts={e.n_experts}, "
              f"ep_size={p.ep}, k={e.top_k}, "
              + ("drop_tokens=False" if p.moe_capacity_factor is None else
                 f"capacity_factor={p.moe_capacity_factor:g}, drop_tokens=True")
              + (f", enable_expert_tensor_parallelism={etp}" if etp else "") + "); "
              + ("drop_tokens=False keeps every token (dropless, as the plan prices it)" if p.moe_capacity_factor is None
                 else "its top-k gating dispatches into fixed [experts, capacity] buffers (sharded_moe.py), padded "
                      "to capacity whether or not the plan pads")
              + ", and ZeRO needs the expert parameters in their own "
              "optimizer groups (deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer)")]
    if p.ep > 1 and p.dp % p.ep:
        notes.append(f"ep={p.ep} with dp={p.dp}: DeepSpeed forms the expert-parallel groups inside the data-parallel "
                     f"ranks, so ep must divide dp = {p.dp}; the plan folds the experts over tp x cp x dp = "
                     f"{p.tp * p.cp * p.dp} ranks (Megatron-Core's MoE parallel folding), which DeepSpeed-MoE "
                     "cannot; not expressed")
    if etp is None:
        notes.append(f"etp={p.etp}: DeepSpeed-MoE splits experts over all tp = {p.tp} ranks "
                     "(enable_expert_tensor_parallelism=True) or none; not expressed")
    if e.router_scoring == "sigmoid":
        notes.append("router_scoring=sigmoid: DeepSpeed-MoE's TopKGate scores with softmax; not expressed")
    if e.n_shared_experts:
        notes.append(f"n_shared_experts={e.n_shared_experts}: DeepSpeed-MoE has no shared experts (use_residual=True "
                     "is Residual-MoE, a dense MLP mixed with the experts by a learned coefficient); add the shared "
                     "MLP in model code")
    if e.first_dense_layers or e.layer_freq > 1:
        notes.append(f"first_dense_layers={e.first_dense_layers}, layer_freq={e.layer_freq}: which layers hold a "
                     "MoE layer is decided in model code")
    if p.moe_dispatcher != "alltoall" and p.ep > 1:
        notes.append(f"moe_dispatcher={p.moe_dispatcher}: DeepSpeed-MoE dispatches tokens by all-to-all; not "
                     "expressed")
    if p.expert_imbalance == 1.0:
        notes.append("expert_imbalance=1.0: the plan prices perfectly balanced routing; DeepSpeed-MoE balances by its "
                     "gate's auxiliary loss (returned by MoE.forward for the training loop to add), not exactly")
    if m.mla is not None or m.mtp_layers:
        notes.append("latent attention and multi-token prediction: model code, not the DeepSpeed config")
    return notes


def _batch(cfg: dict, pf: PlanFile, dp: int, autotp: bool, notes: list[str]) -> None:
    """train_batch_size = micro x accumulation x the data-parallel size DeepSpeed divides by (_batch_assertion)."""
    p = pf.plan
    cfg.update(train_batch_size=p.micro_batch * p.num_microbatches * dp,
               train_micro_batch_size_per_gpu=p.micro_batch, gradient_accumulation_steps=p.num_microbatches)
    if autotp:
        notes.append(f"train_batch_size = {cfg['train_batch_size']} = micro {p.micro_batch} x accumulation "
                     f"{p.num_microbatches} x {p.gpus} ranks: with AutoTP and no mpu DeepSpeedConfig counts every "
                     f"rank as data-parallel, so this is tp = {p.tp} times the plan's global_batch = "
                     f"{p.global_batch} distinct samples (the {p.tp} ranks of a tensor-parallel group read the same "
                     "samples, which DeepSpeed checks at the first forward)")


def _precision(cfg: dict, pf: PlanFile, notes: list[str]) -> None:
    p = pf.plan
    if p.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    else:
        cfg["bf16"] = {"enabled": True}
        if p.weight_dtype == "bf16":  # no fp32 master (nearest_plan: 0.19.8, ZeRO 1-3; BF16_STATES)
            cfg["bf16"]["bf16_master_weights_and_grads"] = True
            cfg["bf16"]["bf16_optimizer_states"] = p.moment_dtype == "bf16"
    cfg["communication_data_type"] = "bf16" if p.grad_compression == "bf16" else p.grad_dtype
    cfg["data_types"] = {"grad_accum_dtype": p.grad_dtype}
    if p.precision in ("fp8", "fp4"):
        notes.append(f"precision={p.precision}: the DeepSpeed config has no {p.precision.upper()} GEMM setting "
                     "(FP8 comes from Transformer Engine's fp8_autocast in model code); exported as bf16")


def _recompute(cfg: dict, pf: PlanFile, notes: list[str]) -> None:
    p = pf.plan
    if p.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": p.tp > 1,
                                           "contiguous_memory_optimization": False, "cpu_checkpointing": False,
                                           "synchronize_checkpoint_boundary": False, "profile": False}
        n = p.recompute_num_layers or 1
        if p.recompute_method == "uniform" and n == 1:
            notes.append("recompute=full: the activation_checkpointing section only configures "
                         "deepspeed.checkpointing.checkpoint; the model code must wrap each transformer layer in it")
        else:
            which = (f"groups of {n} consecutive layers, one deepspeed.checkpointing.checkpoint call per group"
                     if p.recompute_method == "uniform" else
                     f"only the first {n} layers of each pipeline stage's chunk, each in its own call")
            notes.append(f"recompute=full with recompute_method={p.recompute_method}, recompute_num_layers={n}: the "
                         "activation_checkpointing section only configures deepspeed.checkpointing.checkpoint; the "
                         f"model code must wrap {which} (Megatron-DeepSpeed: --recompute-method "
                         f"{p.recompute_method} --recompute-num-layers {n})")
    elif p.recompute == "selective":
        mods = list(p.recompute_modules or DEFAULT_RECOMPUTE_MODULES)
        what = ("selective attention recompute is Megatron-DeepSpeed's --recompute-granularity selective" if
                mods == list(DEFAULT_RECOMPUTE_MODULES) else
                f"the module list {', '.join(mods)} is Megatron-Core's --recompute-modules, which Megatron-DeepSpeed "
                "does not have: wrap those submodules in deepspeed.checkpointing.checkpoint in model code")
        notes.append(f"recompute=selective: not expressible in the DeepSpeed config (recompute_modules "
                     f"{', '.join(mods)}; its activation checkpointing recomputes whole wrapped blocks; {what})")
    elif p.recompute == "names":
        notes.append(f"recompute=names (saved {p.recompute_saved or []}"
                     + (f", offloaded {p.recompute_offloaded}" if p.recompute_offloaded else "")
                     + "): not expressible in the DeepSpeed config (its activation checkpointing recomputes whole "
                     "wrapped blocks); it is JAX's save_only_these_names")
    elif p.recompute == "per-op":
        notes.append("recompute=per-op: not expressible in the DeepSpeed config (its activation checkpointing "
                     "recomputes whole wrapped blocks); per-op checkpointing is torch's "
                     "torch.utils.checkpoint.create_selective_checkpoint_contexts policy (as torchtitan's "
                     "selective_ac_option = \"op\": keep SDPA and every second matmul's outputs) applied to each "
                     "block in model code")


def _parallel(cfg: dict, pf: PlanFile, version: str, autotp: bool, notes: list[str]) -> None:
    """Tensor, pipeline and context parallelism: AutoTP's config key, else model code and the launch's mpu."""
    p = pf.plan
    megatron_ds = (f"Megatron-style tensor parallelism needs Megatron-DeepSpeed (--tensor-model-parallel-size "
                   f"{p.tp}{' --sequence-parallel' if p.sequence_parallel else ''})")
    if autotp:
        cfg["tensor_parallel"] = {"autotp_size": p.tp}
        notes.append(f"tp={p.tp} is only partly expressed: \"tensor_parallel\": {{\"autotp_size\": {p.tp}}} "
                     f"(AutoTP training, DeepSpeed >= 0.16.4, Hugging Face models) shards the linear layers but not "
                     "the embedding/LM head by vocabulary" + (" and has no sequence parallelism"
                                                               if p.sequence_parallel else "") + f"; {megatron_ds}")
    elif p.tp > 1:
        why = (f"ZeRO-3 (DeepSpeed {version} asserts AutoTP with ZeRO stage <= 2)" if p.pp == 1 and p.cp == 1 else
               "pipeline parallelism" if p.pp > 1 else "context parallelism")
        notes.append(f"DeepSpeed has no tensor parallelism without Megatron-DeepSpeed: tp={p.tp} not expressed "
                     f"(AutoTP training, \"tensor_parallel\": {{\"autotp_size\"}}, is for Hugging Face models with "
                     f"no pipeline or context parallelism; this plan has {why}); {megatron_ds}")
    mp = [f"tp={p.tp}"] * (p.tp > 1 and not autotp) + [f"pp={p.pp}"] * (p.pp > 1) + [f"cp={p.cp}"] * (p.cp > 1)
    if mp:
        notes.append(f"dp={p.dp} is implied, not set: train_batch_size = micro x accumulation x dp = "
                     f"{p.micro_batch} x {p.num_microbatches} x {p.dp}, which DeepSpeedConfig checks against the "
                     f"data-parallel size of the mpu deepspeed.initialize gets; {', '.join(mp)} come from model code "
                     "and that mpu (\"_perfmodel_launch\".mpu), without which DeepSpeed sees "
                     f"{p.gpus} data-parallel ranks and refuses the batch")
    if p.pp > 1:
        notes.append(f"pp={p.pp}: the DeepSpeed config has no pipeline degree; pipeline parallelism is DeepSpeed's "
                     f"PipelineModule in model code: PipelineModule(layers=..., num_stages={p.pp}, "
                     f"partition_method=...) with layers per stage {pf.stage_layers} (partition_method 'uniform' "
                     "or 'type:...' balances layers; an explicit split needs a custom partition)")
    if p.cp > 1:
        notes.append(f"cp={p.cp}: the DeepSpeed config has no context-parallel degree; DeepSpeed's sequence "
                     "parallelism (DeepSpeed-Ulysses, all-to-all over heads) is set up in model code (Megatron-"
                     "DeepSpeed --ds-sequence-parallel-size) and is not ring context parallelism")
    if p.sequence_parallel and not autotp:
        notes.append("sequence_parallel=True: not expressed (no tensor parallelism in this DeepSpeed config, so no "
                     "sequence parallelism either)")


def deepspeed(pf: PlanFile, version: str | None = None, changes: Sequence[str] = ()) -> str:
    """The DeepSpeed config JSON for `version` (default the newest of VERSIONS), checked by that release's own
    DeepSpeedConfig and deepspeed.initialize (perfmodel.export.checks.deepspeed_check). `changes`: how the plan
    was changed to the nearest one this version expresses ("_perfmodel_changed"; nearest_plan, applied and
    re-predicted by perfmodel.export.nearest)."""
    version = version or next(iter(VERSIONS))
    m, p = pf.model, pf.plan
    autotp = _autotp(pf, version)
    notes = hardware_notes(pf)
    cfg: dict = {"_perfmodel_plan": summary(pf), "_perfmodel_prediction": prediction(pf),
                 "_perfmodel_keys": f"DeepSpeed {version} config JSON ({VERSIONS[version]}; deepspeed.ai/docs/"
                                    "config-json), accepted by its DeepSpeedConfig and deepspeed.initialize"}
    if changes:
        cfg["_perfmodel_changed"] = list(changes)
    launch, dp = _launch(pf, version, autotp)
    _batch(cfg, pf, dp, autotp, notes)
    zero = {"stage": p.zero}
    if p.zero >= 1:
        zero["overlap_comm"] = p.overlap_dp_comm
    if p.zero >= 2:
        zero["contiguous_gradients"] = True
    if p.optimizer_offload:  # a host update (nearest_plan): DeepSpeedCPUAdam over the offloaded share
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if p.optimizer_offload_ratio < 1:
            zero["offload_optimizer"]["ratio"] = p.optimizer_offload_ratio
        if p.optimizer_update == "host_overlapped":
            zero["offload_optimizer"]["super_offload"] = True
    cfg["zero_optimization"] = zero
    _precision(cfg, pf, notes)
    _recompute(cfg, pf, notes)
    _parallel(cfg, pf, version, autotp, notes)
    notes.append(f"model {m.name} ({shape(pf)}) and seq_len={p.seq_len}: defined by the model and data code, "
                 "not by the DeepSpeed config")
    notes += _experts(pf)
    notes.append(f"attention={p.attention}: chosen in model code (e.g. Hugging Face attn_implementation="
                 f"{'flash_attention_2' if p.attention == 'flash' else 'eager'}), not by the DeepSpeed config")
    notes += [f"per-operator placement of {d}: the DeepSpeed config has no per-operator sharding"
              for d in placement_deviations(pf)]
    notes += devices_per_node(pf)[2]
    cfg["_perfmodel_launch"] = launch
    cfg["_perfmodel_not_expressed"] = notes
    return json.dumps(cfg, indent=2) + "\n"
