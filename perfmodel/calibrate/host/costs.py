"""Host costs of the executor's stack: seconds per operator launch and per collective call.

Eager PyTorch dispatches every operator from the host (Python, autograd, DTensor's redistribution, FSDP's
hooks, gloo's call set-up). Where the kernels are large the device hides that time; on a CPU testbed, or with
small kernels, it adds to every step, and the microbenchmarks (GEMMs, attention, collectives in a tight loop)
never see it. So `perfmodel calibrate` runs the executor itself (`execute.run_plans.run_plans`) on a model too small to
compute (hidden 16, vocab 64) in each layout its processes allow, prices each probe with the spec just fitted,
and fits two non-negative costs to what the estimate leaves out (scipy.optimize.nnls):

    measured - predicted  ~  kernel_s * kernels + collective_s * calls

`kernels` and `calls`: what the host dispatches per step on the slowest stage (cost.compute.units.host_counts). The
spec then carries them for the executor's stack (`spec.hardware.system.HostCosts`), and the estimate charges them to every
plan of that stack (cost.host.launch_queue.host_rates: before the stack profile's rates).

On a CPU the same launch also runs one model large enough to compute (`SUSTAIN_MODEL`, data parallel over all
ranks) and derives `Efficiency.sustained_fraction` from it, as the GPU specs derive theirs from a published
end-to-end run (the sustained-fraction benchmark): the fraction of the microbenchmarked GEMM and attention rates
a whole training step keeps once every rank computes, communicates and allocates at once,

    sustained_fraction = F / (measured - (predicted - F))            F: the step's GEMM + attention seconds

The probe's model and layout are none of a validation sweep's (perfmodel.validate.sweeps), so the fraction is measured
beside the plans it is checked on, never fitted to them. On CUDA a model this small is launch-bound and says
nothing of sustained compute: the base spec's fraction stands.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from ...spec.hardware.system import HostCosts, HostProbe, SustainProbe, System
from ...spec.model.config import ModelConfig
from ...spec.plan.layout import Plan
from ...spec.stack.profile import EXECUTOR_STACK
from ..runs.from_runs import BOUNDS

PROBE_MODEL = ModelConfig(
    name="host-probe", n_layers=4, hidden=16, n_heads=2, ffn_hidden=64, vocab=64, max_seq_len=128, mlp="gelu",
    norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all", dropout=0.0,
    source="a GPT-2-style model too small to compute: its step time is the host's (calibrate.host.costs)")
# Large enough that GEMMs are most of its step on a CPU rank (~0.2-0.5 s), and unlike any sweep plan (perfmodel.validate.sweeps:
# hidden 256, vocab 8192, 128 tokens) so the fraction is not measured on a plan it is checked against.
SUSTAIN_MODEL = ModelConfig(
    name="sustain-probe", n_layers=3, hidden=320, n_heads=5, ffn_hidden=1280, vocab=4096, max_seq_len=192,
    mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all", dropout=0.0,
    source="a GPT-2-style model whose step is mostly GEMMs on a CPU rank: the sustained-fraction probe "
           "(calibrate.host)")
SUSTAIN = "sustain"
STEPS, WARMUP = 6, 2  # the step time as validate reads it: the lowest round's median (Measurement)
ROUNDS = {False: 3, True: 2}  # rounds over the probes, full and quick (calibrate --quick)


def probe_plans(nproc: int) -> dict[str, Plan]:
    """The layouts `nproc` processes can run, each dispatching a different mix of launches and calls: data
    parallel with one and with four micro-batches, FSDP, tensor + sequence parallel (DTensor), a pipeline."""
    batch = 8 if 8 % nproc == 0 else 2 * nproc  # sequences per step: a multiple of the ranks
    base = dict(stack=EXECUTOR_STACK, gpus=nproc, global_batch=batch, seq_len=128)
    out = {"dp": Plan(**base, micro_batch=batch // nproc), "dp-accumulate": Plan(**base, micro_batch=1)}
    if nproc > 1 and 8 % nproc == 0:
        out["fsdp"] = Plan(**base, micro_batch=batch // nproc, zero=3)
        out["pp"] = Plan(**base, pp=2 if nproc % 2 == 0 else nproc, micro_batch=1)
    if nproc % 2 == 0:
        out["tp-sp"] = Plan(**base, tp=2, sequence_parallel=True, micro_batch=2)
    return out


def sustain_plan(nproc: int) -> Plan:
    """The sustained-fraction probe's layout: plain data parallelism over every rank (ZeRO 0), one sequence of
    192 tokens per rank (no sweep plan trains that length), the executor's least modelled path."""
    return Plan(stack=EXECUTOR_STACK, gpus=nproc, global_batch=nproc, micro_batch=1, seq_len=192)


def sustained_fraction(measured_s: float, predicted_s: float, compute_s: float) -> float:
    """F / (measured - (predicted - F)) with F = `compute_s`, the GEMM and attention seconds the prediction made at
    a sustained fraction of 1 (see the module docstring); clipped to [1/20, 1], the 20x bound calibrate --from-runs
    puts on a fitted speed (runs.BOUNDS) (dimensionless)."""
    rest = predicted_s - compute_s
    if measured_s <= rest:  # the step is all host and communication: nothing to say about compute
        return 1.0
    return float(min(1.0, max(1.0 / BOUNDS[1][0], compute_s / (measured_s - rest))))


def measure_executor_costs(system: System, nproc: int, device: str, echo=None, quick: bool = False) -> System:
    """Run the probes on `nproc` processes (ROUNDS[quick] rounds), price them with `system`, fit the two host
    costs and, on a CPU, the sustained fraction (see the module docstring); `system` with them."""
    rounds = ROUNDS[quick]
    from ...cost.estimate import evaluate_plan
    from ...execute.run_plans import run_plans
    from ...spec.plan.file import write_plan_file
    from ...search.plan_writer import plan_file

    # priced with no host costs and at the microbenchmark rates (sustained fraction 1): what the probes measure.
    # Zero measured costs for the executor's stack, not none: with none the stack profile's own rates would price
    # the host (cost.host.launch_queue.host_rates), and the gap fitted below would leave them out.
    none = HostCosts(stack=EXECUTOR_STACK, kernel_s=0.0, collective_s=0.0, probes=[])
    bare = system.model_copy(update={"host_costs": none, "efficiency": system.efficiency.model_copy(
        update={"sustained_fraction": 1.0})})
    plans = {name: (PROBE_MODEL, plan) for name, plan in probe_plans(nproc).items()}
    if device == "cpu":
        plans[SUSTAIN] = (SUSTAIN_MODEL, sustain_plan(nproc))
    with tempfile.TemporaryDirectory(prefix="perfmodel-host-") as tmp:
        paths, steps = [], []
        for name, (model, plan) in plans.items():
            step, est = evaluate_plan(model, bare, plan)
            pf = plan_file(model, bare, est.plan, "perfmodel calibrate (host probe)", evaluated=(step, est))
            paths.append(write_plan_file(pf, Path(tmp) / f"{name}.json"))
            steps.append((step, est))
        measured = run_plans(paths, nproc, device=device, steps=STEPS, warmup=WARMUP, rounds=rounds,
                             log_dir=Path(tmp), echo=echo, memory=False)  # step times only
    times = {name: m.step_time_s for name, m in zip(plans, measured)}
    probes = []
    for name, (step, est) in zip(plans, steps):
        if name == SUSTAIN:
            continue
        probes.append(HostProbe(name=name, measured_s=times[name], predicted_s=est.step_time_s,
                                kernels=float(step.host_kernels[0]), calls=float(step.host_calls[0])))
    a = np.array([[p.kernels, p.calls] for p in probes])
    gap = np.array([p.measured_s - p.predicted_s for p in probes])
    (kernel_s, collective_s), _ = nnls(a, np.maximum(gap, 0.0))
    how = (f"fitted: perfmodel calibrate ran the executor on {nproc} {device} process(es) over "
           f"{len(probes)} layouts of {PROBE_MODEL.name} ({', '.join(probe_plans(nproc))}; {rounds} rounds of {STEPS} "
           f"steps, the lowest round's median after {WARMUP}), and non-negative least squares of measured - "
           "predicted step time on launches and calls per step (calibrate.host.costs)")
    costs = HostCosts(stack=EXECUTOR_STACK, kernel_s=float(kernel_s), collective_s=float(collective_s),
                      probes=probes, sources={"kernel_s": how, "collective_s": how})
    system = system.model_copy(update={"host_costs": costs})
    if SUSTAIN not in plans:
        return system
    model, plan = plans[SUSTAIN]
    # host costs charged, compute at the microbenchmark rates
    est = evaluate_plan(model, bare.model_copy(update={"host_costs": costs}), plan)[1]
    compute = est.time_s.gemm + est.time_s.attention
    frac = sustained_fraction(times[SUSTAIN], est.step_time_s, compute)
    why = (f"measured end to end: perfmodel calibrate ran the executor on {model.name} ({model.n_layers} layers, "
           f"hidden {model.hidden}, vocab {model.vocab}, {plan.seq_len} tokens per rank: a model and length of no "
           f"validation sweep) data parallel over {nproc} {device} process(es), {rounds} rounds of {STEPS} steps, "
           f"the lowest round's median after {WARMUP}: {times[SUSTAIN] * 1e3:.1f} ms per "
           f"step where the estimate at the microbenchmark rates says {est.step_time_s * 1e3:.1f} ms, "
           f"{compute * 1e3:.1f} ms of it GEMMs and attention; fraction = F / (measured - (predicted - F)) "
           "(calibrate.host.costs.sustained_fraction), the share of the isolated kernels' rates a whole step keeps with "
           "every rank computing, communicating and allocating at once")
    eff = system.efficiency
    eff = eff.model_copy(update={"sustained_fraction": round(frac, 4),
                                 "sources": {**eff.sources, "sustained_fraction": why}})
    probe = SustainProbe(model=model.name, tokens_per_rank=plan.micro_batch * plan.seq_len,
                         measured_s=times[SUSTAIN], predicted_s=est.step_time_s, compute_s=compute)
    return system.model_copy(update={"efficiency": eff,
                                     "host_costs": costs.model_copy(update={"sustain": probe})})
