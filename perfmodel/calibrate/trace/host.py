"""The host's seconds per call kind, measured in a CPU trace of the stack's own step.

On a CPU the ranks compute on the thread that dispatches, so a step is the operators' work, the host's calls
around it and the waits for the exchanges, one after another on each rank's main thread. A trace records every
operator span on that thread; this module splits the recorded steps into those three and the host's share by the
call kinds the stacks' profiles count (spec.stack.profile.HostProfile, spec.host.cpu.CALL_KINDS):

- work: each operator that computes (trace.reader.op_class: a GEMM, attention, a memory-bound or copy kernel) with
  nothing computing inside it but the fill or copy into its own output (addmm's bias copy, sum's zero fill), its
  whole span: what the calibrated rates price (the GEMM and bandwidth fits take the same spans);
- autograd_node: each `autograd::engine::evaluate_function` span less the work inside it, and the Python gap
  before it (the engine's loop, the node's own dispatch, its views);
- eager_op / module_call and view_op: the other outermost operators before the last node (the Python-level calls:
  a module's call shows as its outermost operator, e.g. aten::linear) less their work, each with the gap before
  it: eager where it contains work, view where it does not; the trace holds no Python frames, so a module's call
  and an op's are one kind here;
- the step's tail after the last node (the optimizer's loop, zero_grad, DDP's copies back into the gradients),
  less its work: the optimizer's per-step calls and its per-tensor calls (list_tensor);
- nccl_call: the outermost c10d operators' spans wherever they are called (set-up and enqueue; the exchange runs
  on gloo's thread), taken out of the spans around them;
- waits: a gap in which one of the rank's gloo exchanges ended (the thread waiting for it), left out: the
  collective model prices the exposed exchange.

Each kind's cost is its seconds per step over the calls of that kind the stack's profile counts for the traced
plan (`profile_counts`): the costs at which the estimate's own counts reproduce what the trace recorded, so that
another layout's counts (pipeline micro-batches, FSDP's hooks, more collectives) price its host by mechanism. Kinds
the trace holds no call of (a ZeRO-3 hook in a DDP trace, DTensor's dispatch) stand in as the reference host's
costs scaled by the traced eager op over that host's (calibrate.host.measured's rule).

The profiler's own cost: every operator event it records costs the host time that lands in these spans. Where
the untraced step of the same plan (`step_s`) is shorter than the traced one, the difference per recorded event
is taken off each kind in proportion to the events inside its calls; where it is not (the run-to-run spread of the
untraced step exceeds the profiler's cost), nothing is.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

from ...spec.hardware.system import HostCosts, HostProbe, System
from ...spec.stack.profile import EXECUTOR_STACK, load_stack
from .reader import RankTrace, op_class, op_seconds

NODE = "autograd::engine::evaluate_function: "
COLLECTIVE_OPS = ("c10d::", "_c10d_functional::")
FILLS = ("aten::copy_", "aten::fill_", "aten::zero_")
WORKING = ("gemm", "attention", "memory-bound", "copies")
CATEGORIES = ("eager", "view", "node", "tail")
OPTIMIZER = re.compile(r"^aten::_fused_adamw?_$|^aten::_foreach_(mul|add|addcmul|addcdiv|lerp|sqrt|div)_")


def _works(o) -> bool:
    return op_class(o.name) in WORKING


def kernel_op(o) -> bool:
    """An operator that computes with nothing computing inside it but a fill or copy into its own output."""
    def inner(x):
        return any((_works(c) and c.name not in FILLS) or inner(c) for c in x.children)

    return _works(o) and not inner(o)


def work_seconds(o) -> float:
    """Seconds of an operator's span that are work (module docstring) or collective calls (priced apart)."""
    if kernel_op(o) or o.name.startswith(COLLECTIVE_OPS):
        return o.dur
    return sum(work_seconds(c) for c in o.children)


def events(o) -> int:
    """Recorded events of an operator and everything inside it, less the work's (the host's share of events)."""
    if kernel_op(o):
        return 0
    return 1 + sum(events(c) for c in o.children)


def host_kinds(traces: list[RankTrace]) -> dict:
    """Per step of the mean rank: {category: [calls, host seconds, recorded events]} for eager / view / node / tail
    (module docstring), and "nccl_call" [calls, seconds, 0], "work", "wait" and "step" seconds. Empty where a
    step holds no autograd node (no backward: the kinds cannot be told apart)."""
    out = {k: [0.0, 0.0, 0.0] for k in (*CATEGORIES, "nccl_call")}
    out.update(work=0.0, wait=0.0, step=0.0)
    n = 0
    for t in traces:
        if not t.ops:
            continue
        main = Counter(o.tid for o in t.ops).most_common(1)[0][0]
        inner = {id(c) for o in t.ops for c in o.children}
        ends = [g["t1"] for g in t.gloo]
        for a, b in t.steps:
            top = sorted((o for o in t.ops if o.tid == main and a <= o.t0 < b and id(o) not in inner),
                         key=lambda o: o.t0)
            nodes = [o for o in top if o.name.startswith(NODE)]
            if not nodes:
                return {}
            last = nodes[-1].t1
            prev = a
            for o in top:
                gap = max(0.0, o.t0 - prev)
                if any(prev <= e <= o.t0 for e in ends):  # the thread waited for an exchange
                    out["wait"] += gap
                    gap = 0.0
                prev = max(prev, o.t1)
                work = work_seconds(o)
                out["work"] += work
                if o.name.startswith(COLLECTIVE_OPS):
                    key = "nccl_call"
                    out[key][0] += 1
                    out[key][1] += o.dur
                    continue
                key = ("node" if o.name.startswith(NODE) else "tail" if o.t0 >= last
                       else "eager" if work > 0 else "view")
                out[key][0] += 1
                out[key][1] += max(0.0, o.dur - work) + gap
                out[key][2] += events(o)
            out["step"] += b - a
            n += 1
    if n == 0:
        return {}
    return {k: ([x / n for x in v] if isinstance(v, list) else v / n) for k, v in out.items()}


def host_call_seconds(traces: list[RankTrace]) -> float:
    """Mean host seconds of a collective call: the outermost c10d operators on the ranks' own threads (their set-up
    and enqueue; the exchange runs on gloo's thread), waits left out; outermost among c10d operators, wherever they
    are called from (DDP's gradient hook inside an autograd node, DTensor's redistribution inside an op)."""
    spans = []
    for t in traces:
        inner = {id(c) for o in t.ops if o.name.startswith(COLLECTIVE_OPS) for c in o.children}
        spans += [o.dur for o in t.ops if o.name.startswith(COLLECTIVE_OPS) and id(o) not in inner
                  and "wait" not in o.name and t.in_steps(o.t0)]
    return float(np.mean(spans)) if spans else 0.0


def profile_counts(system: System, pf) -> dict[str, float]:
    """Calls per step of each kind the executor stack's profile counts for the plan file `pf`'s plan (the slowest
    stage, as the estimate prices it): the estimate's host seconds at 1 s for that kind and 0 for the rest."""
    from ...cost.estimate import evaluate_plan
    from ...spec.host.cpu import CALL_KINDS, HostCalls, HostCPU

    plan = pf.plan.model_copy(update={"stack": EXECUTOR_STACK})
    out = {}
    for kind in ("eager_op", "module_call", "view_op", "autograd_node", "list_tensor"):
        calls = HostCalls(**{f"{k}_s": float(k == kind) for k in CALL_KINDS})
        host = HostCPU(name="count", description="unit costs", cpu="-", sockets=1, cores_per_socket=1, calls=calls,
                       sources={f"calls.{k}_s": "a unit cost, to count calls" for k in CALL_KINDS})
        costs = HostCosts(stack=EXECUTOR_STACK, kernel_s=0.0, collective_s=0.0, probes=[], by_kind=True)
        step, _ = evaluate_plan(pf.model, system.model_copy(update={"host_cpu": host, "host_costs": costs}), plan)
        out[kind] = float(step.host_s[0])
    return out


def with_kind_host(system: System, traces: list[RankTrace], plan_path, step_s: float, traced_s: float
                   ) -> System | None:
    """`system` with its host measured per call kind from the traces of the plan at `plan_path` (module docstring):
    System.host_cpu holding the costs, each citing the trace, and HostCosts.by_kind; None where the trace cannot
    tell the kinds apart (no backward recorded) or the stack's profile counts none of a kind the trace recorded."""
    from ...cost.estimate import evaluate_plan
    from ...spec.host.cpu import CALL_KINDS, REFERENCE_HOST, HostCalls, HostCPU, reference_host
    from ...spec.plan.file import load_plan_file

    kinds = host_kinds(traces)
    if not kinds:
        return None
    pf = load_plan_file(plan_path)
    counts = profile_counts(system, pf)
    opt = load_stack(EXECUTOR_STACK).host.optimizer_step  # once per step, inside the eager and view counts
    n_eager = counts["eager_op"] + counts["module_call"] - opt.get("eager_op", 0.0)
    n_view = counts["view_op"] - opt.get("view_op", 0.0)
    if min(n_eager, n_view, counts["autograd_node"], counts["list_tensor"]) <= 0:
        return None
    # the profiler's own cost per recorded event: what the traced step exceeds the untraced one by (0 where not)
    recorded = sum(kinds[k][2] for k in CATEGORIES)
    per_event = max(0.0, traced_s - step_s) / recorded if recorded else 0.0
    host = {k: max(0.0, kinds[k][1] - per_event * kinds[k][2]) for k in CATEGORIES}
    eager = host["eager"] / n_eager
    view = host["view"] / n_view
    node = host["node"] / counts["autograd_node"]
    tensor = max(0.0, host["tail"] - opt.get("eager_op", 0.0) * eager - opt.get("view_op", 0.0) * view
                 ) / counts["list_tensor"]
    nccl = host_call_seconds(traces) or None  # wherever they are called from (DTensor's inside its ops)
    name = Path(plan_path).name
    where = (f"the trace of {name} ({len(traces)} rank(s), {kinds['step'] * 1e3:.1f} ms per traced step; "
             f"{step_s * 1e3:.1f} ms untraced; profiler cost {per_event * 1e6:.2f} us per recorded event taken off)")
    measured = {"eager_op": eager, "module_call": eager, "view_op": view, "autograd_node": node,
                "list_tensor": tensor}
    sources = {
        "calls.eager_op_s": f"measured: {host['eager'] * 1e3:.2f} ms per step of the outermost operators that compute "
                            f"outside the backward, less their work, with the gap before each, over the {n_eager:g} "
                            f"eager and module calls the stack's profile counts for the plan; {where}",
        "calls.module_call_s": "the eager op's: a trace holds no Python frames, so a module's call shows as its "
                               "outermost operator, one kind with an op's (calibrate.trace.host)",
        "calls.view_op_s": f"measured: {host['view'] * 1e3:.2f} ms per step of the outermost operators that compute "
                           f"nothing, with the gap before each, over the profile's {n_view:g} view calls; {where}",
        "calls.autograd_node_s": f"measured: {host['node'] * 1e3:.2f} ms per step of the autograd engine's "
                                 "evaluate_function spans less their work, with the gap before each, over the "
                                 f"profile's {counts['autograd_node']:g} nodes; {where}",
        "calls.list_tensor_s": f"measured: {host['tail'] * 1e3:.2f} ms per step after the last backward node (the "
                               "optimizer's loop, zero_grad, DDP's copies) less its work and the profile's "
                               f"per-step calls at the costs above, over its {counts['list_tensor']:g} parameter "
                               f"tensors; {where}"}
    if nccl is not None:
        measured["nccl_call"] = nccl
        sources["calls.nccl_call_s"] = ("measured: the mean span of the outermost c10d operators inside the steps, "
                                        "waits left out (set-up and enqueue; the exchange runs on gloo's thread; "
                                        f"host_call_seconds); {where}")
    ratio = eager / reference_host().calls.eager_op_s
    stand_in = reference_host().calls.scaled(ratio)
    for kind in CALL_KINDS:
        if kind not in measured:
            measured[kind] = stand_in.cost(kind)
            sources[f"calls.{kind}_s"] = (f"not in the trace of {name}: the reference host's ({REFERENCE_HOST}) x "
                                          f"{ratio:.2f}, the traced eager op over that one's (calibrate.trace.host)")
    cpu = system.accelerator.name
    host_cpu = HostCPU(name=f"{system.name}-host", description=f"the host of {cpu} as the trace of {name} measured "
                       "it, per call kind (calibrate.trace.host)", cpu=cpu, sockets=1, cores_per_socket=1,
                       calls=HostCalls(**{f"{k}_s": float(v) for k, v in measured.items()}), sources=sources)
    plan = pf.plan.model_copy(update={"stack": EXECUTOR_STACK})
    bare = system.model_copy(update={"host_costs": HostCosts(stack=EXECUTOR_STACK, kernel_s=0.0, collective_s=0.0,
                                                             probes=[])})
    _, est = evaluate_plan(pf.model, bare, plan)
    costs = HostCosts(stack=EXECUTOR_STACK, kernel_s=0.0, collective_s=measured["nccl_call"], by_kind=True,
                      probes=[HostProbe(name=Path(plan_path).stem, measured_s=step_s, predicted_s=est.step_time_s,
                                        kernels=0.0, calls=kinds["nccl_call"][0])],
                      sources={"by_kind": f"the host's costs per call kind (host_cpu), measured in {where} "
                                          "(calibrate.trace.host)",
                               "collective_s": sources.get("calls.nccl_call_s", "the reference host's, scaled")})
    return system.model_copy(update={"host_cpu": host_cpu, "host_costs": costs})


def optimizer_seconds(traces: list[RankTrace]) -> float:
    """Seconds per step of the optimizer's update kernels (fused / foreach Adam), the mean rank."""
    total = sum(op_seconds(t, o) for t in traces for o in t.ops if t.in_steps(o.t0) and OPTIMIZER.match(o.name))
    return total / sum(len(t.steps) for t in traces)


def with_trace_host(system: System, traces: list[RankTrace], plan_path, step_s: float,
                    traced_s: float | None = None) -> System:
    """`system` with the optimizer's bandwidth and the executor stack's host costs from the traced plan (module
    docstring): the optimizer fraction that makes the estimate's update time the trace's (the same
    bytes, `cost.memory.states.adam_step_bytes`, at a bandwidth in proportion), then the host per call kind as the trace
    recorded it (calibrate.trace.host; `traced_s`: the traced step, for the profiler's own cost), or, where the
    trace cannot tell the kinds apart (no backward recorded), from what is left of the step."""
    from ...cost.estimate import evaluate_plan
    from ...spec.plan.file import load_plan_file

    pf = load_plan_file(plan_path)
    plan = pf.plan.model_copy(update={"stack": EXECUTOR_STACK})
    none = HostCosts(stack=EXECUTOR_STACK, kernel_s=0.0, collective_s=0.0, probes=[])
    bare = system.model_copy(update={"host_costs": none})
    traced_opt = optimizer_seconds(traces)
    est_opt = evaluate_plan(pf.model, bare, plan)[1].time_s.optimizer
    eff = bare.efficiency
    if traced_opt > 0 and est_opt > 0:
        now = eff.optimizer_bandwidth or eff.memory_bandwidth
        fitted = float(min(1.0, now * est_opt / traced_opt))
        eff = eff.model_copy(update={"optimizer_bandwidth": round(fitted, 5), "sources": {
            **eff.sources, "optimizer_bandwidth": f"the traced optimizer update of {Path(plan_path).name}: "
            f"{traced_opt * 1e3:.2f} ms per step for the bytes the estimate moves (calibrate.trace.from_trace)"}})
        bare = bare.model_copy(update={"efficiency": eff})
    by_kind = with_kind_host(bare, traces, plan_path, step_s, traced_s if traced_s is not None else step_s)
    if by_kind is not None:  # the host per call kind, as the trace recorded it (calibrate.trace.host)
        return by_kind
    step, est = evaluate_plan(pf.model, bare, plan)
    kernels, calls = float(step.host_kernels[0]), float(step.host_calls[0])
    collective_s = host_call_seconds(traces)
    gap = step_s - est.step_time_s - collective_s * calls
    kernel_s = max(0.0, gap / kernels) if kernels > 0 else 0.0
    how = (f"from the trace of {Path(plan_path).name}: its step ({step_s * 1e3:.1f} ms) less the calibrated estimate "
           f"without host costs ({est.step_time_s * 1e3:.1f} ms) and {calls:g} collective calls at the trace's own "
           f"{collective_s * 1e6:.1f} us each, over its {kernels:g} operator launches (calibrate.trace.from_trace)")
    probe = HostProbe(name=Path(plan_path).stem, measured_s=step_s, predicted_s=est.step_time_s, kernels=kernels,
                      calls=calls)
    costs = HostCosts(stack=EXECUTOR_STACK, kernel_s=kernel_s, collective_s=collective_s, probes=[probe],
                      sources={"kernel_s": how, "collective_s": "the mean span of the outermost c10d operators on the "
                               "ranks' threads inside the recorded steps (set-up and enqueue; waits left out)"})
    return bare.model_copy(update={"host_costs": costs})
