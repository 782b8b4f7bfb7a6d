"""The parallel layout and training settings of one run, and its validation against a model and a system."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from .errors import Count, Flag, InputError, Schema
from .hardware import System
from .models import ModelConfig
from .stack import DEFAULT_STACK, STACKS, load_stack

Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8", "fp4"]
Schedule = Literal["1f1b", "interleaved", "gpipe"]


class Plan(Schema):
    """A layout (tp x pp x dp x cp [x vpp]) plus batch, recompute, ZeRO and precision choices.

    Device order follows Megatron-LM (tp innermost, then cp, dp, pp), which decides which network tier
    each process group spans. `resolve` fills the inferred fields (dp or gpus, schedule) and checks the plan
    against a model and a system.
    """

    gpus: Count | None = Field(None, description="devices in the job; inferred as tp*pp*cp*dp when omitted")
    tp: Count = Field(1, description="tensor-parallel size; divides n_heads, n_kv_heads and ffn_hidden")
    pp: Count = Field(1, description="pipeline-parallel stages; at most n_layers")
    dp: Count | None = Field(None, description="data-parallel size; inferred as gpus / (tp*pp*cp)")
    cp: Count = Field(1, description="context-parallel size (splits the sequence); divides seq_len")
    vpp: Count = Field(1, description="interleaved virtual pipeline chunks per rank")
    micro_batch: Count = Field(description="sequences per micro-batch per data-parallel rank")
    global_batch: Count = Field(description="sequences per optimizer step")
    seq_len: Count = Field(description="tokens per sequence; at most max_seq_len for learned positions")
    recompute: Recompute = Field("none", description="activation recomputation in the backward: none, selective "
                                                     "(attention core), full (every layer)")
    sequence_parallel: Flag = Field(False, description="split norms, residuals and dropout over tp (Korthikanti et "
                                                       "al. 2022); resolve turns it off at tp = 1")
    zero: Literal[0, 1, 2, 3] = Field(0, description="1: optimizer state sharded; 2: + gradients; 3: + parameters")
    precision: Precision = Field("bf16", description="GEMM precision; everything else stays bf16")
    schedule: Schedule | None = Field(None, description="pipeline schedule; default interleaved if vpp > 1 else 1f1b")
    attention: Literal["flash", "unfused"] = Field(
        "flash", description="fused (FlashAttention-style) kernel, or unfused QK^T / softmax / dropout / AV"
    )
    grad_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="gradient accumulation and reduction dtype (Megatron bf16 and torch FSDP default: fp32)"
    )
    overlap_dp_comm: Flag = Field(True, description="data-parallel / ZeRO collectives overlap with compute")
    stack: str = Field(DEFAULT_STACK, description=f"software stack that runs the plan, one of {', '.join(STACKS)} "
                                                  "(perfmodel.stack: kernels, overlap, optimizer, host costs); "
                                                  f"default {DEFAULT_STACK}")
    stage_layers: list[Count] | None = Field(
        None, description="layers on each pipeline stage, first to last; default: as even as possible, the "
                          "remainder on middle stages (default_stage_layers)")

    def _resolved(self) -> int:
        if self.dp is None:
            raise InputError("plan.dp is not known yet: pass gpus and dp, or use perfmodel.estimate / plan.resolve")
        return self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step (gradient-accumulation steps): global / (dp * micro_batch)."""
        return self.global_batch // (self._resolved() * self.micro_batch)

    @property
    def tokens_per_microbatch(self) -> float:
        """Tokens of one micro-batch on one device: micro_batch * seq_len / cp (context parallel splits the sequence)."""
        return self.micro_batch * self.seq_len / self.cp

    @property
    def sp_divisor(self) -> int:
        """What sequence parallelism divides norm/residual/dropout work and activations by: tp with SP, else 1."""
        return self.tp if self.sequence_parallel else 1

    @property
    def zero_shard(self) -> int:
        """Ranks that hold replicas of the same weights, over which ZeRO shards state: dp * cp."""
        return self._resolved() * self.cp

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


def default_stage_layers(n_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage when a plan does not give them: as even as possible, the remainder on middle
    stages first (the first stage also holds the embedding, the last the LM head and loss), then the last,
    then the first. Llama 3 405B: 126 layers over 16 stages gives 7, 8 x 14, 7 (Dubey et al. 2024, Sec. 3.3.2).
    """
    if pp == 1:
        return [n_layers]
    q, r = divmod(n_layers, pp)
    middle_extra = min(r, pp - 2)
    rest = r - middle_extra  # 0, 1 or 2 extra layers: the last stage's, then the first's
    return ([q + (rest >= 2)] + [q + (i < middle_extra) for i in range(pp - 2)] + [q + (rest >= 1)])


def divisors(n: int) -> list[int]:
    """Every positive divisor of n, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})


def _fmt(vals: list[int], limit: int = 12) -> str:
    return ", ".join(map(str, vals[:limit])) + (", ..." if len(vals) > limit else "")


def resolve(plan: Plan, model: ModelConfig, system: System) -> Plan:
    """Fill inferred fields and check the plan; InputError (field, value, what is valid) on the first problem."""
    p = plan.model_dump()
    tp, pp, cp = p["tp"], p["pp"], p["cp"]
    mp = tp * pp * cp
    if p["gpus"] is None and p["dp"] is None:
        raise InputError("plan needs gpus or dp (gpus = tp*pp*cp*dp)")
    if p["dp"] is None:
        if p["gpus"] % mp:
            valid = [g for g in range(mp, 4 * p["gpus"] + 1, mp)]
            near = [g for g in valid if abs(g - p["gpus"]) <= mp][:2]
            raise InputError(
                f"gpus = {p['gpus']} is not divisible by tp*pp*cp = {tp}*{pp}*{cp} = {mp}; "
                f"valid gpus: multiples of {mp} (e.g. {', '.join(map(str, near))})"
            )
        p["dp"] = p["gpus"] // mp
    if p["gpus"] is None:
        p["gpus"] = mp * p["dp"]
    if mp * p["dp"] != p["gpus"]:
        hint = f", or use dp = {p['gpus'] // mp}" if p["gpus"] % mp == 0 else ""
        raise InputError(
            f"tp*pp*cp*dp = {tp}*{pp}*{cp}*{p['dp']} = {mp * p['dp']} != gpus = {p['gpus']}; omit dp to infer it{hint}"
        )
    system.check_gpus(p["gpus"])

    heads, kv = model.n_heads, model.n_kv_heads
    if heads % tp:
        raise InputError(f"tp={tp} does not divide num_attention_heads = {heads}; valid tp: {_fmt(divisors(math.gcd(heads, kv)))}")
    if kv % tp:
        raise InputError(f"tp={tp} does not divide num_key_value_heads = {kv}; valid tp: {_fmt(divisors(math.gcd(heads, kv)))}")
    if model.ffn_hidden % tp:
        raise InputError(
            f"tp={tp} does not divide ffn_hidden = {model.ffn_hidden}; valid tp: "
            f"{_fmt(divisors(math.gcd(math.gcd(heads, kv), model.ffn_hidden)))}"
        )
    if pp > model.n_layers:
        raise InputError(f"pp={pp} is larger than n_layers = {model.n_layers}; valid pp: 1..{model.n_layers}")
    vpp = p["vpp"]
    if vpp > 1 and pp == 1:
        raise InputError(f"vpp={vpp} needs pipeline parallelism; valid with pp=1: vpp=1")
    if pp * vpp > model.n_layers:
        raise InputError(
            f"pp*vpp = {pp}*{vpp} = {pp * vpp} chunks exceeds n_layers = {model.n_layers}; valid vpp: 1..{model.n_layers // pp}"
        )
    split = p["stage_layers"]
    if split is not None and (len(split) != pp or sum(split) != model.n_layers or min(split) < vpp):
        raise InputError(
            f"stage_layers = {split} must list pp = {pp} stages of at least vpp = {vpp} layers summing to "
            f"n_layers = {model.n_layers}; e.g. {default_stage_layers(model.n_layers, pp)}"
        )
    sched = p["schedule"] or ("interleaved" if vpp > 1 else "1f1b")
    if sched == "interleaved" and vpp == 1:
        raise InputError("schedule=interleaved needs vpp > 1; valid with vpp=1: 1f1b, gpipe")
    if sched != "interleaved" and vpp > 1:
        raise InputError(f"schedule={sched} cannot run vpp={vpp} chunks per rank; valid with vpp > 1: interleaved")
    p["schedule"] = sched

    dpmb = p["dp"] * p["micro_batch"]
    if p["global_batch"] % dpmb:
        lo = p["global_batch"] // dpmb * dpmb
        eg = ", ".join(str(x) for x in (lo, lo + dpmb) if x > 0)
        raise InputError(
            f"global_batch = {p['global_batch']} is not divisible by dp*micro_batch = {p['dp']}*{p['micro_batch']} = {dpmb}; "
            f"valid global_batch: multiples of {dpmb} (e.g. {eg})"
        )
    m = p["global_batch"] // dpmb
    if sched == "interleaved" and m % pp:
        raise InputError(
            f"interleaved schedule needs the micro-batch count (global_batch/(dp*micro_batch) = {m}) to be a multiple "
            f"of pp = {pp}; valid global_batch: multiples of {dpmb * pp}"
        )
    s = p["seq_len"]
    if s % cp:
        raise InputError(f"cp={cp} does not divide seq_len = {s}; valid cp: {_fmt(divisors(s))}")
    if p["sequence_parallel"] and tp > 1 and (s // cp) % tp:
        raise InputError(f"sequence_parallel with tp={tp} splits the {s // cp} tokens of each context-parallel rank "
                         f"over tp, which tp does not divide; valid: seq_len a multiple of cp*tp = {cp * tp} "
                         "(Megatron-LM requires it too), or sequence parallelism off")
    if model.position == "learned" and s > model.max_seq_len:
        raise InputError(
            f"seq_len = {s} exceeds {model.name}'s learned position table (max_seq_len = {model.max_seq_len}); valid seq_len: 1..{model.max_seq_len}"
        )
    load_stack(p["stack"])  # refuses an unknown stack (naming the known ones) or a bad profile file
    system.accelerator.peak_flops(p["precision"])  # raises for a dtype the part lacks
    if p["precision"] not in system.efficiency.matmul_max:
        raise InputError(f"precision={p['precision']}: {system.name} has no matmul efficiency for it; valid: {', '.join(system.efficiency.matmul_max)}")
    if tp == 1:
        p["sequence_parallel"] = False
    return Plan(**p)


def layout_label(plan: Plan) -> str:
    """Short layout: the parallel axes > 1, ZeRO, SP, recompute and batch split, e.g. 'pp2 dp2 vpp2 mb1x4'."""
    parts = [f"{a}{getattr(plan, a)}" for a in ("pp", "dp", "cp", "tp") if (getattr(plan, a) or 1) > 1]
    if plan.vpp > 1:
        parts.append(f"vpp{plan.vpp}")
    if plan.sequence_parallel:
        parts.append("sp")
    if plan.zero:
        parts.append(f"z{plan.zero}")
    if plan.recompute != "none":
        parts.append(f"rc-{plan.recompute[:3]}")
    parts.append(f"mb{plan.micro_batch}x{plan.num_microbatches}")
    return " ".join(parts or ["1"])
