"""DeepSpeed: a config JSON, with the plan settings it cannot carry in "_perfmodel_not_expressed"."""

from __future__ import annotations

import json

from ..recompute import DEFAULT_RECOMPUTE_MODULES
from ..planfile import PlanFile
from .common import devices_per_node, hardware_notes, placement_deviations, prediction, shape, summary


def _experts(pf: PlanFile) -> list[str]:
    """Notes for a model with experts: DeepSpeed-MoE (deepspeed.moe.layer.MoE, DeepSpeed 0.16-0.17) takes the
    expert-parallel size and the routing in model code; the config JSON has no MoE keys."""
    m, p = pf.model, pf.plan
    e = m.moe
    if e is None:
        return []
    etp = "False" if p.etp == 1 else "True" if p.etp == p.tp else None  # enable_expert_tensor_parallelism
    notes = [(f"ep={p.ep}: the DeepSpeed config has no expert-parallel key; DeepSpeed-MoE takes it in model code, "
              f"one deepspeed.moe.layer.MoE per MoE layer ({m.moe_layers()} of {m.n_layers}): MoE(hidden_size="
              f"{m.hidden}, expert=<the expert MLP, ffn {e.expert_ffn_hidden}>, num_experts={e.n_experts}, "
              f"ep_size={p.ep}, k={e.top_k}, drop_tokens=False"
              + (f", enable_expert_tensor_parallelism={etp}" if etp else "") + "); drop_tokens=False keeps every "
              "token (dropless, as the plan prices it), and ZeRO needs the expert parameters in their own "
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
    if p.moe_overlap:
        notes.append("moe_overlap=true: DeepSpeed-MoE runs its all-to-alls in line with compute; not expressed")
    if p.expert_imbalance == 1.0:
        notes.append("expert_imbalance=1.0: the plan prices perfectly balanced routing; DeepSpeed-MoE balances by its "
                     "gate's auxiliary loss (returned by MoE.forward for the training loop to add), not exactly")
    if m.mla is not None or m.mtp_layers:
        notes.append("latent attention and multi-token prediction: model code, not the DeepSpeed config")
    return notes


def deepspeed(pf: PlanFile) -> str:
    """DeepSpeed config JSON (keys of DeepSpeed 0.16-0.17, deepspeed.ai/docs/config-json; AutoTP training's
    "tensor_parallel": {"autotp_size"} since 0.16.4), with "_perfmodel_not_expressed" listing the plan settings
    the JSON cannot carry."""
    m, p = pf.model, pf.plan
    notes = hardware_notes(pf)
    cfg: dict = {"_perfmodel_plan": summary(pf), "_perfmodel_prediction": prediction(pf),
                 "_perfmodel_keys": "DeepSpeed 0.16-0.17 config JSON (deepspeed.ai/docs/config-json)",
                 "train_batch_size": p.global_batch, "train_micro_batch_size_per_gpu": p.micro_batch,
                 "gradient_accumulation_steps": p.num_microbatches}
    zero = {"stage": p.zero}
    if p.zero >= 1:
        zero["overlap_comm"] = p.overlap_dp_comm
    if p.zero >= 2:
        zero["contiguous_gradients"] = True
    cfg["zero_optimization"] = zero
    if p.zero == 0 and p.overlap_dp_comm:
        notes.append("overlap_dp_comm=True with zero=0: DeepSpeed's stage 0 all-reduces gradients after the "
                     "backward pass (overlap_comm applies to ZeRO stages 1-3); not overlapped")

    if p.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    else:
        cfg["bf16"] = {"enabled": True}
    cfg["communication_data_type"] = "bf16" if p.grad_compression == "bf16" else p.grad_dtype
    if p.grad_compression == "powersgd":
        notes.append("grad_compression=powersgd: DeepSpeed has no PowerSGD (only torch DDP's communication hook runs "
                     f"it: perfmodel execute); exported uncompressed, gradients in {p.grad_dtype} on the wire")
    cfg["data_types"] = {"grad_accum_dtype": p.grad_dtype}
    if p.precision in ("fp8", "fp4"):
        notes.append(f"precision={p.precision}: the DeepSpeed config has no {p.precision.upper()} GEMM setting "
                     "(FP8 comes from Transformer Engine's fp8_autocast in model code); exported as bf16")

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
    elif p.recompute == "per-op":
        notes.append("recompute=per-op: not expressible in the DeepSpeed config (its activation checkpointing "
                     "recomputes whole wrapped blocks); per-op checkpointing is torch's "
                     "torch.utils.checkpoint.create_selective_checkpoint_contexts policy (as torchtitan's "
                     "selective_ac_option = \"op\": keep SDPA and every second matmul's outputs) applied to each "
                     "block in model code")

    if p.tp > 1:
        megatron_ds = (f"Megatron-style tensor parallelism needs Megatron-DeepSpeed (--tensor-model-parallel-size "
                       f"{p.tp}{' --sequence-parallel' if p.sequence_parallel else ''})")
        if p.zero <= 2 and p.pp == 1 and p.cp == 1:
            cfg["tensor_parallel"] = {"autotp_size": p.tp}
            notes.append(f"tp={p.tp} is only partly expressed: \"tensor_parallel\": {{\"autotp_size\": {p.tp}}} "
                         "(AutoTP training, DeepSpeed >= 0.16.4, Hugging Face models, ZeRO stage <= 2) shards the "
                         "linear layers but not the embedding/LM head by vocabulary"
                         + (" and has no sequence parallelism" if p.sequence_parallel else "") + f"; {megatron_ds}")
        else:
            why = "ZeRO-3" if p.zero == 3 else ("pipeline parallelism" if p.pp > 1 else "context parallelism")
            notes.append(f"DeepSpeed has no tensor parallelism without Megatron-DeepSpeed: tp={p.tp} not expressed "
                         f"(AutoTP training, \"tensor_parallel\": {{\"autotp_size\"}}, is for Hugging Face models "
                         f"with ZeRO stage <= 2 and no pipeline or context parallelism; this plan has {why}); "
                         f"{megatron_ds}")
    mp = []
    if p.tp > 1 and "tensor_parallel" not in cfg:
        mp.append(f"tp={p.tp}")
    if p.pp > 1:
        mp.append(f"pp={p.pp}")
    if p.cp > 1:
        mp.append(f"cp={p.cp}")
    if mp:
        notes.append(f"dp={p.dp} is implied, not set: train_batch_size = micro x accumulation x dp = "
                     f"{p.micro_batch} x {p.num_microbatches} x {p.dp}, and DeepSpeed checks it against its "
                     f"data-parallel world size, which is {p.dp} only when the model code sets up {', '.join(mp)} "
                     f"(otherwise DeepSpeed sees {p.gpus} data-parallel ranks)")

    if p.pp > 1:
        notes.append(f"pp={p.pp}: the DeepSpeed config has no pipeline degree; pipeline parallelism is DeepSpeed's "
                     f"PipelineModule in model code: PipelineModule(layers=..., num_stages={p.pp}, "
                     f"partition_method=...) with layers per stage {pf.stage_layers} (partition_method 'uniform' "
                     "or 'type:...' balances layers; an explicit split needs a custom partition)")
        if p.schedule != "1f1b":
            what = f"vpp={p.vpp} (interleaved)" if p.schedule == "interleaved" else "schedule=gpipe"
            notes.append(f"{what}: DeepSpeed's PipelineEngine runs only its own 1F1B-style TrainSchedule; exported "
                         "as 1F1B with one chunk per stage")
        if p.zero >= 2:
            notes.append(f"zero={p.zero} with pp={p.pp}: DeepSpeed's PipelineEngine refuses ZeRO-2/3 (only stages "
                         "0-1 combine with pipeline parallelism)")
        if p.overlap_dp_comm:
            notes.append("overlap_dp_comm=True with pp > 1: DeepSpeed's PipelineEngine reduces gradients once after "
                         "the last micro-batch (ReduceGrads instruction), so the overlap is not reproduced")
    if p.cp > 1:
        notes.append(f"cp={p.cp}: the DeepSpeed config has no context-parallel degree; DeepSpeed's sequence "
                     "parallelism (DeepSpeed-Ulysses, all-to-all over heads) is set up in model code (Megatron-"
                     "DeepSpeed --ds-sequence-parallel-size) and is not ring context parallelism")
    if p.sequence_parallel and "tensor_parallel" not in cfg:
        notes.append("sequence_parallel=True: not expressed (no tensor parallelism in this DeepSpeed config, so no "
                     "sequence parallelism either)")
    notes.append(f"model {m.name} ({shape(pf)}) and seq_len={p.seq_len}: defined by the model and data code, "
                 "not by the DeepSpeed config")
    notes += _experts(pf)
    notes.append(f"attention={p.attention}: chosen in model code (e.g. Hugging Face attn_implementation="
                 f"{'flash_attention_2' if p.attention == 'flash' else 'eager'}), not by the DeepSpeed config")
    devs = placement_deviations(pf)
    if devs:
        notes += [f"per-operator placement of {d}: the DeepSpeed config has no per-operator sharding" for d in devs]
    per_node, nodes, launch_notes = devices_per_node(pf)
    notes += launch_notes
    cfg["_perfmodel_launch"] = (f"deepspeed --num_nodes {nodes} --num_gpus {per_node} --hostfile HOSTFILE "
                                "train.py --deepspeed --deepspeed_config THIS_FILE.json")
    cfg["_perfmodel_not_expressed"] = notes
    return json.dumps(cfg, indent=2) + "\n"
