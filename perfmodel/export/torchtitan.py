"""torchtitan: a TOML job config for its llama3 model family (deepseek_v3 or qwen3 for a model with experts or
latent attention), then the plan settings it cannot express."""

from __future__ import annotations

import json
import math

from ..recompute import DEFAULT_RECOMPUTE_MODULES
from ..planfile import PlanFile
from .common import (
    devices_per_node,
    hardware_notes,
    not_expressed_comments,
    placement_deviations,
    prediction,
    shape,
    summary,
    virtual_stages,
)


# torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py): dim, n_layers, n_heads, n_kv_heads, ffn.
_LLAMA3_FLAVORS = {"8B": (4096, 32, 32, 8, 14336), "70B": (8192, 80, 64, 8, 28672),
                   "405B": (16384, 126, 128, 8, 53248)}
# torchtitan 0.2.0's mixture-of-experts flavors (torchtitan/models/deepseek_v3/__init__.py, torchtitan/models/
# qwen3/__init__.py; torchtitan/experiments/ before they moved): dim, n_layers, n_heads, n_kv_heads, hidden_dim /
# inter_dim (dense MLP), num_experts, top_k, moe_inter_dim, num_shared_experts, n_dense_layers, score_func, and
# the attention: qwen3's head_dim, deepseek_v3's latent attention (q_lora_rank or 0, kv_lora_rank, qk_nope_head_dim,
# qk_rope_head_dim, v_head_dim; n_kv_heads = n_heads). Their MoE layers are every layer from n_dense_layers on.
_MOE_FLAVORS = {
    "deepseek_v3": {"16B": (2048, 27, 16, 16, 10944, 64, 6, 1408, 2, 1, "softmax", (0, 512, 128, 64, 128)),
                    "236B": (5120, 60, 128, 128, 12288, 160, 6, 1536, 2, 1, "softmax", (1536, 512, 128, 64, 128)),
                    "671B": (7168, 61, 128, 128, 18432, 256, 8, 2048, 1, 3, "sigmoid", (1536, 512, 128, 64, 128))},
    "qwen3": {"30B-A3B": (2048, 48, 32, 4, 6144, 128, 8, 768, 0, 0, "softmax", 128),
              "235B-A22B": (4096, 94, 64, 4, 12288, 128, 8, 1536, 0, 0, "softmax", 128)},
}
_PARALLELIZE = {"llama3": "parallelize_llama", "deepseek_v3": "parallelize_deepseekv3", "qwen3": "parallelize_qwen3"}
_FLEX_ATTENTION = {("deepseek_v3", "16B"), ("deepseek_v3", "236B"), ("deepseek_v3", "671B")}  # use_flex_attn=True


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        if v and all(isinstance(x, list) for x in v):
            return "[\n" + "".join(f"    {_toml_value(x)},\n" for x in v) + "]"
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def _moe_shape(pf: PlanFile) -> tuple:
    """The model in _MOE_FLAVORS' terms."""
    m = pf.model
    e, a = m.moe, m.mla
    attention = m.head_dim if a is None else (a.q_lora_rank or 0, a.kv_lora_rank, a.qk_nope_head_dim,
                                              a.qk_rope_head_dim, a.v_head_dim)
    return (m.hidden, m.n_layers, m.n_heads, m.n_heads if a is not None else m.n_kv_heads, m.ffn_hidden, e.n_experts,
            e.top_k, e.expert_ffn_hidden, e.n_shared_experts, e.first_dense_layers, e.router_scoring, attention)


def _torchtitan_moe_model(pf: PlanFile) -> tuple[str, str, list[str], list[str]]:
    """(model name, flavor, comments, not-expressed notes) for a model with experts or latent attention: torchtitan's
    deepseek_v3 (latent attention) or qwen3 (grouped-query attention) family."""
    m = pf.model
    name = "deepseek_v3" if m.mla is not None else "qwen3"
    flavors = _MOE_FLAVORS[name]
    notes, comments = [], []
    if m.moe is None:  # latent attention without experts: deepseek_v3 with every layer dense
        flavor = min(flavors, key=lambda f: abs(math.log(flavors[f][0] / m.hidden)))
        notes.append(f"model {m.name} has latent attention but no experts: torchtitan's deepseek_v3 has experts from "
                     f"layer n_dense_layers on; exported as deepseek_v3 {flavor}; set n_dense_layers = n_layers = "
                     f"{m.n_layers} in a flavor with this shape ({shape(pf)})")
        return name, flavor, comments, notes
    want = _moe_shape(pf)
    exact = [f for f, s in flavors.items() if s == want]
    keys = ("dim", "n_layers", "n_heads", "n_kv_heads", "dense ffn", "num_experts", "top_k", "moe_inter_dim",
            "num_shared_experts", "n_dense_layers", "score_func",
            "latent attention" if m.mla is not None else "head_dim")
    if exact:
        flavor = exact[0]
        comments.append(f"[model] {name} flavor {flavor} has this plan's shape: {shape(pf)}")
    else:
        flavor = min(flavors, key=lambda f: abs(math.log(flavors[f][0] / m.hidden)))
        have = flavors[flavor]
        diff = ", ".join(f"{k} {h} (plan {w})" for k, h, w in zip(keys, have, want) if h != w)
        comments.append(f"[model] {name} flavor {flavor} is approximate (the nearest {name} flavor; it differs in "
                        f"{diff}); the plan's shape is: {shape(pf)}")
        notes.append(f"model shape of {m.name} ({', '.join(f'{k}={w}' for k, w in zip(keys, want))}): torchtitan has "
                     f"no such {name} flavor; exported as {name} {flavor}; add a flavor with these sizes to "
                     f"torchtitan/models/{name}/__init__.py (its MoEArgs: num_experts, num_shared_experts, top_k, "
                     "score_func)")
    e = m.moe
    if e.layer_freq > 1:
        notes.append(f"layer_freq={e.layer_freq}: torchtitan's {name} makes every layer from n_dense_layers on a MoE "
                     "layer; interleaving dense and MoE layers is torchtitan's llama4 (interleave_moe_layer_step), "
                     f"not {name}; exported with every layer a MoE layer")
    if name == "qwen3" and e.first_dense_layers:
        notes.append(f"first_dense_layers={e.first_dense_layers}: torchtitan's qwen3 has no leading dense layers "
                     "(every layer is a MoE layer when moe_enabled); exported with every layer a MoE layer")
    if e.router_bias or e.expert_bias:
        notes.append(f"router_bias={e.router_bias}, expert_bias={e.expert_bias}: torchtitan's MoE (torchtitan/"
                     "models/moe) has no router or expert biases; exported without them")
    if m.mtp_layers:
        notes.append(f"mtp_layers={m.mtp_layers}: torchtitan's {name} has no multi-token prediction; exported "
                     "without it")
    return name, flavor, comments, notes


def _torchtitan_model(pf: PlanFile) -> tuple[str, str, list[str], list[str]]:
    """(model name, flavor, comments, not-expressed notes): torchtitan's llama3 model family for a dense model,
    deepseek_v3 or qwen3 for one with experts or latent attention."""
    m = pf.model
    if m.moe is not None or m.mla is not None:
        name, flavor, comments, notes = _torchtitan_moe_model(pf)
        notes += _architecture_notes(pf, name)
        return name, flavor, comments, notes
    dims = (m.hidden, m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_hidden)
    exact = [f for f, s in _LLAMA3_FLAVORS.items() if s == dims]
    notes = []
    if exact:
        flavor = exact[0]
        comments = [f"flavor {flavor} has this plan's shape: {shape(pf)}"]
    else:
        flavor = min(_LLAMA3_FLAVORS, key=lambda f: abs(math.log(_LLAMA3_FLAVORS[f][0] / m.hidden)))
        dim, nl, nh, nkv, ffn = _LLAMA3_FLAVORS[flavor]
        comments = [(f"flavor {flavor} is approximate (the nearest llama3 flavor: dim={dim} n_layers={nl} "
                    f"n_heads={nh} n_kv_heads={nkv} ffn={ffn}); the plan's shape is: {shape(pf)}")]
        notes.append(f"model shape of {m.name} (n_layers={m.n_layers} hidden={m.hidden} n_heads={m.n_heads} "
                     f"n_kv_heads={m.n_kv_heads} ffn_hidden={m.ffn_hidden}): torchtitan has no such flavor; "
                     f"exported as llama3 {flavor}; add a flavor with these sizes to torchtitan/models/llama3")
    if m.head_dim * m.n_heads != m.hidden:
        notes.append(f"head_dim = {m.head_dim} != hidden / n_heads: torchtitan's llama3 derives head_dim = "
                     "dim / n_heads")
    notes += _architecture_notes(pf, "llama3")
    if m.vocab != 128256:
        comments.append(f"vocab = {m.vocab}: torchtitan takes vocab_size from the tokenizer; use one with "
                        f"{m.vocab} tokens")
    return "llama3", flavor, comments, notes


def _architecture_notes(pf: PlanFile, name: str) -> list[str]:
    """What torchtitan's model `name` (llama3, deepseek_v3, qwen3: SwiGLU, RMSNorm, RoPE, no biases, no dropout,
    full attention) cannot follow of the model's architecture."""
    m = pf.model
    notes = []
    untied = f"{name}'s MoE flavors untie" if name == "qwen3" else f"{name} unties"
    for bad, what in ((m.mlp != "swiglu", f"mlp={m.mlp} ({name} is SwiGLU)"),
                      (m.norm != "rmsnorm", f"norm={m.norm} ({name} uses RMSNorm)"),
                      (m.position != "rope", f"position={m.position} ({name} uses RoPE)"),
                      (m.tie_embeddings, f"tie_embeddings=True ({untied} embedding and output)"),
                      (m.linear_bias != "none", f"linear_bias={m.linear_bias} ({name} has no biases)"),
                      (m.dropout > 0, f"dropout={m.dropout} (torchtitan's {name} has no dropout)"),
                      (m.sliding_window is not None, f"sliding_window={m.sliding_window} ({name} attends fully)")):
        if bad:
            notes.append(f"{what}: not expressible in torchtitan's {name} model; exported as {name}'s architecture")
    return notes


def torchtitan(pf: PlanFile) -> str:
    """torchtitan TOML job config (keys of torchtitan main, mid-2025: torchtitan/config/job_config.py, as in
    torchtitan/models/llama3/train_configs/*.toml), followed by the plan settings it cannot express."""
    p = pf.plan
    notes = hardware_notes(pf)
    name, flavor, model_comments, model_notes = _torchtitan_model(pf)
    notes += model_notes
    comments = list(model_comments)
    per_node, nodes, launch_notes = devices_per_node(pf)
    notes += launch_notes

    # data parallelism: FSDP2 shards over dp (and cp); plain replication is DDP (zero 0)
    others = [f"{k}={v}" for k, v in (("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("ep", p.ep)) if v > 1]
    if p.zero == 0 and not others:
        replicate, shard = p.dp, 1
    else:
        replicate, shard = 1, p.dp
        if p.zero == 0:
            notes.append(f"zero=0 with {', '.join(others)}: torchtitan replicates (DDP, data_parallel_replicate_"
                         "degree) only on a 1-D data-parallel mesh, and applies FSDP2 whenever context parallelism "
                         "is on" + (", and expert parallelism takes its ranks from data_parallel_shard_degree" if
                                    p.ep > 1 else "") + "; exported as FSDP2 over dp with fsdp_reshard_after_forward "
                         "= \"never\" (ZeRO-2-like: gradients and optimizer state sharded, reduce-scatter instead of "
                         "all-reduce)")
    if p.zero == 3:
        reshard = "always"
    elif p.zero in (1, 2) or shard > 1:
        reshard = "never"
        if p.zero == 1:
            notes.append("zero=1: torchtitan has no ZeRO-1/2 distinction in FSDP2 (fully_shard always shards "
                         "gradients); exported as FSDP2 with reshard_after_forward=False "
                         "(fsdp_reshard_after_forward = \"never\"), which emulates ZeRO-2: gradients are sharded "
                         "too (less memory, reduce-scatter instead of all-reduce)")
        else:
            comments.append("zero=2: FSDP2 with fsdp_reshard_after_forward = \"never\" keeps parameters gathered "
                            "from forward to backward, which emulates ZeRO-2")
    else:
        reshard = "default"

    parallelism = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
                   "fsdp_reshard_after_forward": reshard, "tensor_parallel_degree": p.tp,
                   "enable_async_tensor_parallel": False, "disable_loss_parallel": False,
                   "context_parallel_degree": p.cp, "pipeline_parallel_degree": p.pp}
    if pf.model.moe is not None:
        parallelism["expert_parallel_degree"] = p.ep
        parallelism["expert_tensor_parallel_degree"] = p.etp
        expert_comments, expert_notes = _torchtitan_experts(pf, name, flavor, shard)
        comments += expert_comments
        notes += expert_notes
    if p.tp > 1 and not p.sequence_parallel:
        notes.append(f"sequence_parallel=False with tp={p.tp}: torchtitan always applies sequence parallelism "
                     "(SequenceParallel norms, Shard(1) residual stream) and loss parallelism with tensor "
                     "parallelism; exported with sequence parallelism on")
    if p.pp > 1:
        parallelism["pipeline_parallel_schedule"] = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B",
                                                     "gpipe": "GPipe"}[p.schedule]
        parallelism["pipeline_parallel_microbatch_size"] = p.micro_batch
        parts, start = [], 0
        stages = virtual_stages(pf)
        for i, n in enumerate(stages):
            part = [f"layers.{j}" for j in range(start, start + n)]
            start += n
            if i == 0:
                part.insert(0, "tok_embeddings")
            if i == len(stages) - 1:
                part += ["norm", "output"]
            parts.append(part)
        parallelism["module_fqns_per_model_part"] = parts
        comments.append(f"module_fqns_per_model_part: {len(parts)} model parts (pp={p.pp} x vpp={p.vpp}, part "
                        f"c*pp + r on pipeline rank r), layers per part {stages} from stage_layers "
                        f"{pf.stage_layers}; older torchtitan: pipeline_parallel_split_points = "
                        f"{_toml_value([f'layers.{s}' for s in _cumulative(stages)[1:-1]])}")
    if not p.overlap_dp_comm:
        notes.append("overlap_dp_comm=False: torchtitan's FSDP2 / replicate always overlap data-parallel "
                     "collectives with compute; exported overlapped")

    # batch: with pp, local_batch_size is the per-dp-rank batch split into micro-batches; without pp it is the
    # micro-batch and torchtitan accumulates gradients up to global_batch_size
    local = p.global_batch // p.dp if p.pp > 1 else p.micro_batch
    comments.append(f"local_batch_size {local} x dp {p.dp} x gradient accumulation "
                    f"{p.global_batch // (local * p.dp)} = global_batch_size {p.global_batch}"
                    + (f"; {local // p.micro_batch} pipeline micro-batches of {p.micro_batch}" if p.pp > 1 else "")
                    + " (torchtitan before mid-2025: [training] batch_size = local_batch_size, no global_batch_size)")
    if p.precision == "fp16":
        notes.append("precision=fp16: torchtitan's mixed_precision_param is bfloat16 or float32 (no fp16 loss "
                     "scaling); exported as bfloat16")
    if p.grad_dtype == "bf16":
        notes.append("grad_dtype=bf16: torchtitan's mixed_precision_reduce accepts only float32; exported as "
                     "float32 (twice the gradient bytes on the wire)")
    if p.grad_compression != "none":
        notes.append(f"grad_compression={p.grad_compression}: torchtitan reduces gradients in float32 only "
                     f"(mixed_precision_reduce){' and has no PowerSGD' if p.grad_compression == 'powersgd' else ''}; "
                     "exported uncompressed")
    training = {"local_batch_size": local, "global_batch_size": p.global_batch, "seq_len": p.seq_len,
                "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}

    ac, ac_comments, ac_notes = _torchtitan_ac(pf)
    comments += ac_comments
    notes += ac_notes
    if p.attention == "unfused":
        notes.append("attention=unfused: torchtitan's llama3 calls scaled_dot_product_attention (flash / "
                     "memory-efficient kernels); exported as fused attention")

    model = {"name": name, "flavor": flavor}
    sections = [("job", {"dump_folder": "./outputs", "description": f"perfmodel plan: {summary(pf)}"}),
                ("model", model), ("training", training), ("parallelism", parallelism),
                ("activation_checkpoint", ac)]
    if p.precision in ("fp8", "fp4"):
        model["converters"] = ["float8"]
        sections.append(("float8", {"enable_fsdp_float8_all_gather": False,
                                    "precompute_float8_dynamic_scale_for_fsdp": False}))
        comments.append("fp8: [model] converters = [\"float8\"] with the [float8] section (torchtitan 2025; "
                        "2024 releases: [float8] enable_float8_linear = true); all-gathers stay bf16 as in the plan")
        if p.precision == "fp4":
            notes.append("precision=fp4: torchtitan's converters offer float8 (and MX formats) but no FP4 "
                         "training recipe here; exported as float8, slower than planned")

    devs = placement_deviations(pf)
    if devs:
        notes += [f"per-operator placement of {d} is not torchtitan's {'llama' if name == 'llama3' else name} "
                  "tensor-parallel plan "
                  f"({_PARALLELIZE[name]} applies a fixed plan)" for d in devs]

    lines = [f"# torchtitan job config for: {summary(pf)}",
             f"# {prediction(pf)}",
             "# Keys: torchtitan main, mid-2025 (torchtitan/config/job_config.py)"
             + ("; expert_parallel_degree / expert_tensor_parallel_degree: torchtitan 0.2.0." if
                pf.model.moe is not None else "."),
             (f"# Launch: torchrun --nproc-per-node {per_node} --nnodes {nodes} --node-rank $NODE_RANK "
             "--rdzv-endpoint $MASTER_ADDR:29500 -m torchtitan.train --job.config_file THIS_FILE.toml"),
             ("# Not part of the plan (add your own): [optimizer], [lr_scheduler], [training] steps and dataset, "
             "[model] tokenizer / hf_assets_path, [checkpoint], [compile]."),
             *[f"# {c}" for c in comments]]
    for name, table in sections:
        lines += ["", f"[{name}]", *[f"{k} = {_toml_value(v)}" for k, v in table.items()]]
    lines.append("")
    lines += not_expressed_comments("torchtitan", notes)
    return "\n".join(lines) + "\n"


def _torchtitan_ac(pf: PlanFile) -> tuple[dict, list[str], list[str]]:
    """([activation_checkpoint] table, comments, not-expressed notes) for the recompute policy. torchtitan's modes
    (torchtitan/distributed/activation_checkpoint.py): none; full, every transformer block its own checkpoint;
    selective with selective_ac_option "op", per-op checkpointing (the plan's per-op); selective with an integer
    N, every N-th block (counted over the blocks a rank holds) whole and the others not at all."""
    p = pf.plan
    if p.recompute == "none":
        return {"mode": "none"}, [], []
    if p.recompute == "per-op":
        return {"mode": "selective", "selective_ac_option": "op"}, [
            "selective_ac_option = \"op\": torchtitan's per-op policy, as planned (recompute=per-op): the outputs "
            "of attention (SDPA), the tp reduce-scatters and every second matmul are saved, the rest recomputed"], []
    if p.recompute == "selective":
        mods = list(p.recompute_modules or DEFAULT_RECOMPUTE_MODULES)
        ac = {"mode": "selective", "selective_ac_option": "op"}
        if mods == list(DEFAULT_RECOMPUTE_MODULES):
            return ac, ["selective_ac_option = \"op\": torchtitan's op-level policy saves matmul and attention "
                        "outputs (recomputing every second matmul) and recomputes the rest; perfmodel's selective "
                        "recompute of the attention core (Korthikanti et al. 2022) is approximated by it, the "
                        "nearest torchtitan has (it keeps fewer activations than planned and recomputes more)"], []
        return ac, [], [f"recompute=selective of {', '.join(mods)} (Megatron-Core --recompute-modules): torchtitan "
                        "checkpoints whole blocks or per operator, not chosen submodules; exported as the nearest, "
                        "per-op checkpointing (selective_ac_option = \"op\"), whose memory and recompute time "
                        "differ from the plan's"]
    n = p.recompute_num_layers or 1
    if p.recompute_method == "uniform":
        if n == 1:
            return {"mode": "full"}, [], []
        return {"mode": "full"}, [], [
            f"recompute_num_layers={n} (uniform): torchtitan checkpoints each block on its own, not {n} consecutive "
            f"blocks as one; exported as mode = \"full\", which keeps each block's input ({n} x the plan's, one per "
            f"group) and rebuilds one block at a time; torchtitan's selective_ac_option = \"{n}\" is not this (it "
            f"checkpoints every {n}th block whole and keeps all activations of the others)"]
    chunks = virtual_stages(pf)
    if all(c <= n for c in chunks):  # the first n of each chunk: all of them
        return {"mode": "full"}, [f"recompute_method = block, recompute_num_layers = {n}: every chunk holds at "
                                  f"most {n} layers, so every block is recomputed (mode = \"full\")"], []
    size = chunks[0]
    if len(set(chunks)) == 1 and size % n == 0:
        k = size // n
        return {"mode": "selective", "selective_ac_option": str(k)}, [
            f"selective_ac_option = \"{k}\": every {k}th block whole, {n} of each chunk's {size} (torchtitan counts "
            f"a rank's blocks in order); the plan recomputes the first {n} of each chunk (Megatron-LM "
            "--recompute-method block): the same count, so the same memory and recompute time, other blocks"], []
    return {"mode": "full"}, [], [
        f"recompute_method = block, recompute_num_layers = {n}: torchtitan cannot checkpoint the first {n} blocks of "
        f"each pipeline chunk (chunks of {chunks} layers); its selective_ac_option = \"N\" checkpoints every Nth "
        "block, which matches the count only for equal chunks a multiple of n; exported as mode = \"full\" (every "
        "block recomputed: less memory, more recompute time than planned)"]


def _torchtitan_experts(pf: PlanFile, name: str, flavor: str, shard: int) -> tuple[list[str], list[str]]:
    """(comments, not-expressed notes) for ep / etp and the routing, against torchtitan 0.2.0's rules
    (torchtitan/distributed/parallel_dims.py: with ep > 1, etp is 1 or tp; ep takes its ranks from
    data_parallel_shard_degree x cp, and with etp = 1 from tp too)."""
    p = pf.plan
    comments, notes = [], []
    ep, etp, tp, cp = p.ep, p.etp, p.tp, p.cp
    if ep == 1:
        if etp != tp:
            notes.append(f"etp={etp} with ep=1 and tp={tp}: without expert parallelism torchtitan splits the experts "
                         f"over the tensor-parallel ranks only (etp = tp = {tp}; expert_tensor_parallel_degree has "
                         "no effect at ep = 1); not expressed")
    elif etp not in (1, tp):
        notes.append(f"etp={etp} with tp={tp}: torchtitan's expert_tensor_parallel_degree is 1 or tp "
                     "(parallel_dims: 'Currently we only support ETP=TP or ETP=1'); exported as planned, which "
                     "torchtitan refuses")
    else:
        borrowed = cp if etp == tp else cp * tp
        over = shard * borrowed
        what = "data_parallel_shard_degree x cp" if etp == tp else "data_parallel_shard_degree x cp x tp"
        if ep % borrowed or over % ep:
            notes.append(f"ep={ep} with etp={etp}: torchtitan takes the expert-parallel ranks from {what} = {over} "
                         f"and needs ep a multiple of {borrowed} dividing {over}; exported as planned, which "
                         "torchtitan refuses")
        else:
            comments.append(f"expert_parallel_degree {ep}: the experts split over {ep} of the {what} = {over} "
                            f"ranks, expert data parallelism (FSDP) over the other {over // ep}; "
                            + ("the experts are tensor-parallel like the rest (etp = tp)" if etp == tp and tp > 1
                               else "each expert whole on its rank (etp = 1)"))
    if ep > 1 and p.moe_dispatcher != "alltoall":
        notes.append(f"moe_dispatcher={p.moe_dispatcher}: torchtitan's expert parallelism sends tokens to their "
                     "experts by all-to-all; exported as all-to-all")
    if p.moe_overlap:
        notes.append("moe_overlap=true: torchtitan's job config has no setting that runs one micro-batch's "
                     "all-to-alls beside another's compute; the run exposes them, as the plan without it prices")
    if p.expert_imbalance == 1.0:
        notes.append("expert_imbalance=1.0: the plan prices perfectly balanced routing; torchtitan's routers balance "
                     "by a per-expert bias (MoEArgs.load_balance_coeff), not exactly; [training] "
                     "debug_moe_force_load_balance = true (torchtitan 0.2.0) forces it round-robin for debugging "
                     "only, so it is not set")
    else:
        comments.append(f"expert_imbalance = {p.expert_imbalance}: the plan prices the busiest expert at "
                        f"{p.expert_imbalance} x the mean tokens; the run's routing decides it (no torchtitan key)")
    if p.cp > 1 and (name, flavor) in _FLEX_ATTENTION:
        notes.append(f"cp={p.cp}: torchtitan's {name} {flavor} attends with FlexAttention (use_flex_attn), which has "
                     "no context parallelism in torchtitan 0.2.0 ('CP support for FlexAttention is still in "
                     "progress'); use a flavor with use_flex_attn = False")
    if p.pp > 1 and name == "qwen3":
        notes.append(f"pp={p.pp}: torchtitan 0.2.0's qwen3 has no pipelining function (its TrainSpec's "
                     "pipelining_fn is None), so it refuses pipeline_parallel_degree > 1; a later torchtitan "
                     "pipelines qwen3 (with another config format)")
    return comments, notes


def _cumulative(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out
