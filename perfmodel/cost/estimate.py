"""One training step of one plan: compute, communication, pipeline and memory put together.

Step time = pipeline time of the m micro-batches (slowest stage, plus the bubble)
          + exposed data-parallel / ZeRO-1/2 communication + the optimizer step.
A stage is built from units (its layers, plus the embedding on the first stage and the LM head and loss on
the last). Per micro-batch a unit costs its ops' forward, backward and recomputed forward (ops.py) plus the
exposed communication it causes:
  - tensor-parallel collectives: never overlapped;
  - context-parallel key/value exchange: overlapped with the attention kernel;
  - ZeRO-3 weight gathers and gradient reduce-scatters: overlapped with the compute of the unit they serve,
    except the embedding's, which starts the forward and ends the backward with nothing to hide behind;
  - pipeline sends: exposed.
Per step: data-parallel gradient reduction (every micro-batch for ZeRO-2, once otherwise) overlaps the
backward of the last micro-batch except its last layer's bucket; ZeRO-1/2 weight gathers overlap the first
forward of the next step likewise; with pp > 1 and tied embeddings, the first and last stages all-reduce the
embedding gradient (exposed).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..hardware import System, load_hardware
from ..models import ModelConfig, load_model
from ..plan import Plan, resolve
from ..result import CommTime, Estimate, MemoryBreakdown, OpTime, TimeBreakdown
from . import comm as C
from .flops import model_flops_per_token, recompute_flops_per_token
from .memory import (GRAD_BYTES, WEIGHT_BYTES, embedding_activation_bytes, head_activation_bytes,
                     layer_activation_bytes, layer_params_per_device, stage_params_per_device, state_bytes)
from .ops import ACT_BYTES, GEMM_INPUT_BYTES, Device, Op, embedding_ops, head_ops, layer_ops, zero3_copy_op
from .pipeline import in_flight, pipeline_time, stage_layers

COMPUTE_PARTS = {"gemm": "gemm", "attention": "attention", "memory": "memory_bound"}
STAGE_PARTS = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm", "pp_comm", "zero3_comm")
UNITS = ("layer", "embedding", "head")


@dataclass
class Pattern:
    """A communication pattern of one unit (or of the step): per-call cost, calls and exposed seconds per micro-batch."""

    name: str
    collective: str
    group: str
    phases: list
    size: float
    seconds: float  # per call
    calls: float  # per unit per micro-batch (per step for unit "step")
    exposed: float  # seconds per unit per micro-batch (per step for unit "step")
    unit: str
    part: str  # TimeBreakdown field the exposed time is charged to

    def row(self, group_size: int, count: float) -> CommTime:
        name = self.name if self.unit in ("layer", "stage", "step") else f"{self.name} ({self.unit})"
        return CommTime(name=name, collective=self.collective, group=self.group, group_size=group_size,
                        tiers=self.phases if isinstance(self.phases, str) else C.describe(self.phases),
                        bytes=self.size, calls=self.calls * count, seconds_per_call=self.seconds,
                        total_s=self.seconds * self.calls * count, exposed_s=self.exposed * count)


def _overlapped(comm, window, pieces):
    """Exposed seconds of `comm` split into `pieces` equal buckets that overlap a `window` of compute:
    the last bucket always waits for the compute to end; the rest hides behind it until the window is full."""
    return max(comm / pieces, comm - window * (1 - 1 / pieces)) if comm > 0 else 0.0


def _unit_parts(ops: list[Op], recompute: str) -> dict[str, float]:
    """Per-micro-batch seconds of a unit's ops by breakdown part (recomputed forwards in `recompute`)."""
    out = dict.fromkeys(STAGE_PARTS, 0.0)
    for op in ops:
        out[COMPUTE_PARTS[op.kind]] += float(op.fwd_s + op.bwd_s)
        out["recompute"] += float(op.recompute_s(recompute))
    return out


def estimate(model: ModelConfig | str, hardware: System | str, plan: Plan | dict) -> Estimate:
    """Predict one training step of `plan` for `model` on `hardware` (objects, preset names or file paths)."""
    model, system = load_model(model), load_hardware(hardware)
    if isinstance(plan, dict):
        plan = Plan(**plan)
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a perfmodel.Plan (or a dict of its fields), got {type(plan).__name__}")
    plan = resolve(plan, model, system)
    dev = Device(model, system, plan)
    t, cp, pp, v = plan.tp, plan.cp, plan.pp, plan.vpp
    m, rc, shard = plan.num_microbatches, plan.recompute, plan.zero_shard
    gbytes = GRAD_BYTES[plan.grad_dtype]
    fwd_passes = 2 if rc == "full" else 1  # forwards a layer runs per micro-batch (its own + recomputed)

    ops = {"layer": layer_ops(dev), "embedding": embedding_ops(dev), "head": head_ops(dev)}
    p_layer = layer_params_per_device(model, t)
    p_emb = stage_params_per_device(model, t, pp, 0, True, False)
    p_head = stage_params_per_device(model, t, pp, 0, pp == 1, True) - (p_emb if pp == 1 else 0)
    zero3 = plan.zero == 3 and shard > 1
    if zero3:
        for unit, params in (("layer", p_layer), ("embedding", p_emb), ("head", p_head)):
            ops[unit].append(zero3_copy_op(dev, params, gbytes))
    parts = {u: _unit_parts(ops[u], rc) for u in UNITS}
    # Busy seconds per direction (compute, later + exposed comm): what ZeRO/DP collectives can hide behind.
    fwd = {u: sum(float(op.fwd_s) for op in ops[u]) for u in UNITS}
    bwd = {u: sum(float(op.bwd_s + op.recompute_s(rc)) for op in ops[u]) for u in UNITS}
    patterns: list[Pattern] = []

    def charge(p: Pattern, fwd_exposed: float = 0.0, bwd_exposed: float = 0.0):
        p.exposed = fwd_exposed + bwd_exposed
        parts[p.unit][p.part] += p.exposed
        fwd[p.unit] += fwd_exposed
        bwd[p.unit] += bwd_exposed
        patterns.append(p)

    # --- tensor parallel: activations of T tokens x hidden, bf16 -------------------------------------------
    if t > 1:
        s_tp = dev.tokens * model.hidden * ACT_BYTES
        tp_ph = C.group_phases(system, t, 1, plan.gpus)
        if plan.sequence_parallel:  # all-gather before / reduce-scatter after each TP region
            one, kind, per_dir = float(C.collective_time("all_gather", s_tp, tp_ph)), "all_gather / reduce_scatter", 4
        else:  # all-reduce after each row-parallel GEMM, in each direction (Shoeybi et al. 2019, Fig. 4)
            one, kind, per_dir = float(C.collective_time("all_reduce", s_tp, tp_ph)), "all_reduce", 2
        charge(Pattern("tp activations", kind, "tp", tp_ph, s_tp, one, per_dir * (fwd_passes + 1), 0, "layer",
                       "tp_comm"), per_dir * one, per_dir * one * fwd_passes)
        # embedding: reduce the vocab-parallel lookup (RS with SP; AR without), and with SP gather its grad;
        # head: gather the final-norm output (SP) and reduce the LM-head input gradient.
        n_emb = 2 if plan.sequence_parallel else 1
        charge(Pattern("tp embedding", kind, "tp", tp_ph, s_tp, one, n_emb, 0, "embedding", "tp_comm"),
               one, one * (n_emb - 1))
        n_head = 2 if plan.sequence_parallel else 1
        charge(Pattern("tp lm head", kind, "tp", tp_ph, s_tp, one, n_head, 0, "head", "tp_comm"),
               one * (n_head - 1), one)
        ce = float(C.collective_time("all_reduce", dev.tokens * 4, tp_ph))  # max, sum-exp, target logit (fp32)
        charge(Pattern("tp cross-entropy stats", "all_reduce", "tp", tp_ph, dev.tokens * 4, ce, 3, 0, "head",
                       "tp_comm"), 3 * ce)

    # --- context parallel: all-gather K and V of the sequence, reduce-scatter their gradients ---------------
    if cp > 1:
        cp_ph = C.group_phases(system, cp, t, plan.gpus)
        s_kv = plan.micro_batch * plan.seq_len * 2 * model.kv_dim / t * ACT_BYTES
        one = float(C.collective_time("all_gather", s_kv, cp_ph))
        attn = [op for op in ops["layer"] if op.kind == "attention" or op.name.startswith("attn")]
        a_f = sum(float(op.fwd_s) for op in attn)
        a_b = sum(float(op.bwd_s) for op in attn)
        again = rc in ("full", "selective")  # the recomputed attention needs K and V again
        exp_f = max(0.0, one - a_f)
        charge(Pattern("cp key/value exchange", "all_gather / reduce_scatter", "cp", cp_ph, s_kv, one,
                       3 + again, 0, "layer", "cp_comm"), exp_f, max(0.0, 2 * one - a_b) + exp_f * again)

    # --- ZeRO-3: gather a unit's weights before its forward and backward, reduce-scatter its gradients ------
    dp_ph = C.group_phases(system, shard, t, plan.gpus)
    if zero3:
        for unit, params in (("layer", p_layer), ("embedding", p_emb), ("head", p_head)):
            if params <= 0:
                continue
            ag = float(C.collective_time("all_gather", params * WEIGHT_BYTES, dp_ph))
            rs = float(C.collective_time("reduce_scatter", params * gbytes, dp_ph))
            # The embedding is first in the forward and last in the backward: nothing to hide behind.
            if not plan.overlap_dp_comm or unit == "embedding":
                e_f, e_b = ag, ag + rs
            else:
                e_f, e_b = max(0.0, ag - fwd[unit]), max(0.0, ag + rs - bwd[unit])
            share = ag / (ag + rs)  # split the backward exposure between the two rows by their traffic
            charge(Pattern("zero3 weight all-gather", "all_gather", "dp", dp_ph, params * WEIGHT_BYTES, ag, 2, 0,
                           unit, "zero3_comm"), e_f, e_b * share)
            charge(Pattern("zero3 gradient reduce-scatter", "reduce_scatter", "dp", dp_ph, params * gbytes, rs, 1,
                           0, unit, "zero3_comm"), 0.0, e_b * (1 - share))

    # --- pipeline: send activations forward and gradients backward at each chunk boundary ----------------
    p2p = 0.0
    pp_tier = C.p2p_tier(system, t * cp * plan.dp, pp)  # carries stage-to-stage sends and the tied-embedding sync
    if pp > 1:
        s_pp = dev.tokens * model.hidden * ACT_BYTES / plan.sp_divisor
        tier = pp_tier
        one = float(C.p2p_time(s_pp, tier.bandwidth * tier.collective_efficiency, tier.latency))
        p2p = 2 * v * one
        patterns.append(Pattern("pp activations/gradients", "send/recv", "pp", tier.name, s_pp, one, 2 * v, p2p,
                                "stage", "pp_comm"))

    # --- stages ----------------------------------------------------------------------------------------------
    lf, lm, ll = stage_layers(model.n_layers, pp)
    if pp == 1:
        counts = {"single": {"layer": lf, "embedding": 1, "head": 1}}
    else:
        counts = {"first": {"layer": lf, "embedding": 1, "head": 0}, "last": {"layer": ll, "embedding": 0, "head": 1}}
        if pp > 2:
            counts["middle"] = {"layer": lm, "embedding": 0, "head": 0}

    def stage_parts(c: dict) -> dict:
        out = dict.fromkeys(STAGE_PARTS, 0.0)
        for u in UNITS:
            for k in STAGE_PARTS:
                out[k] += parts[u][k] * c[u]
        out["pp_comm"] += p2p
        return out

    stages = {k: stage_parts(c) for k, c in counts.items()}
    per_mb = {k: sum(d.values()) for k, d in stages.items()}
    bottleneck = max(per_mb, key=per_mb.get)
    all_units = {"layer": model.n_layers, "embedding": 1, "head": 1}
    t_mean = (sum(sum(parts[u].values()) * all_units[u] for u in UNITS) + pp * p2p) / pp
    t_pipe = float(pipeline_time(m, per_mb[bottleneck], t_mean, pp, v))

    # --- data parallel (ZeRO 0/1/2), tied-embedding sync and optimizer, for the stage with most parameters -
    params_of = {k: stage_params_per_device(model, t, pp, c["layer"], c["embedding"] == 1, c["head"] == 1)
                 for k, c in counts.items()}
    big = max(params_of, key=params_of.get)
    p_stage, nl = params_of[big], max(counts[big]["layer"], 1)
    fwd_mb = sum(fwd[u] * counts[big][u] for u in UNITS)
    bwd_mb = sum(bwd[u] * counts[big][u] for u in UNITS)
    step_patterns: list[Pattern] = []
    if shard > 1 and plan.zero < 3:
        kind = "all_reduce" if plan.zero == 0 else "reduce_scatter"
        g = float(C.collective_time(kind, p_stage * gbytes, dp_ph))
        reps = m if plan.zero == 2 else 1  # ZeRO-2 reduces every micro-batch (gradients are not kept whole)
        exp = reps * (_overlapped(g, bwd_mb, nl) if plan.overlap_dp_comm else g)
        step_patterns.append(Pattern("dp gradient reduction", kind, "dp", dp_ph, p_stage * gbytes, g, reps, exp,
                                     "step", "dp_comm"))
        if plan.zero in (1, 2):
            w = float(C.collective_time("all_gather", p_stage * WEIGHT_BYTES, dp_ph))
            exp = _overlapped(w, fwd_mb, nl) if plan.overlap_dp_comm else w
            step_patterns.append(Pattern("zero weight all-gather", "all_gather", "dp", dp_ph, p_stage * WEIGHT_BYTES,
                                         w, 1, exp, "step", "dp_comm"))
    if pp > 1 and model.tie_embeddings:  # first and last stage hold copies of the embedding
        tier = pp_tier
        size = model.vocab * model.hidden / t * gbytes / (shard if plan.zero >= 2 else 1)  # the local gradient
        one = float(C.ring_allreduce_time(size, 2, tier.bandwidth * tier.collective_efficiency, tier.latency))
        step_patterns.append(Pattern("tied embedding gradient sync", "all_reduce", "embedding", tier.name, size,
                                     one, 1, one, "step", "dp_comm"))
    dp_exposed = sum(p.exposed for p in step_patterns)
    opt_params = p_stage / (shard if plan.zero >= 1 else 1)
    # Adam step: read grad, m, v, master; write m, v, master, bf16 weight; plus the grad-norm read.
    t_opt = float(dev.memory(opt_params * (26 + 2 * gbytes)))

    step = t_pipe + dp_exposed + t_opt
    time_s = TimeBreakdown(**{k: v_ * m for k, v_ in stages[bottleneck].items()}, dp_comm=dp_exposed,
                           bubble=t_pipe - m * per_mb[bottleneck], optimizer=t_opt, total=step)
    sizes = {"tp": t, "cp": cp, "dp": shard, "pp": pp, "embedding": 2}
    comms = []
    for p in patterns:
        count = m if p.unit == "stage" else counts[bottleneck][p.unit] * m
        if count:
            comms.append(p.row(sizes[p.group], count))
    comms += [p.row(sizes[p.group], 1) for p in step_patterns]

    # --- memory, per candidate stage -----------------------------------------------------------------------
    mem = {}
    for k, c in counts.items():
        rank = {"single": 0, "first": 0, "middle": 1, "last": pp - 1}[k]
        chunks = float(in_flight(plan.schedule, pp, v, m, rank))
        act = layer_activation_bytes(model, plan) * c["layer"] / v * chunks
        # The layer in its backward holds what recomputation rebuilt for it: all of its activations (full) or
        # its attention core (selective); its stored share is already counted above.
        act += layer_activation_bytes(model, plan, "none") - layer_activation_bytes(model, plan, rc)
        if c["embedding"]:
            act += embedding_activation_bytes(model, plan) * chunks / v
        if c["head"]:
            act += head_activation_bytes(model, plan) * (m if plan.schedule == "gpipe" else 1)
        st = state_bytes(params_of[k], plan)
        other = system.memory_overhead_bytes
        # Transient whole copies, never more than the sharding saved (a stage of one or two layers): the
        # largest unit on the stage gathered twice (current + prefetch) and its gradients once.
        freed = params_of[k] * (1 - 1 / shard)
        unit = max(p for p, u in ((p_layer, "layer"), (p_emb, "embedding"), (p_head, "head")) if c[u])
        if plan.zero == 3 and shard > 1:
            other += min(2 * unit, freed) * WEIGHT_BYTES + min(unit, freed) * gbytes
        elif plan.zero == 2 and shard > 1:  # one unit's gradients whole before their reduce-scatter
            other += min(unit, freed) * gbytes
        narrow = GEMM_INPUT_BYTES[plan.precision]
        if narrow < 2:  # cached narrow copies of the layers' projection weights (not embedding / LM head)
            other += c["layer"] * model.matmul_params_per_layer() / t * narrow / (shard if plan.zero == 3 else 1)
        total = st["weights"] + st["gradients"] + st["optimizer"] + act + other
        mem[k] = dict(st, activations=float(act), other=float(other), total=float(total))
    mem_stage = max(mem, key=lambda k: mem[k]["total"])
    membd = MemoryBreakdown(**{k: float(v_) for k, v_ in mem[mem_stage].items()})
    cap = system.accelerator.hbm_bytes
    fits = membd.total <= cap

    # --- FLOPs and headline numbers --------------------------------------------------------------------------
    tokens = plan.tokens_per_step
    mflops = tokens * model_flops_per_token(model, plan.seq_len)
    hflops = mflops + tokens * recompute_flops_per_token(model, plan.seq_len, rc)
    peak_dtype = plan.precision if plan.precision in ("fp8", "fp4") else "bf16"
    peak = system.accelerator.peak_flops(peak_dtype)
    gpus = plan.gpus

    ops_out = [OpTime(name=op.name, where=u, kind=op.kind, count=counts[bottleneck][u], fwd_s=float(op.fwd_s),
                      bwd_s=float(op.bwd_s), recompute_s=float(op.recompute_s(rc)), fwd_flops=float(op.fwd_flops),
                      formula=op.formula)
               for u in UNITS if counts[bottleneck][u] for op in ops[u]]

    notes = [f"MFU/HFU against dense {peak_dtype} peak {peak / 1e12:.1f} TFLOP/s per device"]
    if not fits:
        notes.append(f"does not fit: needs {membd.total / 2**30:.1f} GiB > {cap / 2**30:.1f} GiB "
                     f"on the {mem_stage} stage (short by {(membd.total - cap) / 2**30:.1f} GiB)")
    if v > 1 and model.n_layers % (pp * v):
        notes.append(f"{model.n_layers} layers do not split evenly into pp*vpp = {pp * v} chunks: chunks differ by "
                     "one layer (as in Megatron-LM's uneven first/last stages); activation memory uses the mean chunk")
    if model.position != "learned" and plan.seq_len > model.max_seq_len:
        notes.append(f"seq_len {plan.seq_len} exceeds the model's max_seq_len {model.max_seq_len}")

    return Estimate(
        model=model.name, hardware=system.name, gpus=gpus, params=model.n_params(),
        step_time_s=step, tokens_per_s=tokens / step, tokens_per_s_per_gpu=tokens / step / gpus,
        model_tflops_per_gpu=mflops / step / gpus / 1e12, mfu=mflops / (step * gpus * peak),
        hfu=hflops / (step * gpus * peak), mfu_peak_dtype=peak_dtype,
        fits_in_memory=fits, memory_capacity_bytes=cap, memory_shortfall_bytes=max(0.0, membd.total - cap),
        memory_stage=mem_stage, memory_bytes=membd, time_s=time_s,
        model_flops_per_step=mflops, hardware_flops_per_step=hflops, num_microbatches=m,
        stage_layers=[lf, lm, ll], bottleneck_stage=bottleneck, ops=ops_out, comms=comms, plan=plan, notes=notes,
    )
