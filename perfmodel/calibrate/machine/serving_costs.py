"""Host costs and sustained fraction of the executor's serving loop (execute.inference), measured as
calibrate.host.costs measures training's.

A served step is a forward without autograd: fewer host operations per launch than a training step's, so the
training fit would overcharge it. `perfmodel calibrate` therefore also serves a probe model in the layouts its
processes allow, prices each decode step (one token a sequence: nothing to compute) with the spec just fitted and
no host costs, and fits what that leaves out (scipy.optimize.nnls):

    measured - predicted  ~  kernel_s * launches + collective_s * calls + attention_s * pairs
                             + attention_key_s * keys                       (serve.host_time.launches)

`pairs`: the (sequence, local head) pairs a decode step's attention works through: torch's CPU attention kernel
sets up each such block on its own (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp loops over batch x heads x
query blocks), which a step of many short sequences pays far more than its FLOPs; `keys`: the keys those pairs
read, a vector loop per query rather than the blocked GEMMs its FLOPs are priced at. The probes vary both (1, 4 and
16 sequences a replica, prompts of 16 and 96 tokens), the tp group (1, 2, 4), and the weights a step reads (~2 MB
and, the wide probes, ~20 MB a rank: their GEMMs are priced from the GEMM table, which on a CPU times weights read
from beyond the caches as a served step reads them, calibrate.machine.bench.gemm). The prefills are not fitted:
their GEMMs and attention compute, which the sustained fraction below speaks for.

On a CPU it also serves `host_costs.SUSTAIN_MODEL` and takes the share of the microbenchmarked GEMM and attention
rates its prefill keeps, F / (measured - (predicted - F)) (`host_costs.sustained_fraction`). Its model, batch and
lengths are none of the serving sweep's (validate.sweeps.CPU_INFER), so nothing is fitted to the plans it is
checked on. The spec carries the result as `HostCosts.serving`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from ...spec.hardware.system import HostProbe, ServingHostCosts, SustainProbe, System
from ...spec.model.config import ModelConfig
from ...spec.serving.schema import ServePlan
from ...spec.stack.profile import EXECUTOR_STACK
from ..host.costs import PROBE_MODEL, SUSTAIN, SUSTAIN_MODEL, sustained_fraction

# The host probe at a head dim of 32, as the models served have (CPU attention's cost per (sequence, head) block
# depends on it), and 4 heads, so that its attention splits over tp 4 too; its GEMMs (128 wide) compute little
SERVE_PROBE_MODEL = ModelConfig(**PROBE_MODEL.model_dump() | {
    "name": "serve-host-probe", "hidden": 128, "n_heads": 4, "n_kv_heads": 4, "head_dim": None, "ffn_hidden": 256})
ROUNDS = {False: 5, True: 3}  # rounds per probe (the first is warm-up), full and quick
PROBE_IN, PROBE_LONG, PROBE_OUT = 16, 96, 16  # prompt and output tokens of the host probes (128 positions)
SUSTAIN_IN, SUSTAIN_OUT, SUSTAIN_BATCH = 160, 4, 2  # the fraction's prefill: 2 x 160 tokens a rank (no sweep's)


def probe_plans(nproc: int) -> dict[str, tuple]:
    """(model, ServePlan) of each probe: data-parallel replicas of 1, 4 and 16 sequences (16 also at a long
    prompt) and of 1 and 16 of the wider sustain-probe model, and tp 2 and 4 where the ranks split so; on a CPU
    also the sustained-fraction prefill (measure_serving_costs)."""
    def serve(model, prompt, out, batch, tp=1):
        return model, ServePlan(stack=EXECUTOR_STACK, tp=tp, dp=nproc // tp, concurrency=batch * nproc // tp,
                                input_len=prompt, output_len=out)

    plans = {f"dp-b{b}": serve(SERVE_PROBE_MODEL, PROBE_IN, PROBE_OUT, b) for b in (1, 4, 16)}
    plans["dp-b16-long"] = serve(SERVE_PROBE_MODEL, PROBE_LONG, PROBE_OUT, 16)
    for b in (1, 16):  # weights that do not stay in a core's caches: the sustain probe's model
        plans[f"wide-b{b}"] = serve(SUSTAIN_MODEL, PROBE_IN, PROBE_OUT, b)
    for tp in (2, 4):  # the tensor-parallel groups the ranks allow (a collective's host cost grows with its group)
        if nproc % tp == 0:
            plans[f"tp{tp}"] = serve(SERVE_PROBE_MODEL, PROBE_IN, PROBE_OUT, 2, tp=tp)
    return plans


def measure_serving_costs(system: System, nproc: int, device: str, echo=None, quick: bool = False) -> System:
    """Serve the probes on `nproc` processes, fit the serving host costs and (CPU) the sustained fraction;
    `system` with them as `host_costs.serving` (module docstring). `system` carries the training host costs."""
    from ...execute.serve_plans import serve_plans
    from ...serve.batching import static_batch
    from ...spec.hardware.kernel_tables import write_with_tables
    from ...spec.serving.files import ServePlanFile
    from ...spec.serving.schema import load_serving_stack, resolve_serve

    rounds = ROUNDS[quick]
    stack = load_serving_stack(EXECUTOR_STACK)
    bare = system.model_copy(update={"host_costs": None, "efficiency": system.efficiency.model_copy(
        update={"sustained_fraction": 1.0})})
    plans = probe_plans(nproc)
    if device == "cpu":
        plans[SUSTAIN] = (SUSTAIN_MODEL, ServePlan(stack=EXECUTOR_STACK, dp=nproc, concurrency=SUSTAIN_BATCH * nproc,
                                                   input_len=SUSTAIN_IN, output_len=SUSTAIN_OUT))
    files = {}
    with tempfile.TemporaryDirectory(prefix="perfmodel-serve-host-") as tmp:
        paths = []
        for name, (model, plan) in plans.items():
            plan = resolve_serve(plan, model)
            files[name] = ServePlanFile(created_by="perfmodel calibrate (serving host probe)", model=model,
                                        hardware=bare, plan=plan, predicted=static_batch(model, bare, plan))
            paths.append(write_with_tables(files[name], Path(tmp) / f"{name}.json", "serving probe"))
        measured = dict(zip(plans, serve_plans(paths, nproc, device=device, rounds=rounds, warmup=1,
                                               log_dir=Path(tmp), echo=echo)))
    serving = fit_host(files, measured, bare, 1.0, stack, nproc, device, rounds)
    if SUSTAIN in files:  # the fraction, then the host costs again with the decode steps priced at it (twice)
        for _ in range(2):
            serving = with_fraction(serving, files[SUSTAIN], measured[SUSTAIN], bare, system, nproc, device)
            refit = fit_host(files, measured, bare, serving.sustained_fraction, stack, nproc, device, rounds)
            serving = refit.model_copy(update={k: getattr(serving, k) for k in ("sustained_fraction", "sustain")}
                                       | {"sources": {**refit.sources, "sustained_fraction":
                                                      serving.sources["sustained_fraction"]}})
    return system.model_copy(update={"host_costs": system.host_costs.model_copy(update={"serving": serving})})


def fit_host(files: dict, measured: dict, bare: System, fraction: float, stack, nproc: int, device: str,
             rounds: int) -> ServingHostCosts:
    """The four host costs by non-negative least squares on the probes' decode steps, each priced with `bare` (no
    host costs) at sustained fraction `fraction` (module docstring)."""
    from ...serve.batching import static_batch
    from ...serve.host_time import launches

    priced = bare.model_copy(update={"efficiency": bare.efficiency.model_copy(
        update={"sustained_fraction": fraction})})
    probes = []
    for name, pf in files.items():
        if name == SUSTAIN:
            continue
        batch = pf.batch
        context = pf.plan.input_len + pf.plan.output_len / 2  # a decode step's mean keys (serve.batching)
        kernels, calls, n, keys = launches(pf.model, pf.plan, stack, batch, batch * context)
        probes.append(HostProbe(name=f"{name} decode", measured_s=measured[name].decode_time_s,
                                predicted_s=static_batch(pf.model, priced, pf.plan).decode_s, kernels=kernels,
                                calls=calls, pairs=n, keys=keys))
    a = np.array([[p.kernels, p.calls, p.pairs, p.keys] for p in probes])
    gap = np.array([p.measured_s - p.predicted_s for p in probes])
    (kernel_s, collective_s, attention_s, key_s), _ = nnls(a, np.maximum(gap, 0.0))
    how = (f"fitted: perfmodel calibrate served {SERVE_PROBE_MODEL.name} on {nproc} {device} process(es) in "
           f"{len(probes)} layouts ({', '.join(n for n in files if n != SUSTAIN)}: {SERVE_PROBE_MODEL.name}, "
           f"wide: {SUSTAIN_MODEL.name}; {PROBE_IN} or {PROBE_LONG} "
           f"prompt and {PROBE_OUT} output tokens, {rounds} rounds, medians after the first), and non-negative "
           "least squares of measured - predicted decode step time (priced at the served sustained fraction) on "
           "launches, calls, attention (sequence, head) pairs and the keys they read per step "
           "(calibrate.machine.serving_costs)")
    return ServingHostCosts(kernel_s=float(kernel_s), collective_s=float(collective_s),
                            attention_s=float(attention_s), attention_key_s=float(key_s), probes=probes,
                            sources={k: how for k in ("kernel_s", "collective_s", "attention_s", "attention_key_s")})


def with_fraction(serving: ServingHostCosts, pf, measured, bare: System, system: System, nproc: int,
                  device: str) -> ServingHostCosts:
    """`serving` with the sustained fraction of the sustain probe's prefill, priced with these host costs at the
    microbenchmark rates (module docstring)."""
    from ...serve.batching import static_batch

    unscaled = serving.model_copy(update={"sustained_fraction": None})
    charged = bare.model_copy(update={"host_costs": system.host_costs.model_copy(update={"serving": unscaled})})
    pred = static_batch(pf.model, charged, pf.plan)
    parts = pred.prefill_parts
    compute = parts["gemm"] + parts["attention"] + parts["lm_head"]
    got = measured.prefill_time_s
    frac = sustained_fraction(got, pred.prefill_s, compute)
    why = (f"measured end to end: perfmodel calibrate served {pf.model.name} ({pf.model.n_layers} layers, hidden "
           f"{pf.model.hidden}; {SUSTAIN_BATCH} prompts of {SUSTAIN_IN} tokens per rank: a model and batch of no "
           f"validation sweep) data parallel over {nproc} {device} process(es): prefill {got * 1e3:.1f} ms where "
           f"the serving cost at the microbenchmark rates says {pred.prefill_s * 1e3:.1f} ms, {compute * 1e3:.1f} "
           "ms of it GEMMs and attention; fraction = F / (measured - (predicted - F)) "
           "(calibrate.host.costs.sustained_fraction)")
    return serving.model_copy(update={
        "sustained_fraction": round(frac, 4), "sources": {**serving.sources, "sustained_fraction": why},
        "sustain": SustainProbe(model=pf.model.name, tokens_per_rank=SUSTAIN_BATCH * SUSTAIN_IN, measured_s=got,
                                predicted_s=pred.prefill_s, compute_s=compute)})
