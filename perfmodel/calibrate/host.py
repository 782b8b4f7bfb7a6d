"""Host costs of the executor's stack: seconds per operator launch and per collective call.

Eager PyTorch dispatches every operator from the host (Python, autograd, DTensor's redistribution, FSDP's
hooks, gloo's call set-up). Where the kernels are large the device hides that time; on a CPU testbed, or with
small kernels, it adds to every step, and the microbenchmarks (GEMMs, attention, collectives in a tight loop)
never see it. So `perfmodel calibrate` runs the executor itself (`execute.run_plans`) on a model too small to
compute (hidden 16, vocab 64) in each layout its processes allow, prices each probe with the spec just fitted,
and fits two non-negative costs to what the estimate leaves out (scipy.optimize.nnls):

    measured - predicted  ~  kernel_s * kernels + collective_s * calls

`kernels` and `calls`: what the host dispatches per step on the slowest stage (cost.step.host_counts). The
spec then carries them for the executor's stack (`hardware.HostCosts`), and the estimate charges them to every
plan of that stack (cost.step.host_seconds).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from ..hardware import HostCosts, HostProbe, System
from ..models import ModelConfig
from ..plan import Plan
from ..stack import EXECUTOR_STACK

PROBE_MODEL = ModelConfig(
    name="host-probe", n_layers=4, hidden=16, n_heads=2, ffn_hidden=64, vocab=64, max_seq_len=128, mlp="gelu",
    norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all", dropout=0.0,
    source="a GPT-2-style model too small to compute: its step time is the host's (calibrate.host)")
STEPS, WARMUP = 6, 2


def probe_plans(nproc: int) -> dict[str, Plan]:
    """The layouts `nproc` processes can run, each dispatching a different mix of launches and calls: data
    parallel with one and with four micro-batches, FSDP, tensor + sequence parallel (DTensor), a pipeline."""
    base = dict(stack=EXECUTOR_STACK, gpus=nproc, global_batch=8, seq_len=128)
    out = {"dp": Plan(**base, micro_batch=8 // nproc if 8 % nproc == 0 else 1),
           "dp-accumulate": Plan(**base, micro_batch=1)}
    if nproc > 1 and 8 % nproc == 0:
        out["fsdp"] = Plan(**base, micro_batch=8 // nproc, zero=3)
        out["pp"] = Plan(**base, pp=2 if nproc % 2 == 0 else nproc, micro_batch=1)
    if nproc % 2 == 0:
        out["tp-sp"] = Plan(**base, tp=2, sequence_parallel=True, micro_batch=2)
    return out


def measure_host_costs(system: System, nproc: int, device: str, echo=None) -> HostCosts:
    """Run the probes on `nproc` processes, price them with `system`, fit the two costs (see the docstring)."""
    from ..cost.estimate import evaluate_plan
    from ..execute import run_plans
    from ..planfile import write_plan_file
    from ..search.planfiles import plan_file

    bare = system.model_copy(update={"host_costs": None})
    plans = probe_plans(nproc)
    with tempfile.TemporaryDirectory(prefix="perfmodel-host-") as tmp:
        paths, steps = [], []
        for name, plan in plans.items():
            step, est = evaluate_plan(PROBE_MODEL, bare, plan)
            pf = plan_file(PROBE_MODEL, bare, est.plan, "perfmodel calibrate (host probe)", evaluated=(step, est))
            paths.append(write_plan_file(pf, Path(tmp) / f"{name}.json"))
            steps.append((step, est))
        measured = run_plans(paths, nproc, device=device, steps=STEPS, warmup=WARMUP, log_dir=Path(tmp), echo=echo)
    probes = []
    for name, (step, est), m in zip(plans, steps, measured):
        probes.append(HostProbe(name=name, measured_s=statistics.median(m.step_times()[WARMUP:]),
                                predicted_s=est.step_time_s, kernels=float(step.host_kernels[0]),
                                calls=float(step.host_calls[0])))
    a = np.array([[p.kernels, p.calls] for p in probes])
    gap = np.array([p.measured_s - p.predicted_s for p in probes])
    (kernel_s, collective_s), _ = nnls(a, np.maximum(gap, 0.0))
    how = (f"fitted: perfmodel calibrate ran the executor on {nproc} {device} process(es) over "
           f"{len(probes)} layouts of {PROBE_MODEL.name} ({', '.join(plans)}; {STEPS} steps, the median after "
           f"{WARMUP}), and non-negative least squares of measured - predicted step time on launches and calls "
           "per step (calibrate.host)")
    return HostCosts(stack=EXECUTOR_STACK, kernel_s=float(kernel_s), collective_s=float(collective_s), probes=probes,
                     sources={"kernel_s": how, "collective_s": how})
