"""Megatron-LM: a `pretrain_gpt.py` command line launched with torchrun, then the plan settings it cannot express."""

from __future__ import annotations

import math

from ..plan import megatron_slots
from ..planfile import PlanFile
from ..stack import load_stack
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


def _megatron_pipeline_split(pf: PlanFile) -> tuple[list[str], list[str]]:
    """Arguments and not-expressed notes for stage_layers / vpp (Megatron-LM core_r0.10+: uneven first/last stage)."""
    p, sl, n = pf.plan, pf.stage_layers, pf.model.n_layers
    if p.pp == 1:
        return [], []
    if p.account_for_embedding or p.account_for_loss:  # megatron/training/arguments.py counts them as layers
        slots = megatron_slots(n, p.account_for_embedding, p.account_for_loss)
        args = (["--account-for-embedding-in-pipeline-split"] if p.account_for_embedding else []) + (
            ["--account-for-loss-in-pipeline-split"] if p.account_for_loss else [])
        if p.vpp > 1:
            args.append(f"--num-layers-per-virtual-pipeline-stage {slots // (p.pp * p.vpp)}")
        return args, []
    if p.first_stage_layers is not None or p.last_stage_layers is not None:  # the plan says it Megatron's way
        args = ([f"--decoder-first-pipeline-num-layers {p.first_stage_layers}"] if p.first_stage_layers else []) + (
            [f"--decoder-last-pipeline-num-layers {p.last_stage_layers}"] if p.last_stage_layers else [])
        if p.vpp > 1:  # each stage's layers split evenly over its chunks (plan.megatron_chunks checked it)
            args.append(f"--num-virtual-stages-per-pipeline-rank {p.vpp}")
        return args, []
    notes = []
    if p.vpp > 1:
        chunks = virtual_stages(pf)
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
    notes = hardware_notes(pf)
    comments = []
    per_node, nodes, launch_notes = devices_per_node(pf)
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
            if p.zero == 1 and not load_stack(p.stack).overlap_param_gather:
                notes.append(f"stack={p.stack} gathers the updated weights inside the optimizer step and the plan "
                             "is priced so; Megatron-LM runs them with --overlap-param-gather beside the next "
                             "forward, so the exported run may be faster than predicted (predict --stack "
                             "megatron-core prices it as exported)")
    else:
        comments.append("overlap_dp_comm=False: Megatron-LM's default (no --overlap-grad-reduce)")

    devs = placement_deviations(pf)
    if devs:
        notes += [f"per-operator placement of {d} is not Megatron's pattern; Megatron-LM applies its fixed "
                  "tensor-parallel layout" for d in devs]

    lines = ["#!/bin/bash",
             f"# Megatron-LM pretrain_gpt.py for: {summary(pf)}",
             f"# {prediction(pf)}",
             "# Argument names: Megatron-LM core_r0.10-r0.12 (megatron/training/arguments.py).",
             f"# Model shape: {shape(pf)}",
             ("# Not part of the plan (pass after this script's name, they reach pretrain_gpt.py via \"$@\"): "
             "--data-path, --tokenizer-type/--tokenizer-model, optimizer and learning-rate schedule, "
             "--train-iters, checkpointing."),
             *[f"# {c}" for c in comments],
             (f"torchrun --nproc-per-node {per_node} --nnodes {nodes} --node-rank \"${{NODE_RANK:-0}}\" "
             f"--master-addr \"${{MASTER_ADDR:-localhost}}\" --master-port \"${{MASTER_PORT:-6000}}\" \\"),
             "    pretrain_gpt.py \\",
             *[f"    {arg} \\" for arg in a],
             "    \"$@\""]
    lines += not_expressed_comments("Megatron-LM", notes)
    return "\n".join(lines) + "\n"
