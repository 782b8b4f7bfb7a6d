"""Translate a plan file into the configuration of a training framework: Megatron-LM, torchtitan or DeepSpeed.

`export(pf, to)` returns text: the framework's configuration for every plan setting it can express, followed by
the settings it cannot, stated plainly (comments for Megatron-LM and torchtitan; a top-level
"_perfmodel_not_expressed" list for DeepSpeed's JSON). No plan setting is dropped silently: a setting is either
carried by a framework option, is that framework's default behaviour (said in a comment where it matters), or is
listed as not expressed together with what was exported instead.

Names follow (from the projects' documentation and source, 2024-2025):
- Megatron-LM core_r0.10-r0.12 `pretrain_gpt.py` arguments (megatron/training/arguments.py);
- torchtitan main of mid-2025 TOML job configs (torchtitan/config/job_config.py, train_configs/*.toml):
  training.local_batch_size / global_batch_size, parallelism.module_fqns_per_model_part, model.converters;
- DeepSpeed 0.16-0.17 config JSON (deepspeed.ai/docs/config-json; AutoTP training since 0.16.4).

This module reads the plan file only; it imports nothing from the cost model.
"""

from __future__ import annotations

import json
import math

from .errors import InputError
from .planfile import OpPlacement, PlanFile

TARGETS = ("megatron", "torchtitan", "deepspeed")
DEFAULT_DEVICES_PER_NODE = 8


def export(pf: PlanFile, to: str) -> str:
    """The configuration of framework `to` (one of TARGETS) for plan file `pf`, as text ending in a newline."""
    writers = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}
    if to not in writers:
        raise InputError(f"--to = {to!r} is not a known target; valid: {', '.join(TARGETS)}")
    return writers[to](pf)


# ---------------------------------------------------------------------------------------------------------
# Shared facts about the plan
# ---------------------------------------------------------------------------------------------------------
def _summary(pf: PlanFile) -> str:
    p, m = pf.plan, pf.model
    layout = f"tp={p.tp} pp={p.pp} dp={p.dp} cp={p.cp}" + (f" vpp={p.vpp}" if p.vpp > 1 else "")
    return (f"{m.name} on {pf.hardware.name} ({p.gpus} x {pf.hardware.accelerator.name}), {layout}, "
            f"micro_batch={p.micro_batch} global_batch={p.global_batch} seq_len={p.seq_len}")


def _prediction(pf: PlanFile) -> str:
    r = pf.prediction
    return (f"perfmodel predicted step {r.step_time_s:.3g} s, {r.tokens_per_s:.4g} tokens/s, MFU {r.mfu:.1%}, "
            f"peak memory {r.memory_bytes / 2**30:.1f} of {r.memory_capacity_bytes / 2**30:.1f} GiB"
            + ("" if r.fits_in_memory else " (does NOT fit)"))


def _shape(pf: PlanFile) -> str:
    m = pf.model
    return (f"n_layers={m.n_layers} hidden={m.hidden} n_heads={m.n_heads} n_kv_heads={m.n_kv_heads} "
            f"head_dim={m.head_dim} ffn_hidden={m.ffn_hidden} vocab={m.vocab} mlp={m.mlp} norm={m.norm} "
            f"position={m.position} tie_embeddings={m.tie_embeddings} linear_bias={m.linear_bias} "
            f"dropout={m.dropout}")


def _hardware_notes(pf: PlanFile) -> list[str]:
    acc = pf.hardware.accelerator.name
    if acc.lower().startswith("tpu"):
        return [(f"hardware {pf.hardware.name} ({acc}) is a TPU system: Megatron-LM, torchtitan and DeepSpeed run on "
                "CUDA/ROCm GPUs, so this configuration cannot run on it as is")]
    return []


def _devices_per_node(pf: PlanFile) -> tuple[int, int, list[str]]:
    """(processes per node, nodes, notes): per node = the fastest tier's domain, 8 when it is larger or unbounded."""
    domain = pf.hardware.tiers[0].domain_size
    notes = []
    per_node = domain if domain is not None and domain <= DEFAULT_DEVICES_PER_NODE else DEFAULT_DEVICES_PER_NODE
    if per_node != domain:
        what = "unbounded" if domain is None else f"{domain} devices"
        notes.append(f"devices per node assumed {per_node}: the fastest tier ({pf.hardware.tiers[0].name}) spans "
                     f"{what}, larger than one host; set the per-node process count to the GPUs of one host "
                     "(e.g. 4 on a GB200 compute tray)")
    gpus = pf.plan.gpus
    per_node = min(per_node, gpus)
    nodes = math.ceil(gpus / per_node)
    if gpus % per_node:
        notes.append(f"gpus = {gpus} is not a multiple of {per_node} devices per node: {nodes} nodes with the last "
                     "one partly used cannot be launched with one per-node process count")
    return per_node, nodes, notes


def _virtual_stages(pf: PlanFile) -> list[int]:
    """Layers of each model chunk in model order: chunk c of stage r is virtual stage c*pp + r (Megatron's
    interleaving); each stage's layers split into vpp chunks as evenly as possible (earlier chunks take the rest)."""
    pp, vpp = pf.plan.pp, pf.plan.vpp
    chunks = [[n // vpp + (1 if c < n % vpp else 0) for c in range(vpp)] for n in pf.stage_layers]
    return [chunks[r][c] for c in range(vpp) for r in range(pp)]


def _layers(pl: OpPlacement) -> str:
    if pl.layers is None:
        return pl.op
    a, b = pl.layers
    return f"layer{'' if a == b else 's'} {a}{'' if a == b else f'-{b}'} {pl.op}"


# The Megatron-LM tensor-parallel pattern (torchtitan's llama plan is the same): weights in torch layout.
_TP_WEIGHT = {"embedding": ("vocab", "Shard(0)"), "qkv": ("colwise", "Shard(0)"), "mlp_in": ("colwise", "Shard(0)"),
              "out_proj": ("rowwise", "Shard(1)"), "mlp_out": ("rowwise", "Shard(1)"),
              "lm_head": ("vocab", "Shard(0)")}
_TP_STYLES = {"vocab": {"vocab"}, "colwise": {"colwise"}, "rowwise": {"rowwise"}}
_HEAD_SPLIT = {"attention", "activation"}  # outputs sharded over heads / ffn features: Shard(2) on tp
_NORMS = {"norm1", "norm2", "final_norm"}
_SEQ_OPS = _NORMS | {"residual1", "residual2"}  # Shard(1) on tp with sequence parallelism, else Replicate()


def _placement_deviations(pf: PlanFile) -> list[str]:
    """Placements that differ from the standard layout (Megatron-LM's, and torchtitan's llama plan): batch Shard(0)
    over dp, sequence Shard(1) over cp, colwise qkv/mlp_in, rowwise out_proj/mlp_out, vocab-parallel embedding and
    LM head, heads/features Shard(2) over tp inside attention and the MLP, and norms/residuals Shard(1) over tp
    with sequence parallelism (Replicate() without). Axes of size 1 are not checked (any placement is the same)."""
    p = pf.plan
    sp = p.sequence_parallel
    out = []
    for pl in pf.placements:
        found, expected = [], []
        act = pl.input if pl.op == "loss" else pl.output
        if p.dp > 1 and act[0] != "Shard(0)":
            found.append(f"{'input' if pl.op == 'loss' else 'output'} {act[0]} on dp")
            expected.append("batch Shard(0) on dp")
        if p.cp > 1 and act[1] != "Shard(1)":
            found.append(f"{'input' if pl.op == 'loss' else 'output'} {act[1]} on cp")
            expected.append("sequence Shard(1) on cp")
        if p.tp > 1:
            if pl.op in _TP_WEIGHT:
                style, weight = _TP_WEIGHT[pl.op]
                allowed = _TP_STYLES[style] | ({"colwise"} if pl.op == "lm_head" else set())
                if pl.weight is None or pl.weight[2] != weight or (pl.style is not None and pl.style not in allowed):
                    found.append(f"weight {pl.weight[2] if pl.weight else None} on tp, style {pl.style}")
                    expected.append(f"{style}: weight {weight} on tp")
            elif pl.op in _HEAD_SPLIT and pl.output[2] != "Shard(2)":
                found.append(f"output {pl.output[2]} on tp")
                expected.append("heads/features Shard(2) on tp")
            elif pl.op == "loss" and pl.input[2] != "Shard(2)":
                found.append(f"input {pl.input[2]} on tp")
                expected.append("vocab-parallel logits Shard(2) on tp")
            elif pl.op in _SEQ_OPS:
                want = "Shard(1)" if sp else "Replicate()"
                bad_style = pl.op in _NORMS and pl.style not in ({"sequence", None} if sp else {None})
                if pl.output[2] != want or bad_style:
                    found.append(f"output {pl.output[2]} on tp" + (f", style {pl.style}" if bad_style else ""))
                    expected.append(f"{want} on tp" + (" (sequence parallel)" if sp else ""))
        if found:
            out.append(f"{_layers(pl)} ({'; '.join(found)}; expected {'; '.join(expected)})")
    return out


# ---------------------------------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------------------------------
def _megatron_pipeline_split(pf: PlanFile) -> tuple[list[str], list[str]]:
    """Arguments and not-expressed notes for stage_layers / vpp (Megatron-LM core_r0.10+: uneven first/last stage)."""
    p, sl, n = pf.plan, pf.stage_layers, pf.model.n_layers
    if p.pp == 1:
        return [], []
    notes = []
    if p.vpp > 1:
        chunks = _virtual_stages(pf)
        if len(set(chunks)) == 1:
            return [f"--num-layers-per-virtual-pipeline-stage {chunks[0]}"], []
        notes.append(f"vpp={p.vpp} with stage_layers {sl}: Megatron-LM's interleaved schedule needs every model "
                     f"chunk to hold the same number of layers (--num-layers-per-virtual-pipeline-stage); chunks "
                     f"here would be {chunks}; exported without interleaving (1F1B, vpp=1)")
    if len(set(sl)) == 1:
        return [], notes
    args = []
    if len(set(sl[1:])) == 1:
        args = [f"--decoder-first-pipeline-num-layers {sl[0]}"]
    elif len(set(sl[:-1])) == 1:
        args = [f"--decoder-last-pipeline-num-layers {sl[-1]}"]
    elif len(set(sl[1:-1])) == 1:
        args = [f"--decoder-first-pipeline-num-layers {sl[0]}", f"--decoder-last-pipeline-num-layers {sl[-1]}"]
    if args:
        return args, notes
    even = "an even split" if n % p.pp == 0 else f"an even split, which fails: n_layers = {n} % pp = {p.pp} != 0"
    return [], [*notes, (f"stage_layers {sl}: Megatron-LM sets only the first and last stage's layer counts "
                         f"(--decoder-first/last-pipeline-num-layers) and splits the rest evenly; the middle stages "
                         f"differ, so this split is not expressed ({even})")]


def _megatron_vocab(pf: PlanFile) -> tuple[str, str | None, str]:
    """(--make-vocab-size-divisible-by argument, not-expressed note or None, comment): Megatron pads the vocabulary
    to a multiple of make_vocab_size_divisible_by * tp (default 128); pick the largest divisor <= 128 that needs
    no padding."""
    v, tp = pf.model.vocab, pf.plan.tp
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if v % (d * tp) == 0:
            default = math.ceil(v / (128 * tp)) * 128 * tp
            comment = (f"--make-vocab-size-divisible-by {d}: Megatron pads the tokenizer's vocabulary to a multiple "
                       f"of this x tp; {d} x {tp} divides vocab = {v}, so no padding"
                       + (f" (the default 128 would pad to {default})" if d != 128 else ""))
            return f"--make-vocab-size-divisible-by {d}", None, comment
    padded = math.ceil(v / tp) * tp
    note = (f"vocab = {v} is padded by Megatron-LM to {padded} (a multiple of tp = {tp}): {padded - v} extra "
            "embedding and LM-head rows that the plan does not count")
    return "--make-vocab-size-divisible-by 1", note, f"--make-vocab-size-divisible-by 1: smallest padding ({padded})"


def megatron(pf: PlanFile) -> str:
    """Megatron-LM `pretrain_gpt.py` command line (argument names of Megatron-LM core_r0.10-r0.12,
    megatron/training/arguments.py), launched with torchrun, followed by the plan settings it cannot express."""
    m, p = pf.model, pf.plan
    notes = _hardware_notes(pf)
    comments = []
    per_node, nodes, launch_notes = _devices_per_node(pf)
    notes += launch_notes

    a = [f"--num-layers {m.n_layers}", f"--hidden-size {m.hidden}", f"--ffn-hidden-size {m.ffn_hidden}",
         f"--num-attention-heads {m.n_heads}"]
    if m.n_kv_heads != m.n_heads:
        a += ["--group-query-attention", f"--num-query-groups {m.n_kv_heads}"]
    if m.head_dim != m.hidden // m.n_heads or m.hidden % m.n_heads:
        a.append(f"--kv-channels {m.head_dim}")
    a.append(f"--seq-length {p.seq_len}")
    if m.position == "learned":
        a += [f"--max-position-embeddings {m.max_seq_len}", "--position-embedding-type learned_absolute"]
    else:
        a += [f"--max-position-embeddings {max(m.max_seq_len, p.seq_len)}", "--position-embedding-type rope"]
        if m.position == "alibi":
            notes.append("position=alibi: Megatron-LM has no ALiBi; exported as --position-embedding-type rope "
                         "(also parameter-free)")
        comments.append("--rotary-base, --norm-epsilon: not part of the plan; set them for the model (Llama 3: "
                        "--rotary-base 500000)")
    if m.sliding_window is not None:
        notes.append(f"sliding_window = {m.sliding_window}: not expressed by these arguments; exported as full "
                     "causal attention")
    vocab_arg, vocab_note, vocab_comment = _megatron_vocab(pf)
    a.append(vocab_arg)
    comments.append(vocab_comment)
    if vocab_note:
        notes.append(vocab_note)
    if m.mlp == "swiglu":
        a.append("--swiglu")
    a.append(f"--normalization {'RMSNorm' if m.norm == 'rmsnorm' else 'LayerNorm'}")
    if not m.tie_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if m.linear_bias == "none":
        a.append("--disable-bias-linear")
    elif m.linear_bias == "qkv":
        a += ["--disable-bias-linear", "--add-qkv-bias"]
    a += [f"--attention-dropout {m.dropout}", f"--hidden-dropout {m.dropout}"]

    # parallelism
    a += [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}"]
    split_args, split_notes = _megatron_pipeline_split(pf)
    a += split_args
    notes += split_notes
    if p.cp > 1:
        a.append(f"--context-parallel-size {p.cp}")
        if p.seq_len % (2 * p.cp):
            notes.append(f"cp={p.cp}: Megatron-LM's load-balanced causal context parallelism needs seq_len "
                         f"divisible by 2 x cp = {2 * p.cp}; seq_len = {p.seq_len} is not")
        if p.attention == "unfused":
            notes.append(f"attention=unfused with cp={p.cp}: Megatron-LM's context parallelism runs only in "
                         "Transformer Engine's fused/flash attention")
    if p.sequence_parallel:
        a.append("--sequence-parallel")
    if p.pp > 1 and p.schedule == "gpipe":
        notes.append("schedule=gpipe: Megatron-LM has no GPipe schedule (all forwards, then all backwards); "
                     "exported as its 1F1B schedule, which holds fewer micro-batches' activations")
    a += [f"--micro-batch-size {p.micro_batch}", f"--global-batch-size {p.global_batch}"]
    comments.append(f"gradient accumulation: Megatron runs global / (micro x dp) = {p.global_batch} / "
                    f"({p.micro_batch} x {p.dp}) = {p.num_microbatches} micro-batches per step, "
                    f"dp = gpus / (tp x pp x cp) = {p.dp}")

    if p.recompute == "full":
        a += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif p.recompute == "selective":
        a.append("--recompute-granularity selective")

    if p.zero >= 1:
        a.append("--use-distributed-optimizer")
        if p.zero > 1:
            sharded = "gradients" if p.zero == 2 else "gradients and parameters"
            notes.append(f"zero={p.zero}: Megatron-LM's distributed optimizer shards only optimizer state and "
                         f"master weights (ZeRO-1); ZeRO-{p.zero} ({sharded} sharded) is not expressible in "
                         "Megatron-LM core's DDP; exported as --use-distributed-optimizer (ZeRO-1: more memory than "
                         "planned; Megatron-LM's separate torch-FSDP2 path, --use-torch-fsdp2 in recent versions, "
                         "is not used here)")

    if p.precision == "fp16":
        a.append("--fp16")
    else:
        a.append("--bf16")
    if p.precision in ("fp8", "fp4"):
        a.append("--fp8-format hybrid")
        comments.append("--fp8-format hybrid: Transformer Engine FP8 GEMMs (E4M3 forward, E5M2 gradients)")
    if p.precision == "fp4":
        notes.append("precision=fp4: not expressed by these arguments (no FP4 GEMM recipe in the Megatron-LM "
                     "versions followed); exported as FP8 (--fp8-format hybrid), slower than planned")

    a.append(f"--attention-backend {'flash' if p.attention == 'flash' else 'unfused'}")
    comments.append("--attention-backend (core_r0.10+); older Megatron-LM: --use-flash-attn for flash, and "
                    "--transformer-impl local for unfused attention")

    if p.grad_dtype == "fp32":
        a.append("--accumulate-allreduce-grads-in-fp32")
    elif p.precision == "fp16":
        notes.append("grad_dtype=bf16 with precision=fp16: Megatron-LM accumulates and reduces gradients in fp16 "
                     "or fp32 (--accumulate-allreduce-grads-in-fp32), not bf16; exported as fp16")
    else:
        notes.append("grad_dtype=bf16: with --bf16 Megatron-LM always accumulates and all-reduces gradients in "
                     "fp32 (validate_args sets accumulate_allreduce_grads_in_fp32); exported as fp32 (twice the "
                     "gradient bytes on the wire)")
    if p.overlap_dp_comm:
        a.append("--overlap-grad-reduce")
        if p.zero >= 1:
            a.append("--overlap-param-gather")
    else:
        comments.append("overlap_dp_comm=False: Megatron-LM's default (no --overlap-grad-reduce)")

    devs = _placement_deviations(pf)
    if devs:
        notes += [f"per-operator placement of {d} is not Megatron's pattern; Megatron-LM applies its fixed "
                  "tensor-parallel layout" for d in devs]

    lines = ["#!/bin/bash",
             f"# Megatron-LM pretrain_gpt.py for: {_summary(pf)}",
             f"# {_prediction(pf)}",
             "# Argument names: Megatron-LM core_r0.10-r0.12 (megatron/training/arguments.py).",
             f"# Model shape: {_shape(pf)}",
             ("# Not part of the plan (pass after this script's name, they reach pretrain_gpt.py via \"$@\"): "
             "--data-path, --tokenizer-type/--tokenizer-model, optimizer and learning-rate schedule, "
             "--train-iters, checkpointing."),
             *[f"# {c}" for c in comments],
             (f"torchrun --nproc-per-node {per_node} --nnodes {nodes} --node-rank \"${{NODE_RANK:-0}}\" "
             f"--master-addr \"${{MASTER_ADDR:-localhost}}\" --master-port \"${{MASTER_PORT:-6000}}\" \\"),
             "    pretrain_gpt.py \\",
             *[f"    {arg} \\" for arg in a],
             "    \"$@\""]
    lines += _not_expressed_comments("Megatron-LM", notes)
    return "\n".join(lines) + "\n"


def _not_expressed_comments(framework: str, notes: list[str]) -> list[str]:
    if not notes:
        return [f"# Not expressed in {framework}: nothing; every plan setting is carried above."]
    return [f"# Not expressed in {framework} ({len(notes)} plan setting{'s' if len(notes) > 1 else ''}):",
            *[f"#   - {n}" for n in notes]]


# ---------------------------------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------------------------------
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
    shape = (m.hidden, m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_hidden)
    exact = [f for f, s in _LLAMA3_FLAVORS.items() if s == shape]
    notes = []
    if exact:
        flavor = exact[0]
        comments = [f"flavor {flavor} has this plan's shape: {_shape(pf)}"]
    else:
        flavor = min(_LLAMA3_FLAVORS, key=lambda f: abs(math.log(_LLAMA3_FLAVORS[f][0] / m.hidden)))
        dim, nl, nh, nkv, ffn = _LLAMA3_FLAVORS[flavor]
        comments = [(f"flavor {flavor} is approximate (the nearest llama3 flavor: dim={dim} n_layers={nl} "
                    f"n_heads={nh} n_kv_heads={nkv} ffn={ffn}); the plan's shape is: {_shape(pf)}")]
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
    notes = _hardware_notes(pf)
    flavor, model_comments, model_notes = _torchtitan_model(pf)
    notes += model_notes
    comments = list(model_comments)
    per_node, nodes, launch_notes = _devices_per_node(pf)
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
        stages = _virtual_stages(pf)
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
    sections = [("job", {"dump_folder": "./outputs", "description": f"perfmodel plan: {_summary(pf)}"}),
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

    devs = _placement_deviations(pf)
    if devs:
        notes += [f"per-operator placement of {d} is not torchtitan's llama tensor-parallel plan "
                  "(parallelize_llama applies a fixed plan)" for d in devs]

    lines = [f"# torchtitan job config for: {_summary(pf)}",
             f"# {_prediction(pf)}",
             "# Keys: torchtitan main, mid-2025 (torchtitan/config/job_config.py).",
             (f"# Launch: torchrun --nproc-per-node {per_node} --nnodes {nodes} --node-rank $NODE_RANK "
             "--rdzv-endpoint $MASTER_ADDR:29500 -m torchtitan.train --job.config_file THIS_FILE.toml"),
             ("# Not part of the plan (add your own): [optimizer], [lr_scheduler], [training] steps and dataset, "
             "[model] tokenizer / hf_assets_path, [checkpoint], [compile]."),
             *[f"# {c}" for c in comments]]
    for name, table in sections:
        lines += ["", f"[{name}]", *[f"{k} = {_toml_value(v)}" for k, v in table.items()]]
    lines.append("")
    lines += _not_expressed_comments("torchtitan", notes)
    return "\n".join(lines) + "\n"


def _cumulative(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


# ---------------------------------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------------------------------
def deepspeed(pf: PlanFile) -> str:
    """DeepSpeed config JSON (keys of DeepSpeed 0.16-0.17, deepspeed.ai/docs/config-json; AutoTP training's
    "tensor_parallel": {"autotp_size"} since 0.16.4), with "_perfmodel_not_expressed" listing the plan settings
    the JSON cannot carry."""
    m, p = pf.model, pf.plan
    notes = _hardware_notes(pf)
    cfg: dict = {"_perfmodel_plan": _summary(pf), "_perfmodel_prediction": _prediction(pf),
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
    cfg["communication_data_type"] = p.grad_dtype
    cfg["data_types"] = {"grad_accum_dtype": p.grad_dtype}
    if p.precision in ("fp8", "fp4"):
        notes.append(f"precision={p.precision}: the DeepSpeed config has no {p.precision.upper()} GEMM setting "
                     "(FP8 comes from Transformer Engine's fp8_autocast in model code); exported as bf16")

    if p.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": p.tp > 1,
                                           "contiguous_memory_optimization": False, "cpu_checkpointing": False,
                                           "synchronize_checkpoint_boundary": False, "profile": False}
        notes.append("recompute=full: the activation_checkpointing section only configures "
                     "deepspeed.checkpointing.checkpoint; the model code must wrap each transformer layer in it")
    elif p.recompute == "selective":
        notes.append("recompute=selective: not expressible in the DeepSpeed config (its activation checkpointing "
                     "recomputes whole wrapped blocks; selective attention recompute is Megatron-DeepSpeed's "
                     "--recompute-granularity selective)")

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
    notes.append(f"model {m.name} ({_shape(pf)}) and seq_len={p.seq_len}: defined by the model and data code, "
                 "not by the DeepSpeed config")
    notes.append(f"attention={p.attention}: chosen in model code (e.g. Hugging Face attn_implementation="
                 f"{'flash_attention_2' if p.attention == 'flash' else 'eager'}), not by the DeepSpeed config")
    devs = _placement_deviations(pf)
    if devs:
        notes += [f"per-operator placement of {d}: the DeepSpeed config has no per-operator sharding" for d in devs]
    per_node, nodes, launch_notes = _devices_per_node(pf)
    notes += launch_notes
    cfg["_perfmodel_launch"] = (f"deepspeed --num_nodes {nodes} --num_gpus {per_node} --hostfile HOSTFILE "
                                "train.py --deepspeed --deepspeed_config THIS_FILE.json")
    cfg["_perfmodel_not_expressed"] = notes
    return json.dumps(cfg, indent=2) + "\n"
