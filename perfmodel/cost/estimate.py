"""One plan's training step as an `Estimate`: predict it (`estimate`), report it (the headline numbers and the
rows that trace them: every op, every communication, every stage, with notes on what the numbers assume), and
check a plan file's prediction against it.

The same code (`cost.step.evaluate.evaluate`) prices one plan here and every layout of a search: a plan is a `Layouts`
of length 1, reported as its row 0 (`report_plan`).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..spec.hardware.system import DEFAULT_HEADROOM, System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.plan.layout import Plan, resolve, split_of
from ..spec.result import (
    ClockPower,
    HostSummary,
    CommTime,
    Estimate,
    MemoryBreakdown,
    OpTime,
    Prediction,
    RankMemory,
    StageTime,
    TimeBreakdown,
)
from ..spec.stack.profile import REGIMES, Interval, Stack, load_stack, regimes_of
from ..spec.stack.release import pinned
from .comm import collectives as C
from .host.launch_queue import layer_calls
from .layouts import Layouts
from .memory.footprint import MEMORY_PARTS, stage_memory
from .memory.fit import VERDICTS, band_ends, memory_budget, memory_verdict, reserved_band
from .comm.mesh import Mesh
from .power import COMPUTE_PARTS as POWER_COMPUTE
from .power import average_watts, loop_clock, phase_seconds, phase_watts, priced_clock, step_energy_j
from .compute.units import COMPUTE_PARTS
from .comm.sharded import Comm
from .pipeline.stages import UNITS, Stages
from .step.evaluate import Step, evaluate


def item(x, i: int, n: int):
    """Element i of a per-plan value (an array of n, or a scalar shared by all) as a Python value."""
    x = np.broadcast_to(np.asarray(x), (n,))[i]
    return x.item() if isinstance(x, np.generic) else x


def comm_row(c: Comm, system: System, plan: Plan, count: float, i: int, n: int) -> CommTime:
    """Communication `c` of plan i (of n) as a CommTime row, `count` units (micro-batch-units) on the stage."""
    at = lambda x: item(x, i, n)
    name = c.name if c.unit in ("layer", "stage", "step") else f"{c.name} ({c.unit})"
    if c.tier is not None:  # one tier's name ('infiniband'), or a MoE group's tiers ('nvlink x8 > infiniband x4')
        tiers = at(c.tier)
        rings = C.described_rings(tiers)
    else:
        phases = Mesh(system, plan.gpus, plan.dp, plan.cp, plan.tp, plan.dp_replicate).phases(int(at(c.mask)))
        tiers, rings = C.describe(phases), [(ph.tier, ph.members) for ph in phases]
    by_name, kinds = {t.name: t for t in system.tiers}, [k.strip() for k in str(at(c.collective)).split(" / ")]
    source = lambda t, n: "/".join(dict.fromkeys(t.fit(k, n)[1] for k in kinds))  # noqa: E731 (NetworkTier.fit)
    priced_by = ", ".join(f"{t} {source(by_name[t], n)}" for t, n in rings if t in by_name) or "datasheet"
    sizes = {"tp": plan.tp, "cp": plan.cp, "dp": plan.zero_shard, "pp": plan.pp, "embedding": 2, "ep": plan.ep,
             "etp": plan.etp, "edp": plan.edp, "host": 1, "replicate": plan.dp_replicate}
    calls, seconds = at(c.calls), at(c.seconds)
    return CommTime(name=name, collective=at(c.collective), group=c.group, group_size=sizes[c.group], tiers=tiers,
                    priced_by=priced_by,
                    bytes=at(c.nbytes), calls=calls * count, seconds_per_call=seconds, total_s=seconds * calls * count,
                    exposed_s=at(c.exposed) * count)


def stage_times(step: Step, i: int, split: list[int], mtp: int = 0) -> list[StageTime]:
    """Plan i's seconds per micro-batch on each stage of `split` (layers per stage): the units it holds (the
    first has the embedding, the last the head and `mtp` multi-token prediction modules) at their forward /
    recompute / backward times, plus its sends (half with the forward, half with the backward)."""
    n, pp, st = len(step.lay), len(split), Stages.of_split(split).with_mtp(mtp)
    at = lambda x: float(item(x, i, n))
    per_stage = lambda per_unit: st.seconds({u: at(per_unit[u]) for u in UNITS})[:, 0]
    p2p = at(step.p2p)
    total, fwd, rec = per_stage(step.unit_time) + p2p, per_stage(step.unit_fwd) + p2p / 2, \
        per_stage(step.unit_recompute)
    return [StageTime(stage=r, layers=layers, embedding=r == 0 or (mtp > 0 and r == pp - 1), head=r == pp - 1,
                      mtp_modules=mtp if r == pp - 1 else 0, fwd_s=float(fwd[r]),
                      recompute_s=float(rec[r]), bwd_s=float(total[r] - fwd[r] - rec[r]))
            for r, layers in enumerate(split)]


def memory_note(memory: MemoryBreakdown, step: Step, stage: str, fits: bool, room: float) -> str:
    """Why a plan is tight or does not fit: where the allocator's room (capacity - runtime, `room` bytes) lies
    against the band of the reserved estimate (cost.memory.fit.memory_limits), by how much, and the part of
    memory that decides it (the largest)."""
    GiB = 2**30
    parts = {k: getattr(memory, k) for k in ("weights", "gradients", "optimizer", "activations", "transient")}
    big = max(parts, key=parts.get)
    why = f"{big} ({parts[big] / GiB:.1f} GiB of {memory.allocated / GiB:.1f} allocated) decide it"
    r = memory.reserved
    low, high = band_ends(r, room, step.budget, step.limit, step.headroom)
    keep = f" less the {step.headroom:.0%} headroom" if step.headroom else ""
    if fits:
        return (f"tight: the {stage} stage reserves {r / GiB:.1f} GiB, {low / GiB:.1f}-{high / GiB:.1f} GiB with the "
                f"estimate's band: the {room * (1 - step.headroom) / GiB:.1f} GiB the allocator can reserve{keep} "
                f"lies inside it; {why}")
    return (f"does not fit: the {stage} stage reserves {r / GiB:.1f} GiB, at least {low / GiB:.1f} GiB with the "
            f"estimate's band: short by {(low - room) / GiB:.1f} GiB beyond the band of the {room / GiB:.1f} GiB the "
            f"allocator can reserve (capacity - runtime); {why}")


def host_notes(step: Step, plan: Plan, time_s: TimeBreakdown, i: int) -> str:
    """'GPU idle 41%: host-bound ...' where the device waits on its host for 1% of the step or more (cost.host.launch_queue), with
    what the host spends and at which rates; '' otherwise."""
    idle = time_s.host / time_s.total if time_s.total > 0 else 0.0
    if idle < 0.01:
        return ""
    r, host = step.host_rates, float(item(step.host_s, i, len(step.lay)))
    device = time_s.total - time_s.host - time_s.overhead
    bound = "host-bound" if host >= device else "partly host-bound"
    return (f"GPU idle {idle:.0%}: {bound}: the host takes {host * 1e3:.1f} ms per step to launch what the device runs "
            f"in {device * 1e3:.1f} ms ({r.source}; cost.host.launch_queue)")


def host_summary(model: ModelConfig, system: System, plan: Plan, step: Step, time_s: TimeBreakdown,
                 i: int) -> HostSummary | None:
    """The host's part of the estimate (spec.result.HostSummary): None where it is not priced."""
    r, h = step.host_rates, system.host_cpu
    if not r.priced or (h is None and not r.serial):
        return None
    n = len(step.lay)
    host_s = float(item(step.host_s, i, n))
    f, b = (float(item(x, i, n)) for x in step.unit_host["layer"])
    units, j = step.units, int(step.units.index[i])
    dev_f, dev_b = (float(item(x["layer"], j, len(units.lay))) for x in (units.fwd, units.bwd))
    if r.serial and not r.op_f:  # a CPU spec: its ranks compute on the host that launches, at a cost per launch
        k = r.kernel_s  # a fit on a loaded machine may find launches free: then no count follows from seconds
        calls_f, calls_b = ({"kernel_launch": round(f / k)}, {"kernel_launch": round(b / k)}) if k > 0 else ({}, {})
        where = f"{system.name}'s CPU (its ranks compute on it)"
    else:  # the stack's counted calls (on a CPU, at costs per kind its trace measured: HostCosts.by_kind)
        calls_f, calls_b = layer_calls(load_stack(plan.stack), model, plan.compile, plan.cuda_graphs,
                                       plan.precision)
        where = f"{system.name}'s CPU (its ranks compute on it)" if r.serial else f"{h.name} ({h.sockets}x {h.cpu})"
    return HostSummary(host=where, source=r.source, launch_s=host_s,
                       share=host_s / time_s.total if time_s.total > 0 else 0.0, wait_s=time_s.host,
                       layer_forward_s=f, layer_backward_s=b, layer_forward_device_s=dev_f,
                       layer_backward_device_s=dev_b, layer_forward_calls=calls_f, layer_backward_calls=calls_b,
                       serial=r.serial)


def notes_of(model: ModelConfig, system: System, plan: Plan, step: Step, speedup: float, fits: bool,
             memory: MemoryBreakdown, mem_stage: str, time_s: TimeBreakdown, i: int) -> list[str]:
    """What a reader of the estimate should know: the MFU reference, a shared host, a step its host bounds, a plan
    that does not fit, uneven virtual chunks, a sequence past the model's positions."""
    notes = [f"MFU/HFU against dense {step.peak_dtype} peak {step.peak_flops / 1e12:.1f} TFLOP/s per device"]
    if speedup != 1.0:
        host = system.shared_host
        notes.append(f"the spec's rates were measured with {host.ranks} ranks sharing {host.cores} cores; this job "
                     f"keeps fewer of them computing at once ({plan.gpus} ranks, pipeline stages waiting on the "
                     f"slowest), so they compute {speedup:.2f}x faster (cost.compute.kernel_time.shared_core_speedup); compute, "
                     "op and optimizer times above include it")
    fit = system.run_fit
    if fit is not None and not fit.applies_to(plan.stack):
        notes.append(f"{system.name} is calibrated from {len(fit.runs)} measured runs of "
                     f"{', '.join(sorted({r.stack for r in fit.runs}))}, not of {plan.stack}: this plan is priced at "
                     f"the spec's own rates, with its stack's interval (spec.hardware.system.RunFit.applies_to)")
    elif fit is not None:
        notes.append(f"{system.name} is calibrated from {len(fit.runs)} measured runs: the time parts above are the "
                     f"spec's compute / {fit.compute_speed:g}, exposed communication / {fit.network_speed:g} and "
                     f"host time / {fit.host_speed:g}"
                     + (f", plus {fit.step_overhead_s:g} s per step" if fit.step_overhead_s else "")
                     + " (cost.step.run_fit.calibrated); the op and communication rows "
                     "below are at the spec's rates, before that scaling")
    host_note = host_notes(step, plan, time_s, i)
    if host_note:
        notes.append(host_note)
    if memory.reserved > step.budget:
        notes.append(memory_note(memory, step, mem_stage, fits, memory_budget(system, 0.0)))
    pp, v = plan.pp, plan.vpp
    if v > 1 and model.n_layers % (pp * v):
        notes.append(f"{model.n_layers} layers do not split evenly into pp*vpp = {pp * v} chunks: chunks differ by "
                     "one layer (as in Megatron-LM's uneven first/last stages); activation memory uses the mean chunk")
    if model.position != "learned" and plan.seq_len > model.max_seq_len:
        notes.append(f"seq_len {plan.seq_len} exceeds the model's max_seq_len {model.max_seq_len}")
    return notes


def extrapolation_text(band: Interval, far: list[str], generation: str, precision: str, gpus: int,
                       stack: str = "") -> str:
    """How an interval says it extrapolates (Interval.bounds): ', W wider each way for <what> and <what>' for the
    ways the plan lies outside the runs it came from (EXTRAPOLATIONS), naming what the runs span; W is their widths
    in quadrature."""
    if not far:
        return ""
    d = band.domain
    what = {"generation": lambda: f"a {generation} part, a generation none of its runs used ({', '.join(d.generations)})",
            "precision": lambda: f"{precision}, a precision none of its runs used ({', '.join(d.precisions)})",
            "devices": lambda: f"{gpus} devices, more than any of its runs (up to {d.max_devices})",
            "release": lambda: f"{stack}, a stack or release none of its runs ran ({', '.join(d.stacks)})"}
    widths = [band.extrapolation.get(k, 0.0) for k in far]
    each = f" ({' and '.join(f'{w:.1%}' for w in widths)} in quadrature)" if len(far) > 1 else ""
    return (f", {sum(w * w for w in widths) ** 0.5:.1%} wider each way{each} for "
            + " and for ".join(what[k]() for k in far))


def prediction_interval(system: System, stack: Stack, moe: bool = False) -> Interval | None:
    """The interval of a prediction: the spec's own, where it was calibrated from measured runs of this stack and has
    one (spec.hardware.system.RunFit.applies_to), else the stack profile's (Stack.interval; for a mixture-of-experts model
    Stack.moe_interval, from MoE runs); None where neither has one."""
    fit = system.run_fit
    if fit is not None and fit.interval is not None and fit.applies_to(stack.name):
        return fit.interval
    return stack.moe_interval if moe else stack.interval


def memory_ranks(model: ModelConfig, system: System, step: Step, i: int, split: list[int]) -> list[RankMemory]:
    """Every pipeline stage of plan i with its memory (`memory.stage_memory` over the plan's own split) and its
    global ranks in Megatron-LM's order (tp innermost, then cp, dp, pp: stage r holds r*n .. (r+1)*n - 1 for
    n = tp*cp*dp)."""
    lay = step.lay.take(np.array([i]))
    st = Stages.of_split(split).with_mtp(model.mtp_layers)
    by = stage_memory(model, system, lay, st, per_kind=True)
    n = int(lay.tp[0] * lay.cp[0] * lay.dp[0])
    span = lambda r: f"{r * n}" if n == 1 else f"{r * n}-{(r + 1) * n - 1}"
    return [RankMemory(stage=r, ranks=span(r), layers=layers,
                       memory_bytes=MemoryBreakdown(**{k: float(by[k][r, 0]) for k in MEMORY_PARTS}))
            for r, layers in enumerate(split)]


def report_plan(model: ModelConfig, system: System, step: Step, i: int) -> Estimate:
    """Plan i of an evaluated set as an Estimate: the headline numbers and the rows that trace them."""
    lay, st = step.lay, step.stages
    plan = lay.plan(i)
    pp, m, gpus = plan.pp, plan.num_microbatches, plan.gpus
    b = int(step.bottleneck[i])
    n = len(lay)
    at = lambda x: float(item(x, i, n))
    count = {u: int(item(st.count(u)[b], i, n)) for u in UNITS}
    time_s = TimeBreakdown(**{k: at(x) for k, x in step.time.items()})
    split = split_of(plan, model.n_layers)
    ranks = memory_ranks(model, system, step, i, split)
    membd = max(ranks, key=lambda r: r.memory_bytes.reserved)
    on = lambda c: bool(item(c.active, i, n))
    # the units' ops and comms are per distinct row of the plans (cost.compute.units.unit_costs): plan i's is row j
    units, j = step.units, int(step.units.index[i])
    n_rows = len(units.lay)
    on_row, at_row = (lambda c: bool(item(c.active, j, n_rows))), (lambda x: float(item(x, j, n_rows)))
    comms = [comm_row(c, system, plan, count[c.unit] * m, j, n_rows) for c in units.comms
             if on_row(c) and count[c.unit]]
    comms += [comm_row(c, system, plan, m, i, n) for c in step.stage_comms if on(c)]
    comms += [comm_row(c, system, plan, 1, i, n) for c in step.step_comms if on(c)]
    fast = at(step.compute_speedup)  # op times at the rate of ranks sharing a host (1 elsewhere)
    # compute-bound ops at the step's clock under the power limit (cost.power), from the loop's they were priced at
    clock, priced = at(step.clock), priced_clock(system.accelerator.power)
    speed = lambda op: fast * (clock / priced if COMPUTE_PARTS.get(op.kind) in POWER_COMPUTE else 1.0)  # noqa: E731
    ops = [OpTime(name=op.name, where=u, kind=op.kind, count=count[u], fwd_s=at_row(op.fwd_s) / speed(op),
                  bwd_s=at_row(op.bwd_s) / speed(op), recompute_s=at_row(op.recompute_s(plan.recompute)) / speed(op),
                  fwd_flops=at_row(op.fwd_flops), formula=op.formula,
                  priced_by=op.priced_by + (", outside its grid" if item(op.outside, j, n_rows) else ""))
           for u in UNITS if count[u] for op in units.ops[u] if on_row(op)]

    step_s, cap = time_s.total, step.capacity
    host_s = at(step.host_s)
    host = max(r.memory_bytes.host for r in ranks)  # offloaded: the first stage holds most in flight
    verdict = str(memory_verdict(membd.memory_bytes.reserved, step.budget, step.limit, host, step.host_room))
    reserved, room = membd.memory_bytes.reserved, memory_budget(system, 0.0)
    fits = verdict != VERDICTS[2]
    bottleneck = st.name(b, pp)
    mem_stage = Stages.of_split(split).name(membd.stage, pp)
    mflops, hflops, peak = step.model_flops, at(step.hardware_flops), step.peak_flops
    tokens = lay.tokens_per_step
    band = prediction_interval(system, load_stack(plan.stack), model.moe is not None)
    generation = system.accelerator.generation_name
    low, high, wider, far = (band.bounds(regimes_of(plan), generation, plan.precision, gpus, pinned(plan.stack))
                             if band else (0.0, 0.0, [], []))
    return Estimate(
        model=model.name, hardware=system.name, gpus=gpus, params=model.n_params(),
        step_time_s=step_s, tokens_per_s=tokens / step_s,
        step_time_s_low=step_s * (1 + low) if band else None,
        step_time_s_high=step_s * (1 + high) if band else None,
        interval_source=(f"{band.coverage:.0%} interval from {band.rows} runs"
                         + (f" ({band.held_out:.0%} of held-out dev-set groups' runs inside)"
                            if band.held_out is not None else "")
                         + (f", wider for {' and '.join(f'{REGIMES[r]} ({band.regimes[r].rows} runs)' for r in wider)}"
                            if wider else "")
                         + extrapolation_text(band, far, generation, plan.precision, gpus, pinned(plan.stack))
                         + f": {band.source}") if band else "",
        tokens_per_s_per_gpu=tokens / step_s / gpus,
        model_tflops_per_gpu=mflops / step_s / gpus / 1e12, mfu=mflops / (step_s * gpus * peak),
        hfu=hflops / (step_s * gpus * peak), mfu_peak_dtype=step.peak_dtype,
        fits_in_memory=fits, memory_verdict=verdict, memory_capacity_bytes=cap, memory_headroom=step.headroom,
        memory_budget_bytes=step.budget, memory_free_bytes=step.budget - membd.memory_bytes.reserved,
        memory_room_bytes=room, **dict(zip(("memory_band_low_bytes", "memory_band_high_bytes"),
                                           band_ends(reserved, room, step.budget, step.limit, step.headroom))),
        memory_band_source=reserved_band(plan.stack).source,
        memory_stage=mem_stage, memory_rank=membd.ranks, memory_bytes=membd.memory_bytes, memory_ranks=ranks,
        time_s=time_s, host=host_summary(model, system, plan, step, time_s, i), host_s=host_s, host_bound=host_s >= time_s.total - time_s.host - time_s.overhead > 0,
        model_flops_per_step=mflops, hardware_flops_per_step=hflops, num_microbatches=m,
        stage_layers=split, bottleneck_stage=bottleneck, stages=stage_times(step, i, split, model.mtp_layers),
        ops=ops, comms=comms, plan=plan,
        notes=notes_of(model, system, plan, step, fast, fits, membd.memory_bytes, mem_stage, time_s, i),
        clock=clock_power(system, step, time_s, clock),
    )


def clock_power(system: System, step: Step, time_s: TimeBreakdown, clock: float) -> ClockPower | None:
    """Plan's clock and power (cost.power) from its time breakdown at that clock; None without a power model. On a
    spec calibrated from runs the breakdown carries the fit's speeds too: the power is of the parts as reported."""
    power = system.accelerator.power
    if power is None:
        return None
    time = time_s.model_dump()
    sec, watts = phase_seconds(time), phase_watts(power, clock)
    return ClockPower(clock=clock, loop_clock=loop_clock(power), power_w=float(average_watts(power, time, clock)),
                      limit_w=power.limit_w, watts={k: float(v) for k, v in watts.items()},
                      seconds={k: float(v) for k, v in sec.items()}, energy_j=float(step_energy_j(power, time, clock)))


def estimate(model: ModelConfig | str, hardware: System | str, plan: Plan | dict,
             headroom: float = DEFAULT_HEADROOM) -> Estimate:
    """Predict one training step of `plan` for `model` on `hardware` (objects, preset names or file paths);
    `headroom`: the share of the allocator's room the fit test keeps free (`cost.memory.fit.memory_budget`)."""
    return evaluate_plan(model, hardware, plan, headroom)[1]


def evaluate_plan(model: ModelConfig | str, hardware: System | str, plan: Plan | dict,
                  headroom: float = DEFAULT_HEADROOM) -> tuple[Step, Estimate]:
    """`estimate`, and the evaluated step it reports (what PaSE's tables take their reference from,
    `cost.pase.tables.cost_tables`), so that a caller needing both evaluates the plan once."""
    model, system = load_model(model), load_hardware(hardware)
    if isinstance(plan, dict):
        plan = Plan(**plan)
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a perfmodel.Plan (or a dict of its fields), got {type(plan).__name__}")
    plan = resolve(plan, model, system)
    step = evaluate(model, system, Layouts.from_plan(plan), headroom=headroom)
    return step, report_plan(model, system, step, 0)


def prediction_of(est: Estimate) -> Prediction:
    """The headline numbers a plan file records."""
    return Prediction(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s, mfu=est.mfu,
                      memory_bytes=est.memory_bytes.reserved, memory_capacity_bytes=est.memory_capacity_bytes,
                      memory_headroom=est.memory_headroom, fits_in_memory=est.fits_in_memory)


def check_prediction(model: ModelConfig, system: System, plan: Plan, prediction: Prediction,
                     where: str = "plan file") -> Estimate:
    """This perfmodel's estimate of a plan file's plan; InputError if the file's `prediction` is not it (the file
    was edited, or written by another version): one line naming the field, the file's value and the estimate."""
    est = estimate(model, system, plan, prediction.memory_headroom)
    now = prediction_of(est).model_dump()
    for field, value in prediction.model_dump().items():
        same = value == now[field] if isinstance(value, bool) else abs(value - now[field]) <= 1e-6 * abs(now[field])
        if not same:
            raise InputError(f"{where}: prediction.{field} = {value!r} disagrees with this perfmodel's estimate of "
                             f"the plan ({now[field]!r}); the file was edited or written by another version: "
                             "re-create it (perfmodel search ... --output FILE or perfmodel predict ... "
                             "--save-plan FILE)")
    return est
