"""One training step of one plan: compute, communication, pipeline and memory put together.

Step time = pipeline time of the m micro-batches (slowest stage, plus the bubble)
          + exposed data-parallel / ZeRO-1/2 communication + the optimizer step.
Per micro-batch, a stage costs its ops' forward, backward and recomputed forward (ops.py), plus the exposed
communication inside it: tensor-parallel collectives (never overlapped), context-parallel key/value exchange
(overlapped with the attention kernel), ZeRO-3 gathers and reduce-scatters (overlapped with the compute of the
layer they serve, the first gather exposed), and pipeline sends (exposed). Data-parallel gradient reduction
overlaps with the backward of the last micro-batch except its last layer's bucket; ZeRO-1/2 parameter gathers
overlap with the first forward of the next step likewise.
"""

from __future__ import annotations

import numpy as np

from ..hardware import System, load_hardware
from ..models import ModelConfig, load_model
from ..plan import Plan, resolve
from ..result import CommTime, Estimate, MemoryBreakdown, OpTime, TimeBreakdown
from . import comm as C
from .flops import model_flops_per_token, recompute_flops_per_token
from .memory import (GRAD_BYTES, embedding_activation_bytes, head_activation_bytes, layer_activation_bytes,
                     layer_params_per_device, stage_params_per_device, state_bytes)
from .ops import ACT_BYTES, Device, Op, embedding_ops, head_ops, layer_ops
from .pipeline import in_flight, pipeline_time, stage_layers

COMPUTE_KINDS = {"gemm": "gemm", "attention": "attention", "memory": "memory_bound"}
STAGE_PARTS = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm", "pp_comm", "zero3_comm")


def _sum_ops(ops: list[Op], recompute: str) -> dict[str, float]:
    """Per-micro-batch seconds of a list of ops, by breakdown part."""
    out = dict.fromkeys(STAGE_PARTS, 0.0)
    for op in ops:
        out[COMPUTE_KINDS[op.kind]] += float(op.fwd_s + op.bwd_s)
        out["recompute"] += float(op.recompute_s(recompute))
    return out


def _scale(d: dict, k: float) -> dict:
    return {key: v * k for key, v in d.items()}


def _add(*ds: dict) -> dict:
    out = dict.fromkeys(STAGE_PARTS, 0.0)
    for d in ds:
        for k, v in d.items():
            out[k] += v
    return out


def _overlapped(comm, window, pieces):
    """Exposed seconds of `comm` split into `pieces` equal buckets that overlap a `window` of compute:
    the last bucket always waits for the compute to end; the rest hides behind it until the window is full."""
    return max(comm / pieces, comm - window * (1 - 1 / pieces)) if comm > 0 else 0.0


def estimate(model: ModelConfig | str, hardware: System | str, plan: Plan) -> Estimate:
    """Predict one training step of `plan` for `model` on `hardware` (objects, preset names or file paths)."""
    model, system = load_model(model), load_hardware(hardware)
    plan = resolve(plan, model, system)
    dev = Device(model, system, plan)
    t, cp, dp, pp, v = plan.tp, plan.cp, plan.dp, plan.pp, plan.vpp
    m = plan.num_microbatches
    rc = plan.recompute
    gbytes = GRAD_BYTES[plan.grad_dtype]
    comms: list[CommTime] = []

    L_ops, E_ops, H_ops = layer_ops(dev), embedding_ops(dev), head_ops(dev)
    layer = _sum_ops(L_ops, rc)
    emb = _sum_ops(E_ops, rc)
    head = _sum_ops(H_ops, rc)
    fwd_of = lambda ops: sum(float(op.fwd_s) for op in ops)
    bwd_of = lambda ops: sum(float(op.bwd_s + op.recompute_s(rc)) for op in ops)  # backward incl. recompute
    layer_fwd, layer_bwd = fwd_of(L_ops), bwd_of(L_ops)

    # --- tensor parallel: activations of T tokens x hidden, bf16, per collective --------------------------
    s_tp = dev.tokens * model.hidden * ACT_BYTES
    tp_ph = C.group_phases(system, t, 1)
    ar = float(C.collective_time("all_reduce", s_tp, tp_ph)) if t > 1 else 0.0
    ag = float(C.collective_time("all_gather", s_tp, tp_ph)) if t > 1 else 0.0
    if plan.sequence_parallel:  # 2 all-gathers + 2 reduce-scatters per layer per direction
        tp_layer_fwd, names = 2 * ag + 2 * ag, ("all_gather+reduce_scatter", 4)
        emb_tp, head_tp = ag + ag, ag + ag  # RS after lookup / AG in backward; AG before LM head / RS in backward
    else:  # 2 all-reduces per layer per direction (Shoeybi et al. 2019, Fig. 4)
        tp_layer_fwd, names = 2 * ar, ("all_reduce", 2)
        emb_tp, head_tp = ar, ar  # all-reduce of the lookup / of the LM-head input gradient
    ce_tp = 3 * float(C.collective_time("all_reduce", dev.tokens * 4, tp_ph)) if t > 1 else 0.0  # max, sum, target
    tp_layer = tp_layer_fwd * (3 if rc == "full" else 2)
    # Busy time of a layer (compute and exposed comm) per direction: what ZeRO/DP collectives can hide behind.
    layer_fwd += tp_layer_fwd
    layer_bwd += tp_layer - tp_layer_fwd
    layer["tp_comm"] += tp_layer
    emb["tp_comm"] += emb_tp
    head["tp_comm"] += head_tp + ce_tp
    if t > 1:
        calls = names[1] * (3 if rc == "full" else 2) * model.n_layers / pp
        comms.append(CommTime(name="tp activations", collective=names[0], group="tp", group_size=t,
                              tiers=C.describe(tp_ph), bytes=s_tp, calls=calls * m,
                              seconds_per_call=tp_layer_fwd / names[1], total_s=tp_layer * m * model.n_layers / pp,
                              exposed_s=tp_layer * m * model.n_layers / pp))

    # --- context parallel: all-gather K and V of the whole sequence, reduce-scatter their gradients --------
    if cp > 1:
        cp_ph = C.group_phases(system, cp, t)
        s_kv = plan.micro_batch * plan.seq_len * 2 * model.kv_dim / t * ACT_BYTES
        cp_ag = float(C.collective_time("all_gather", s_kv, cp_ph))
        attn = [op for op in L_ops if op.kind == "attention" or op.name.startswith("attn")]
        a_f = sum(float(op.fwd_s) for op in attn)
        a_b = sum(float(op.bwd_s) for op in attn)
        exp_f = max(0.0, cp_ag - a_f)
        exp_b = max(0.0, 2 * cp_ag - a_b) + (exp_f if rc in ("full", "selective") else 0.0)
        cp_layer = exp_f + exp_b
        layer["cp_comm"] += cp_layer
        layer_fwd += exp_f
        layer_bwd += exp_b
        n_calls = (3 + (1 if rc != "none" else 0)) * model.n_layers / pp * m
        comms.append(CommTime(name="cp key/value exchange", collective="all_gather+reduce_scatter", group="cp",
                              group_size=cp, tiers=C.describe(cp_ph), bytes=s_kv, calls=n_calls,
                              seconds_per_call=cp_ag, total_s=cp_ag * n_calls,
                              exposed_s=cp_layer * m * model.n_layers / pp))

    # --- ZeRO-3: gather each layer's weights before its forward and backward, reduce-scatter its grads ----
    shard = dp * cp
    dp_ph = C.group_phases(system, shard, t)
    p_layer = layer_params_per_device(model, t)
    z3_first = 0.0
    if plan.zero == 3 and shard > 1:
        ag_l = float(C.collective_time("all_gather", p_layer * 2, dp_ph))
        rs_l = float(C.collective_time("reduce_scatter", p_layer * gbytes, dp_ph))
        if plan.overlap_dp_comm:
            z3_layer = max(0.0, ag_l - layer_fwd) + max(0.0, ag_l + rs_l - layer_bwd)
        else:
            z3_layer = 2 * ag_l + rs_l
        layer["zero3_comm"] += z3_layer
        z3_first = ag_l  # nothing to hide the first gather behind
        n_layers_stage = model.n_layers / pp
        comms.append(CommTime(name="zero3 weight gathers (fwd+bwd)", collective="all_gather", group="dp",
                              group_size=shard, tiers=C.describe(dp_ph), bytes=p_layer * 2,
                              calls=2 * n_layers_stage * m, seconds_per_call=ag_l,
                              total_s=2 * ag_l * n_layers_stage * m,
                              exposed_s=(z3_layer + z3_first / n_layers_stage) * n_layers_stage * m))
        comms.append(CommTime(name="zero3 gradient reduce-scatter", collective="reduce_scatter", group="dp",
                              group_size=shard, tiers=C.describe(dp_ph), bytes=p_layer * gbytes,
                              calls=n_layers_stage * m, seconds_per_call=rs_l, total_s=rs_l * n_layers_stage * m,
                              exposed_s=0.0))

    # --- pipeline: send activations forward and gradients backward at each chunk boundary ---------------
    p2p = 0.0
    if pp > 1:
        s_pp = dev.tokens * model.hidden * ACT_BYTES / (t if plan.sequence_parallel else 1)
        stride = t * cp * dp
        tier = C.p2p_tier(system, stride, pp)
        one = float(C.p2p_time(s_pp, tier.bandwidth * tier.collective_efficiency, tier.latency))
        p2p = 2 * v * one
        comms.append(CommTime(name="pp activations/gradients", collective="send/recv", group="pp", group_size=pp,
                              tiers=tier.name, bytes=s_pp, calls=2 * v * m, seconds_per_call=one,
                              total_s=p2p * m, exposed_s=p2p * m))

    # --- stages --------------------------------------------------------------------------------------------
    lf, lm, ll = stage_layers(model.n_layers, pp)
    link = {"pp_comm": p2p}
    z3 = {"zero3_comm": z3_first}
    if pp == 1:
        stages = {"stage 0": _add(_scale(layer, lf), emb, head, z3)}
    else:
        stages = {"first": _add(_scale(layer, lf), emb, link, z3), "last": _add(_scale(layer, ll), head, link, z3)}
        if pp > 2:
            stages["middle"] = _add(_scale(layer, lm), link, z3)
    per_mb = {k: sum(d.values()) for k, d in stages.items()}
    bottleneck = max(per_mb, key=per_mb.get)
    t_max = per_mb[bottleneck]
    total_all_stages = sum(_add(_scale(layer, model.n_layers), emb, head).values()) + pp * (p2p + z3_first)
    t_mean = total_all_stages / pp
    t_pipe = float(pipeline_time(m, t_max, t_mean, pp, v))
    bubble = t_pipe - m * t_max

    # --- data parallel (ZeRO 0/1/2) and optimizer, for the stage with the most parameters ------------------
    n_stage_layers = {"stage 0": lf, "first": lf, "middle": lm, "last": ll}
    params_of = {k: stage_params_per_device(model, t, pp, n_stage_layers[k], k in ("stage 0", "first"),
                                            k in ("stage 0", "last")) for k in stages}
    big = max(params_of, key=params_of.get)
    p_stage = params_of[big]
    nl = max(n_stage_layers[big], 1)
    fwd_mb = n_stage_layers[big] * layer_fwd + (fwd_of(E_ops) + emb_tp if big in ("stage 0", "first") else 0.0)
    bwd_mb = n_stage_layers[big] * layer_bwd + (bwd_of(H_ops) + head_tp if big in ("stage 0", "last") else 0.0)
    dp_exposed = 0.0
    if shard > 1 and plan.zero < 3:
        kind = "all_reduce" if plan.zero == 0 else "reduce_scatter"
        g_comm = float(C.collective_time(kind, p_stage * gbytes, dp_ph))
        reps = m if plan.zero == 2 else 1  # ZeRO-2 reduces every micro-batch (gradients are not kept whole)
        g_exp = reps * (_overlapped(g_comm, bwd_mb, nl) if plan.overlap_dp_comm else g_comm)
        comms.append(CommTime(name="dp gradient reduction", collective=kind, group="dp", group_size=shard,
                              tiers=C.describe(dp_ph), bytes=p_stage * gbytes, calls=reps, seconds_per_call=g_comm,
                              total_s=reps * g_comm, exposed_s=g_exp))
        dp_exposed += g_exp
        if plan.zero in (1, 2):
            w_comm = float(C.collective_time("all_gather", p_stage * 2, dp_ph))
            w_exp = _overlapped(w_comm, fwd_mb, nl) if plan.overlap_dp_comm else w_comm
            comms.append(CommTime(name="zero weight all-gather", collective="all_gather", group="dp",
                                  group_size=shard, tiers=C.describe(dp_ph), bytes=p_stage * 2, calls=1,
                                  seconds_per_call=w_comm, total_s=w_comm, exposed_s=w_exp))
            dp_exposed += w_exp
    opt_params = p_stage / (shard if plan.zero >= 1 else 1)
    # Adam step: read grad, m, v, master; write m, v, master, bf16 weight; plus the grad-norm read.
    t_opt = float(dev.memory(opt_params * (26 + 2 * gbytes)))

    step = t_pipe + dp_exposed + t_opt
    parts = _scale(stages[bottleneck], m)
    time_s = TimeBreakdown(**parts, dp_comm=dp_exposed, bubble=bubble, optimizer=t_opt, total=step)

    # --- memory, per candidate stage -----------------------------------------------------------------------
    mem = {}
    for k in stages:
        rank = {"stage 0": 0, "first": 0, "middle": 1, "last": pp - 1}[k]
        first, last = k in ("stage 0", "first"), k in ("stage 0", "last")
        chunks = float(in_flight(plan.schedule, pp, v, m, rank))
        act = layer_activation_bytes(model, plan) * n_stage_layers[k] / v * chunks
        if rc == "full":  # the layer being recomputed holds its full activations during its backward
            act += layer_activation_bytes(model, plan, "none")
        if first:
            act += embedding_activation_bytes(model, plan) * chunks / v
        if last:
            act += head_activation_bytes(model, plan) * (m if plan.schedule == "gpipe" else 1)
        st = state_bytes(params_of[k], plan)
        other = system.memory_overhead_bytes
        # Transient whole copies, never more than the sharding saved (a stage of one or two layers):
        freed = params_of[k] * (1 - 1 / shard)
        if plan.zero == 3 and shard > 1:  # two layers gathered (current + prefetch) and one layer's grads
            other += min(2 * p_layer, freed) * 2 + min(p_layer, freed) * gbytes
        elif plan.zero == 2 and shard > 1:  # one layer's gradients whole before their reduce-scatter
            other += min(p_layer, freed) * gbytes
        if plan.precision in ("fp8", "fp4"):  # cached narrow copies of the weights
            other += params_of[k] * (1.0 if plan.precision == "fp8" else 0.5) / (shard if plan.zero == 3 else 1)
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

    ops_out = []
    counts = {"layer": n_stage_layers[bottleneck], "embedding": 1, "head": 1}
    groups = [("layer", L_ops)]
    if bottleneck in ("stage 0", "first"):
        groups.append(("embedding", E_ops))
    if bottleneck in ("stage 0", "last"):
        groups.append(("head", H_ops))
    for where, ops in groups:
        for op in ops:
            ops_out.append(OpTime(name=op.name, where=where, kind=op.kind, count=counts[where],
                                  fwd_s=float(op.fwd_s), bwd_s=float(op.bwd_s),
                                  recompute_s=float(op.recompute_s(rc)), fwd_flops=float(op.fwd_flops),
                                  formula=op.formula))

    notes = [f"MFU/HFU against dense {peak_dtype} peak {peak / 1e12:.1f} TFLOP/s per device"]
    if not fits:
        notes.append(f"does not fit: needs {membd.total / 2**30:.1f} GiB > {cap / 2**30:.1f} GiB "
                     f"on the {mem_stage} stage (short by {(membd.total - cap) / 2**30:.1f} GiB)")
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
