"""Megatron-LM: a `pretrain_gpt.py` command line launched with torchrun, then the plan settings it cannot express."""

from __future__ import annotations

import math

from collections.abc import Sequence

from ...spec.plan.megatron_split import megatron_slots
from ...spec.plan.file import PlanFile
from ...spec.stack.profile import load_stack
from .moe import megatron_moe as _megatron_moe, pattern_expression  # noqa: F401 (tests import it here)
from .versions import (
    FP4, FSDP_FLAG, LAYOUT, VERSIONS, first_last_args, layout_string, nearest_plan, needs_layout, selective_modules,
)
from ..plan_facts import (
    devices_per_node, hardware_notes, not_expressed_comments, placement_deviations, prediction, shape, summary,
    virtual_stages,
)

# Every argument this exporter writes, as megatron/training/arguments.py of Megatron-LM names it: the dense ones of
# core_r0.10-r0.12; the MoE, MLA and MTP ones of core_r0.12 and later (to current main, 2025). arguments.py is not
# in the megatron-core package, so these were checked against the TransformerConfig fields they set (megatron/core/
# transformer/transformer_config.py of megatron-core 0.12.3, 0.13.1, 0.14.0 and 0.16.1: the argument is the field
# name with dashes, except --num-experts for num_moe_experts) and from knowledge of arguments.py. `megatron` refuses
# to write any other (check_args); tests/test_export_moe.py checks every argument it writes is listed here.
MEGATRON_ARGS = frozenset({
    # model shape
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention",
    "--num-query-groups", "--kv-channels", "--seq-length", "--max-position-embeddings", "--position-embedding-type",
    "--make-vocab-size-divisible-by", "--swiglu", "--normalization", "--untie-embeddings-and-output-weights",
    "--disable-bias-linear", "--add-qkv-bias", "--attention-dropout", "--hidden-dropout",
    # multi-head latent attention (MLATransformerConfig; --qk-layernorm adds the latents' norms)
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
    "--v-head-dim", "--qk-layernorm",
    # mixture of experts
    "--num-experts", "--moe-ffn-hidden-size", "--moe-router-topk", "--moe-layer-freq",
    "--moe-shared-expert-intermediate-size", "--moe-router-score-function", "--moe-router-load-balancing-type",
    "--moe-aux-loss-coeff", "--moe-router-enable-expert-bias", "--moe-grouped-gemm", "--moe-token-dispatcher-type",
    # core_r0.14+ (TransformerConfig.overlap_moe_expert_parallel_comm); unlike the rest, not checked against the
    # packages named above
    "--overlap-moe-expert-parallel-comm",
    # multi-token prediction
    "--mtp-num-layers",
    # parallelism
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--expert-model-parallel-size",
    "--expert-tensor-parallel-size", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split", "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--num-virtual-stages-per-pipeline-rank", "--context-parallel-size", "--sequence-parallel",
    # core_r0.14+ (TransformerConfig.pipeline_model_parallel_layout)
    "--pipeline-model-parallel-layout",
    # ZeRO-2/3 (DistributedDataParallelConfig: use_megatron_fsdp core_r0.14+, use_custom_fsdp before)
    "--use-megatron-fsdp", "--use-custom-fsdp", "--data-parallel-sharding-strategy", "--ckpt-format",
    "--fp4-format",
    # batch, recompute, optimizer, precision, communication
    "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--use-distributed-optimizer", "--fp16", "--bf16", "--fp8-format",
    "--attention-backend", "--accumulate-allreduce-grads-in-fp32", "--overlap-grad-reduce", "--overlap-param-gather",
    # core_r0.12+ (TransformerConfig.recompute_modules is in megatron-core 0.12.3; shared_experts from 0.14.0)
    "--recompute-modules",
    # Adam's moments in bf16 (OptimizerConfig: core_v0.16.1 arguments.py, exp_avg_dtype bf16)
    "--use-precision-aware-optimizer", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
})
# Arguments the comments and notes name without writing them (same file; --moe-router-force-load-balancing is
# core_r0.13+: moe_router_force_load_balancing is not in megatron-core 0.12.3's TransformerConfig).
MEGATRON_NAMED_ARGS = frozenset({
    "--rotary-base", "--norm-epsilon", "--data-path", "--tokenizer-type", "--tokenizer-model", "--train-iters",
    "--moe-router-force-load-balancing",
    "--moe-router-bias-update-rate", "--moe-router-topk-scaling-factor", "--moe-router-num-groups",
    "--moe-router-group-topk", "--mtp-loss-scaling-factor",
})


def check_args(args: list[str]) -> list[str]:
    """`args` unchanged, after checking that each names an argument of MEGATRON_ARGS (a programming error
    otherwise: the exporter writes only the names it was checked against)."""
    unknown = [a.split()[0] for a in args if a.split()[0] not in MEGATRON_ARGS]
    if unknown:
        raise AssertionError(f"Megatron-LM argument(s) {', '.join(unknown)} not in MEGATRON_ARGS (the names "
                             "checked against megatron/training/arguments.py)")
    return args


def _megatron_pipeline_split(pf: PlanFile, version: str) -> list[str]:
    """Arguments for stage_layers / vpp (megatron.versions.nearest_plan left only splits `version` writes)."""
    p, n = pf.plan, pf.model.n_layers
    if p.pp == 1:
        return []
    if p.account_for_embedding or p.account_for_loss:  # megatron/training/arguments.py counts them as layers
        slots = megatron_slots(n, p.account_for_embedding, p.account_for_loss)
        args = (["--account-for-embedding-in-pipeline-split"] if p.account_for_embedding else []) + (
            ["--account-for-loss-in-pipeline-split"] if p.account_for_loss else [])
        if p.vpp > 1:
            args.append(f"--num-layers-per-virtual-pipeline-stage {slots // (p.pp * p.vpp)}")
        return args
    if p.first_stage_layers is not None or p.last_stage_layers is not None:  # the plan says it Megatron's way
        args = ([f"--decoder-first-pipeline-num-layers {p.first_stage_layers}"] if p.first_stage_layers else []) + (
            [f"--decoder-last-pipeline-num-layers {p.last_stage_layers}"] if p.last_stage_layers else [])
        if p.vpp > 1:  # each stage's layers split evenly over its chunks (spec.plan.megatron_split.megatron_chunks checked it)
            args.append(f"--num-virtual-stages-per-pipeline-rank {p.vpp}")
        return args
    if needs_layout(pf) and LAYOUT[version]:
        return [f"--pipeline-model-parallel-layout {layout_string(pf)}"]
    chunks = virtual_stages(pf)
    args = first_last_args(pf.stage_layers) or []
    if p.vpp > 1:
        args.append(f"--num-layers-per-virtual-pipeline-stage {chunks[0]}")
    return args


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


def _megatron_recompute(pf: PlanFile, version: str) -> tuple[list[str], list[str]]:
    """(arguments, comments) for the recompute policy (megatron.versions.nearest_plan made it one `version` runs)."""
    p = pf.plan
    if p.recompute == "full":
        n = p.recompute_num_layers or 1
        args = ["--recompute-granularity full", f"--recompute-method {p.recompute_method}",
                f"--recompute-num-layers {n}"]
        if p.recompute_method == "uniform":
            what = ("each layer of a pipeline chunk is its own checkpoint" if n == 1 else
                    f"the layers of each pipeline chunk are checkpointed in groups of {n} (only each group's input "
                    "kept)")
        else:
            what = (f"the first {n} layers of each pipeline chunk are recomputed whole, the others keep every "
                    "activation")
        return args, [f"--recompute-method {p.recompute_method} --recompute-num-layers {n}: {what}"]
    if p.recompute != "selective":
        return [], []
    mods = selective_modules(pf, version)
    return (["--recompute-granularity selective", f"--recompute-modules {' '.join(mods)}"],
            [f"--recompute-modules {' '.join(mods)} (Megatron-Core TransformerConfig.recompute_modules, core_r0.12 "
             "and later" + (", shared_experts core_r0.14 and later" if "shared_experts" in mods else "") + ")"])


def _megatron_sharding(pf: PlanFile, version: str) -> tuple[list[str], list[str]]:
    """(arguments, comments) for the ZeRO stage: the distributed optimizer for ZeRO-1; for ZeRO-2/3 Megatron-FSDP
    (DistributedDataParallelConfig.data_parallel_sharding_strategy optim_grads / optim_grads_params; its own
    checkpoint format, fsdp_dtensor, in core_r0.14+)."""
    p = pf.plan
    if p.zero == 0:
        return [], []
    args = ["--use-distributed-optimizer"]
    if p.zero == 1:
        return args, []
    strategy = "optim_grads" if p.zero == 2 else "optim_grads_params"
    args += [FSDP_FLAG[version], f"--data-parallel-sharding-strategy {strategy}"]
    if LAYOUT[version]:  # core_r0.14+: Megatron-FSDP saves DTensor checkpoints
        args.append("--ckpt-format fsdp_dtensor")
    return args, [f"zero={p.zero}: {FSDP_FLAG[version]} --data-parallel-sharding-strategy {strategy} (Megatron-FSDP: "
                  "optimizer state, gradients" + (" and weights" if p.zero == 3 else "") + " sharded over dp)"]


def launch_environment(pf: PlanFile) -> list[str]:
    """Shell lines setting what Megatron-LM's validate_args checks in the environment: CUDA_DEVICE_MAX_CONNECTIONS=1
    with tp or cp > 1 (one CUDA stream queue keeps the tensor-parallel communication in issue order, which
    Megatron's overlap relies on), and unset under Megatron-FSDP, which overlaps on several queues."""
    p = pf.plan
    if p.zero >= 2:
        return ["unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP overlaps on several CUDA queues"]
    if p.tp > 1 or p.cp > 1:
        return ["export CUDA_DEVICE_MAX_CONNECTIONS=1  # validate_args requires it with tp > 1 or cp > 1"]
    return []


def megatron(pf: PlanFile, version: str | None = None, changes: Sequence[str] = ()) -> str:
    """Megatron-LM `version` (default the newest of VERSIONS) `pretrain_gpt.py` command line launched with
    torchrun, after the environment it needs, followed by what it leaves out. `changes`: how pf's plan differs
    from the plan file's (perfmodel.export.nearest)."""
    version = version or next(iter(VERSIONS))
    m, p = pf.model, pf.plan
    notes = hardware_notes(pf)
    comments = []
    per_node, nodes, launch_notes = devices_per_node(pf)
    notes += launch_notes

    a = [f"--num-layers {m.n_layers}", f"--hidden-size {m.hidden}", f"--ffn-hidden-size {m.ffn_hidden}",
         f"--num-attention-heads {m.n_heads}"]
    if m.mla is None:  # latent attention sets its own head widths (_megatron_moe)
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
    if m.global_attention is not None:
        g = m.global_attention
        notes.append(f"global_attention (head_dim {g.head_dim}, {g.n_kv_heads} kv heads, shared_kv {g.shared_kv} on "
                     f"the full-attention layers): not expressed by these arguments; every layer exported as "
                     f"head_dim {m.head_dim} with {m.n_kv_heads} kv heads")
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
    moe_args, expert_args, moe_comments, moe_notes = _megatron_moe(pf)
    a += moe_args
    comments += moe_comments
    notes += moe_notes

    # parallelism
    a += [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}", *expert_args]
    a += _megatron_pipeline_split(pf, version)
    if p.cp > 1:
        a.append(f"--context-parallel-size {p.cp}")
        if p.seq_len % (2 * p.cp):
            notes.append(f"cp={p.cp}: Megatron-LM's load-balanced causal context parallelism needs seq_len "
                         f"divisible by 2 x cp = {2 * p.cp}; seq_len = {p.seq_len} is not")
    if p.sequence_parallel:  # with experts and tp > 1 always (spec.plan.moe_rules.check_experts, as Megatron-LM requires)
        a.append("--sequence-parallel")
        if p.tp_comm_overlap:
            comments.append("the plan overlaps tensor-parallel communication with the GEMMs (priced so): add "
                            "--tp-comm-overlap where Transformer Engine's userbuffers can run (not written: it needs "
                            "TE and a bootstrap backend the launch must provide)")
    a += [f"--micro-batch-size {p.micro_batch}", f"--global-batch-size {p.global_batch}"]
    comments.append(f"gradient accumulation: Megatron runs global / (micro x dp) = {p.global_batch} / "
                    f"({p.micro_batch} x {p.dp}) = {p.num_microbatches} micro-batches per step, "
                    f"dp = gpus / (tp x pp x cp) = {p.dp}")

    rc_args, rc_comments = _megatron_recompute(pf, version)
    zero_args, zero_comments = _megatron_sharding(pf, version)
    a += rc_args + zero_args
    comments += rc_comments + zero_comments

    if p.precision == "fp16":
        a.append("--fp16")
    else:
        a.append("--bf16")
    if p.precision == "fp8":
        a.append("--fp8-format hybrid")
        comments.append("--fp8-format hybrid: Transformer Engine FP8 GEMMs (E4M3 forward, E5M2 gradients)")
        if p.fp8_recipe not in (None, "tensorwise"):
            notes.append(f"fp8_recipe = {p.fp8_recipe}: not written (the checked releases' arguments); add "
                         f"--fp8-recipe {p.fp8_recipe} (Megatron-LM core_r0.13+), or the run uses delayed scaling")
    if p.cuda_graphs == "step":
        notes.append("cuda_graphs = step: full-iteration CUDA graphs are not written; add --cuda-graph-impl "
                     "full_iteration (Megatron-Core 0.18+; local with --cuda-graph-scope full_iteration before), or "
                     "the run launches every kernel and synchronises in its MoE dispatch, as the plan does not price")
    if p.precision == "fp4":  # megatron.versions.nearest_plan: only where FP4[version]
        a.append("--fp4-format e2m1")
        comments.append("--fp4-format e2m1: Transformer Engine NVFP4 GEMMs (TransformerConfig.fp4, core_r0.16)")

    a.append(f"--attention-backend {'flash' if p.attention == 'flash' else 'unfused'}")

    a.append("--accumulate-allreduce-grads-in-fp32")  # grad_dtype fp32 (megatron.versions.nearest_plan)
    if p.moment_dtype == "bf16":  # core_r0.16 with the distributed optimizer (megatron.versions.nearest_plan)
        a += ["--use-precision-aware-optimizer", "--main-params-dtype fp32", "--exp-avg-dtype bf16",
              "--exp-avg-sq-dtype bf16"]
        comments.append("moment_dtype=bf16: Transformer Engine's FusedAdam keeps Adam's m and v in bf16 beside an "
                        "fp32 master (--use-precision-aware-optimizer)")
        notes.append("--use-precision-aware-optimizer with --bf16 stores the fp32 master as the 16 bits the bf16 "
                     "weight lacks (OptimizerConfig.store_param_remainders, on by default with Transformer Engine "
                     "2.1+; no argument turns it off): 2 B per parameter where the plan prices a 4 B master, so "
                     "the optimizer state is 2 B per parameter smaller than predicted")
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
             f"# Megatron-LM {version} pretrain_gpt.py for: {summary(pf)}",
             f"# Checked by perfmodel with the code of {VERSIONS[version]} (perfmodel export --check); argument "
             f"names of Megatron-LM {version} (megatron/training/arguments.py).",
             *[f"# Plan changed to the nearest one {version} runs: {c}" for c in changes],
             f"# {prediction(pf)}",
             f"# Model shape: {shape(pf)}",
             ("# Not part of the plan (pass after this script's name, they reach pretrain_gpt.py via \"$@\"): "
             "--data-path, --tokenizer-type/--tokenizer-model, optimizer and learning-rate schedule, "
             "--train-iters, checkpointing."),
             *[f"# {c}" for c in comments],
             *launch_environment(pf),
             (f"torchrun --nproc-per-node {per_node} --nnodes {nodes} --node-rank \"${{NODE_RANK:-0}}\" "
             f"--master-addr \"${{MASTER_ADDR:-localhost}}\" --master-port \"${{MASTER_PORT:-6000}}\" \\"),
             "    pretrain_gpt.py \\",
             *[f"    {arg} \\" for arg in check_args(a)],
             "    \"$@\""]
    lines += not_expressed_comments("Megatron-LM", notes)
    return "\n".join(lines) + "\n"
