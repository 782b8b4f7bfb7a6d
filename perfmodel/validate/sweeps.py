"""Built-in validation sweeps: models, process counts and named plans that `perfmodel validate --sweep NAME` runs.

Each sweep is data (pydantic): its models are defined inline with dropout 0 (the executor runs no dropout, and
the cost model's dropout time should not be in the prediction either), its plans name a model and give a
layout. A sweep fixes the process count and the device type; `validate` writes one plan file per entry for the
hardware spec it predicts with and runs them all in one launch. This module imports no torch and no cost model.

- `cpu-smoke`: 4 CPU processes (gloo), tiny GPT-2- and Llama-like models; every kind of layout the executor
  applies. A layout with three mesh axes > 1 needs at least 2 x 2 x 2 = 8 ranks, so on 4 ranks the sweep
  covers the three pairwise compositions instead (pp x dp, dp x tp, pp x tp); `cpu-3d` runs the genuine
  pp2 x dp2 x tp2 layout on 8 processes (slow on a 2-core machine: ~1-2 min, not part of the CPU target).
- `gpu-single`: one GPU in bf16; GPT-2 124M-1.5B (HuggingFace shapes, seq 1024) and a Llama-3.2-1B-shaped
  model; micro-batch, recompute and gradient-accumulation variants, each predicted to fit in 80 GiB.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..errors import InputError
from ..types import Count, Schema
from ..spec.model.config import ModelConfig
from ..spec.plan.layout import Plan
from ..spec.serving.schema import ServePlan
from ..spec.stack.profile import EXECUTOR_STACK  # every sweep runs on perfmodel's own executor


class SweepPlan(Schema):
    """One named plan of a sweep: which of the sweep's models it trains, and how."""

    name: str = Field(description="short file-name-safe label, e.g. 'dp4' or 'pp2-dp2-interleaved'")
    model: str = Field(description="key into Sweep.models")
    plan: Plan
    kind: str = Field(description="what the plan exercises, e.g. 'DP', 'FSDP', 'TP+SP', 'PP 1F1B', 'recompute'")


class Targets(Schema):
    """The accuracy a sweep's predictions are held to (reported by the validation benchmark, not asserted)."""

    step_mape_pct: float = Field(description="step-time MAPE at most this, percent")
    spearman: float | None = Field(None, description="Spearman rank correlation of predicted vs measured step "
                                                     "time at least this")
    memory_mape_pct: float | None = Field(None, description="peak-memory MAPE at most this, percent (GPU only)")


class Sweep(Schema):
    name: str
    description: str
    device: Literal["cpu", "cuda"]
    nproc: Count = Field(description="processes (ranks) every plan of the sweep uses")
    models: dict[str, ModelConfig]
    plans: list[SweepPlan]
    steps: Count = Field(8, description="default steps per plan, warm-up included")
    warmup: int = Field(3, ge=0, description="default leading steps left out of the median")
    rounds: Count = Field(1, description="default times the plans run over, interleaved (a shared machine's load "
                                         "comes and goes over minutes: every plan then sees some of it)")
    targets: Targets | None = None
    trace_plan: str | None = Field(None, description="the plan whose trace `validate --calibrate-from-trace` "
                                                     "calibrates from by default (None: the first)")

    def model_of(self, entry: SweepPlan) -> ModelConfig:
        return self.models[entry.model]


# ---------------------------------------------------------------------------------------------------------
# cpu-smoke: tiny models sized so each plan's step takes ~0.2-1.5 s with 4 ranks on 2 cores (TORCH_NOTES.md:
# 4 layers, hidden 256, 8 sequences of 128: DDP ~0.3 s, FSDP2 ~0.5 s, TP+SP ~1.2 s, PP 1F1B ~0.26 s). TP on CPU
# is bound by the count of small gloo collectives, so TP plans take their batch in one micro-batch where they can.
# ---------------------------------------------------------------------------------------------------------
TINY_GPT2 = ModelConfig(
    name="tiny-gpt2", n_layers=4, hidden=256, n_heads=8, ffn_hidden=1024, vocab=8192, max_seq_len=128,
    mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all", dropout=0.0,
    source="GPT-2 architecture (Radford et al. 2019) at a size for CPU validation runs")
TINY_LLAMA = ModelConfig(
    name="tiny-llama", n_layers=4, hidden=256, n_heads=8, n_kv_heads=4, ffn_hidden=704, vocab=8192,
    max_seq_len=128, mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=False, linear_bias="none",
    dropout=0.0, source="Llama architecture (Touvron et al. 2023; GQA as Llama 3) at a size for CPU validation "
                        "runs; ffn 704 ~ 8/3 x 256 rounded up to a multiple of 64")

_SEQ, _GB = 128, 8  # every cpu-smoke plan trains the same 8 x 128 tokens per step


def _cpu(name: str, kind: str, model: str = "tiny-gpt2", **plan) -> SweepPlan:
    plan.setdefault("micro_batch", 2)
    return SweepPlan(name=name, model=model, kind=kind,
                     plan=Plan(stack=EXECUTOR_STACK, gpus=4, global_batch=_GB, seq_len=_SEQ, **plan))


CPU_SMOKE = Sweep(
    name="cpu-smoke",
    description="4 CPU processes (gloo), fp32: DP, FSDP, TP+SP, PP 1F1B and interleaved, 2-D compositions, "
                "recompute and micro-batch variants of two tiny models; 8 x 128 tokens per step",
    device="cpu", nproc=4, models={"tiny-gpt2": TINY_GPT2, "tiny-llama": TINY_LLAMA},
    plans=[
        _cpu("dp4", "DP (DDP, ZeRO-0)", dp=4),
        _cpu("dp4-mb1", "DP, micro-batch 1 (2 accumulation steps)", dp=4, micro_batch=1),
        _cpu("dp4-full", "DP, full recompute", dp=4, recompute="full"),
        _cpu("fsdp4", "FSDP (ZeRO-3)", dp=4, zero=3),
        _cpu("tp4-sp", "TP+SP", tp=4, sequence_parallel=True, micro_batch=8),
        _cpu("pp4-1f1b", "PP 1F1B", pp=4, micro_batch=1),
        _cpu("pp2-dp2-interleaved", "PP interleaved (vpp 2) x DP", pp=2, dp=2, vpp=2, micro_batch=1),
        _cpu("pp2-dp2", "2-D: PP 1F1B x DP", pp=2, dp=2, micro_batch=1),
        _cpu("fsdp2-tp2", "2-D: FSDP x TP+SP", dp=2, tp=2, sequence_parallel=True, zero=3, micro_batch=4),
        _cpu("pp2-tp2", "2-D: PP 1F1B x TP+SP", pp=2, tp=2, sequence_parallel=True),
        _cpu("llama-fsdp4-sel", "FSDP, selective recompute (Llama, GQA)", model="tiny-llama", dp=4, zero=3,
             recompute="selective"),
    ],
    steps=6, warmup=2, rounds=3,  # 12 timed steps per plan, spread over the sweep's minutes
    targets=Targets(step_mape_pct=20, spearman=0.8),
    trace_plan="dp4",  # the plainest layout: its trace holds the GEMMs, norms and all-reduces the others reuse
)

CPU_3D = Sweep(
    name="cpu-3d",
    description="8 CPU processes: the genuine 3-D layout pp2 x dp2 x tp2 (4 ranks cannot hold three axes > 1)",
    device="cpu", nproc=8, models={"tiny-gpt2": TINY_GPT2},
    plans=[SweepPlan(name="pp2-dp2-tp2", model="tiny-gpt2", kind="3-D: PP x DP x TP+SP",
                     plan=Plan(stack=EXECUTOR_STACK, gpus=8, pp=2, dp=2, tp=2, sequence_parallel=True,
                               micro_batch=2, global_batch=_GB, seq_len=_SEQ)),
           SweepPlan(name="pp2-fsdp2-tp2", model="tiny-gpt2", kind="3-D: PP x FSDP x TP+SP",
                     plan=Plan(stack=EXECUTOR_STACK, gpus=8, pp=2, dp=2, tp=2, sequence_parallel=True, zero=3,
                               micro_batch=2, global_batch=_GB, seq_len=_SEQ))],
)


# ---------------------------------------------------------------------------------------------------------
# gpu-single: one GPU, bf16 autocast, real model shapes.
# ---------------------------------------------------------------------------------------------------------
def _gpt2(name: str, n_layers: int, hidden: int, n_heads: int) -> ModelConfig:
    """GPT-2 as the openai-community/gpt2* HuggingFace configs: vocab 50257, 1024 positions, tied embeddings,
    biases everywhere, 4h MLP; dropout 0 (the executor runs none)."""
    return ModelConfig(name=name, n_layers=n_layers, hidden=hidden, n_heads=n_heads, ffn_hidden=4 * hidden,
                       vocab=50257, max_seq_len=1024, mlp="gelu", norm="layernorm", position="learned",
                       tie_embeddings=True, linear_bias="all", dropout=0.0,
                       source="openai-community/gpt2* HuggingFace configs (Radford et al. 2019), dropout 0")


GPU_MODELS = {
    "gpt2-124m": _gpt2("gpt2-124m", 12, 768, 12),
    "gpt2-355m": _gpt2("gpt2-355m", 24, 1024, 16),
    "gpt2-774m": _gpt2("gpt2-774m", 36, 1280, 20),
    "gpt2-1.5b": _gpt2("gpt2-1.5b", 48, 1600, 25),
    "llama-1b": ModelConfig(
        name="llama-1b", n_layers=16, hidden=2048, n_heads=32, n_kv_heads=8, ffn_hidden=8192, vocab=128256,
        max_seq_len=131072, mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=True,
        linear_bias="none", dropout=0.0, source="meta-llama/Llama-3.2-1B config.json (1.24B parameters)"),
}


def _gpu(name: str, model: str, kind: str, micro_batch: int, global_batch: int, seq_len: int = 1024,
         **plan) -> SweepPlan:
    return SweepPlan(name=name, model=model, kind=kind,
                     plan=Plan(stack=EXECUTOR_STACK, gpus=1, micro_batch=micro_batch, global_batch=global_batch,
                               seq_len=seq_len, precision="bf16", **plan))


GPU_SINGLE = Sweep(
    name="gpu-single",
    description="one GPU, bf16 autocast: GPT-2 124M-1.5B (seq 1024) and a Llama-3.2-1B-shaped model (seq 2048); "
                "micro-batch, recompute and gradient-accumulation variants",
    device="cuda", nproc=1, models=GPU_MODELS,
    plans=[
        _gpu("gpt2-124m-mb1", "gpt2-124m", "micro-batch 1 (host-bound)", 1, 1),
        _gpu("gpt2-124m-mb2-acc4", "gpt2-124m", "micro-batch 2, accumulation x4 (host-bound)", 2, 8),
        _gpu("gpt2-124m-mb8", "gpt2-124m", "baseline", 8, 8),
        _gpu("gpt2-124m-mb16", "gpt2-124m", "micro-batch 16", 16, 16),
        _gpu("gpt2-124m-mb8-acc4", "gpt2-124m", "accumulation x4", 8, 32),
        _gpu("gpt2-355m-mb8", "gpt2-355m", "baseline", 8, 8),
        _gpu("gpt2-355m-mb8-sel", "gpt2-355m", "selective recompute", 8, 8, recompute="selective"),
        _gpu("gpt2-355m-mb4-acc4", "gpt2-355m", "micro-batch 4, accumulation x4", 4, 16),
        _gpu("gpt2-774m-mb4-acc2", "gpt2-774m", "accumulation x2", 4, 8),
        _gpu("gpt2-774m-mb8-full", "gpt2-774m", "full recompute", 8, 8, recompute="full"),
        _gpu("gpt2-1.5b-mb4", "gpt2-1.5b", "baseline", 4, 4),
        _gpu("gpt2-1.5b-mb8-full", "gpt2-1.5b", "full recompute", 8, 8, recompute="full"),
        _gpu("llama-1b-mb4", "llama-1b", "baseline (seq 2048)", 4, 4, seq_len=2048),
        _gpu("llama-1b-mb4-sel-acc2", "llama-1b", "selective recompute, accumulation x2", 4, 8, seq_len=2048,
             recompute="selective"),
    ],
    steps=20, warmup=5,  # steps of 20-250 ms: more of them for a stable median
    targets=Targets(step_mape_pct=10, memory_mape_pct=5),
    trace_plan="gpt2-355m-mb8",  # a mid-sized, device-bound baseline (the trace-calibration benchmark's)
)

SWEEPS: dict[str, Sweep] = {s.name: s for s in (CPU_SMOKE, CPU_3D, GPU_SINGLE)}


# ---------------------------------------------------------------------------------------------------------
# cpu-infer: serving (perfmodel.execute.inference) on 4 CPU processes: a static batch prefilled, then decoded.
# ---------------------------------------------------------------------------------------------------------
class ServeSweepPlan(Schema):
    """One named serving plan of a sweep: which model it serves, and how."""

    name: str
    model: str = Field(description="key into ServeSweep.models")
    plan: ServePlan
    kind: str


class ServeSweep(Schema):
    name: str
    description: str
    device: Literal["cpu", "cuda"]
    nproc: Count
    models: dict[str, ModelConfig]
    plans: list[ServeSweepPlan]
    rounds: Count = Field(4, description="times each plan serves its batch; the first is warm-up")
    warmup: int = Field(1, ge=0)
    target_mape_pct: float = Field(description="prefill and decode MAPE at most this, percent (reported, not "
                                               "asserted)")

    def model_of(self, entry: ServeSweepPlan) -> ModelConfig:
        return self.models[entry.model]


# The training sweep's tiny models with room for a prompt and its output (their 128 positions hold neither), and
# a wider GPT-2 whose decode reads ~0.2 GB of weights per step: weight-read-bound, as decode is on a GPU.
SERVE_MODELS = {
    "tiny-gpt2": ModelConfig(**TINY_GPT2.model_dump() | {"max_seq_len": 512}),
    "tiny-llama": ModelConfig(**TINY_LLAMA.model_dump() | {"max_seq_len": 512}),
    "small-gpt2": ModelConfig(**TINY_GPT2.model_dump() | {
        "name": "small-gpt2", "n_layers": 6, "hidden": 768, "n_heads": 12, "n_kv_heads": 12, "ffn_hidden": 3072,
        "max_seq_len": 512,
        "source": "GPT-2 small's width (Radford et al. 2019) at 6 layers and an 8192 vocabulary: a CPU rank's "
                  "decode reads its weights, as a GPU's does"}),
}


def _serve(name: str, kind: str, model: str, concurrency: int, input_len: int, output_len: int = 32,
           **layout) -> ServeSweepPlan:
    return ServeSweepPlan(name=name, model=model, kind=kind, plan=ServePlan(
        stack="plain-torch", concurrency=concurrency, input_len=input_len, output_len=output_len, **layout))


CPU_INFER = ServeSweep(
    name="cpu-infer",
    description="4 CPU processes (gloo), fp32: static batches prefilled then decoded with a KV cache, by data- and "
                "tensor-parallel replicas of three small models; 32 output tokens",
    device="cpu", nproc=4, models=SERVE_MODELS,
    plans=[
        _serve("gpt2-dp4-b1", "DP, one sequence per replica", "tiny-gpt2", 4, 64, dp=4),
        _serve("gpt2-dp4-b8", "DP, 8 sequences per replica", "tiny-gpt2", 32, 128, dp=4),
        _serve("gpt2-tp4", "TP 4", "tiny-gpt2", 8, 128, tp=4),
        _serve("gpt2-tp2-dp2", "TP 2 x DP 2", "tiny-gpt2", 16, 64, tp=2, dp=2),
        _serve("llama-dp4-b16", "DP, 16 sequences per replica (GQA, rotary)", "tiny-llama", 64, 64, dp=4),
        _serve("llama-tp2-dp2", "TP 2 x DP 2 (GQA, rotary)", "tiny-llama", 8, 128, tp=2, dp=2),
        _serve("small-dp4-b2", "DP, weight-read-bound decode", "small-gpt2", 8, 256, dp=4),
        _serve("small-tp4-b8", "TP 4, weight-read-bound decode", "small-gpt2", 8, 128, tp=4),
    ],
    target_mape_pct=20,
)

SERVE_SWEEPS: dict[str, ServeSweep] = {CPU_INFER.name: CPU_INFER}
SWEEP_NAMES = (*SWEEPS, *SERVE_SWEEPS)  # what --sweep takes


def get_sweep(name: str) -> Sweep:
    """A built-in sweep by name; InputError listing the valid names otherwise."""
    if name not in SWEEPS:
        raise InputError(f"sweep = {name!r} is not a built-in sweep; valid: {', '.join(SWEEP_NAMES)}")
    return SWEEPS[name]
