"""torchtitan: a TOML job config for its llama3 model family, then the plan settings it cannot express."""

from __future__ import annotations

import json
import math

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


def _torchtitan_model(pf: PlanFile) -> tuple[str, list[str], list[str]]:
    """(flavor, comments, not-expressed notes) for torchtitan's llama3 model family."""
    m = pf.model
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
    for bad, what in ((m.mlp != "swiglu", f"mlp={m.mlp} (llama3 is SwiGLU)"),
                      (m.norm != "rmsnorm", f"norm={m.norm} (llama3 uses RMSNorm)"),
                      (m.position != "rope", f"position={m.position} (llama3 uses RoPE)"),
                      (m.tie_embeddings, "tie_embeddings=True (llama3 unties embedding and output)"),
                      (m.linear_bias != "none", f"linear_bias={m.linear_bias} (llama3 has no biases)"),
                      (m.dropout > 0, f"dropout={m.dropout} (torchtitan's llama3 has no dropout)"),
                      (m.sliding_window is not None, f"sliding_window={m.sliding_window} (llama3 attends fully)")):
        if bad:
            notes.append(f"{what}: not expressible in torchtitan's llama3 model; exported as llama3's architecture")
    if m.vocab != 128256:
        comments.append(f"vocab = {m.vocab}: torchtitan takes vocab_size from the tokenizer; use one with "
                        f"{m.vocab} tokens")
    return flavor, comments, notes


def torchtitan(pf: PlanFile) -> str:
    """torchtitan TOML job config (keys of torchtitan main, mid-2025: torchtitan/config/job_config.py, as in
    torchtitan/models/llama3/train_configs/*.toml), followed by the plan settings it cannot express."""
    p = pf.plan
    notes = hardware_notes(pf)
    flavor, model_comments, model_notes = _torchtitan_model(pf)
    notes += model_notes
    comments = list(model_comments)
    per_node, nodes, launch_notes = devices_per_node(pf)
    notes += launch_notes

    # data parallelism: FSDP2 shards over dp (and cp); plain replication is DDP (zero 0)
    others = [f"{k}={v}" for k, v in (("tp", p.tp), ("pp", p.pp), ("cp", p.cp)) if v > 1]
    if p.zero == 0 and not others:
        replicate, shard = p.dp, 1
    else:
        replicate, shard = 1, p.dp
        if p.zero == 0:
            notes.append(f"zero=0 with {', '.join(others)}: torchtitan replicates (DDP, data_parallel_replicate_"
                         "degree) only on a 1-D data-parallel mesh, and applies FSDP2 whenever context parallelism "
                         "is on; exported as FSDP2 over dp with fsdp_reshard_after_forward = \"never\" (ZeRO-2-like: "
                         "gradients and optimizer state sharded, reduce-scatter instead of all-reduce)")
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
    training = {"local_batch_size": local, "global_batch_size": p.global_batch, "seq_len": p.seq_len,
                "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}

    ac = {"mode": p.recompute}
    if p.recompute == "selective":
        ac["selective_ac_option"] = "op"
        comments.append("selective_ac_option = \"op\": torchtitan's op-level policy saves matmul and attention "
                        "outputs (recomputing every second matmul) and recomputes the rest; perfmodel's selective "
                        "recompute (Korthikanti et al. 2022) is approximated by it")
    if p.attention == "unfused":
        notes.append("attention=unfused: torchtitan's llama3 calls scaled_dot_product_attention (flash / "
                     "memory-efficient kernels); exported as fused attention")

    model = {"name": "llama3", "flavor": flavor}
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
        notes += [f"per-operator placement of {d} is not torchtitan's llama tensor-parallel plan "
                  "(parallelize_llama applies a fixed plan)" for d in devs]

    lines = [f"# torchtitan job config for: {summary(pf)}",
             f"# {prediction(pf)}",
             "# Keys: torchtitan main, mid-2025 (torchtitan/config/job_config.py).",
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


def _cumulative(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out
