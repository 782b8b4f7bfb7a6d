"""Text rendering of results and catalogue entries for the CLI (no modelling here)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..spec.hardware.system import System
from ..spec.model.config import ModelConfig
from ..spec.result import Estimate
from ..spec.stack.profile import load_stack

GiB = 2**30


def _t(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _band(e: Estimate) -> str:
    """'  (-9% / +6%, 80% interval ...)' where the estimate has a prediction interval."""
    if e.step_time_s_low is None:
        return ""
    lo, hi = e.step_time_s_low / e.step_time_s - 1, e.step_time_s_high / e.step_time_s - 1
    return f"  ({100 * lo:+.0f}% / {100 * hi:+.0f}%, {e.interval_source.split(':')[0]})"


def lora_text(lora) -> str:
    """' lora=r16 attention base=fp8' for a LoRA fine-tune (Plan.lora), '' when every weight trains."""
    return "" if lora is None else f" lora=r{lora.rank} {lora.modules} base={lora.base_weights}"


def memory_verdict(e: Estimate) -> str:
    """Whether the plan fits, in which view, on which ranks, with what room, against the estimate's band: one line."""
    r, room = e.memory_bytes.reserved / GiB, e.memory_room_bytes / GiB
    low, high = e.memory_band_low_bytes / GiB, e.memory_band_high_bytes / GiB
    keep = room * (1 - e.memory_headroom)
    band = (f"reserved view {r:.1f} GiB, {low:.1f}-{high:.1f} GiB with the band the measured peaks give "
            f"the estimate, against {room:.1f} GiB = capacity - runtime"
            + (f" less the {e.memory_headroom:.0%} headroom ({keep:.1f} GiB)" if e.memory_headroom else ""))
    if e.memory_verdict == "fits":
        return (f"yes: {keep - high:.1f} GiB to spare at the band's upper end on ranks {e.memory_rank} "
                f"({e.memory_stage} stage), the fullest; {band}")
    parts = {k: getattr(e.memory_bytes, k) for k in ("weights", "gradients", "optimizer", "activations", "transient")}
    big = max(parts, key=parts.get)
    decides = f"{big} ({parts[big] / GiB:.1f} GiB) the largest part"
    if e.memory_verdict == "tight":
        return (f"tight: on ranks {e.memory_rank} ({e.memory_stage} stage) the room lies inside the band, "
                f"{high - keep:.1f} GiB below its upper end; {decides}; {band}")
    short = low - room
    if short <= 0:  # the device fits: the host memory the offloaded tensors need does not (cost.memory.fit)
        return (f"NO: ranks {e.memory_rank} ({e.memory_stage} stage) offload {e.memory_bytes.host / GiB:.1f} GiB "
                f"each to host memory, more than {e.hardware}'s host holds per device (System.host.memory_gib)")
    return (f"NO: ranks {e.memory_rank} ({e.memory_stage} stage) are short by {short:.1f} GiB beyond the band of the "
            f"{room:.1f} GiB the allocator can reserve; {decides}; {band}")


def unfit_plan_file(e: Estimate, flag: str, path, strict: bool) -> str | None:
    """What writing the plan file of a plan the memory model says does not fit says (None where it fits or is tight):
    with `strict`, the refusal (InputError: nothing written); else the line printed beside "wrote PATH", with the
    verdict, by how much and which part decides it (memory_verdict). A plan the user describes (flags, a plan file,
    their framework's config) is written whatever the verdict: published runs that ran are said not to fit at times,
    and the user knows their cluster. The search writes only plans that fit (search.ranking)."""
    if e.memory_verdict != "does not fit":
        return None
    verdict = memory_verdict(e).removeprefix("NO: ")
    if strict:
        raise InputError(f"{flag} {path}: not written (--strict), the plan does not fit in memory: {verdict}; valid: "
                         "a plan that fits, or drop --strict to write it with its verdict")
    return f"{flag} {path}: written although the memory model says it does not fit: {verdict}"


def host_lines(e) -> list[str]:
    """The host's part of the breakdown (spec.result.HostSummary): what launching the step costs, a layer's calls by
    kind, and whether the step is host-bound."""
    h = e.host
    if h is None:
        whole = load_stack(e.plan.stack).host is None
        why = ("the stack runs one XLA executable per step" if whole else
               "the system names no host_cpu: --host NAME prices one of `perfmodel hardware hosts`, and `perfmodel "
               "calibrate --device cuda --host-only` measures this machine's")
        return [f"  host: not priced ({why})"]
    wait = h.wait_s / e.time_s.total if e.time_s.total > 0 else 0.0
    verdict = ("its launches add to the step (a CPU device computes on the host thread that launches)" if h.serial else
               "host-bound: the step is as long as the host takes to launch it" if e.host_bound else
               f"partly host-bound: the device waits {_t(h.wait_s)} on it ({_pct(wait)})" if wait >= 0.05 else
               f"not host-bound: the device waits {_t(h.wait_s)} on it ({_pct(wait)}: after synchronisations)"
               if h.wait_s > 0 else "not host-bound: the device hides it")
    calls = lambda c: ", ".join(f"{n:g} {k}" for k, n in sorted(c.items(), key=lambda x: -x[1]) if n)  # noqa: E731
    return [f"  host {h.host}: {_t(h.launch_s)} per step launching it ({_pct(h.share)} of the step); {verdict}",
            f"    a layer per micro-batch: forward {_t(h.layer_forward_s)} of host for {_t(h.layer_forward_device_s)} "
            f"of device, backward {_t(h.layer_backward_s)} for {_t(h.layer_backward_device_s)}",
            f"    a layer's calls: forward {calls(h.layer_forward_calls) or 'none'}; backward "
            f"{calls(h.layer_backward_calls) or 'none'}; its collectives, ZeRO-3 hooks and the step's optimizer loop "
            f"priced beside them ({h.source}; cost.host.launch_queue)"]


def clock_lines(e) -> list[str]:
    """The clock the step's compute ran at under the board limit, and its power (spec.result.ClockPower)."""
    c = e.clock
    if c is None:
        return []
    kinds = ", ".join(f"{k} {_t(c.seconds[k])} at {c.watts[k]:.0f} W" for k in c.seconds if c.seconds[k] > 0)
    return [f"  clock: compute at {c.clock:.3f} of the kernel tables' clock (a GEMM looping alone: {c.loop_clock:.3f}); "
            f"mean {c.power_w:.0f} W of the {c.limit_w:.0f} W limit, {c.energy_j / 1e3:.2f} kJ per step per device "
            f"({kinds}; cost.power)"]


def memory_table(e: Estimate) -> list[str]:
    """The fullest rank's parts and views, then one row per pipeline stage."""
    lines = [f"Memory per device, ranks {e.memory_rank} ({e.memory_stage} stage, the fullest): parts, then views "
             "(allocated = torch max_memory_allocated, reserved = max_memory_reserved, device = nvidia-smi)"]
    for k, v in e.memory_bytes.model_dump().items():
        lines.append(f"  {k:<14}{v / GiB:>9.2f} GiB")
    if len(e.memory_ranks) > 1:
        lines += ["", f"  {'stage':<7}{'ranks':<14}{'layers':>7}{'allocated':>11}{'reserved':>10}{'device':>9}"
                      f"{'between steps':>15}  (GiB)"]
        for r in e.memory_ranks:
            m = r.memory_bytes
            lines.append(f"  {r.stage:<7}{r.ranks:<14}{r.layers:>7}{m.allocated / GiB:>11.2f}{m.reserved / GiB:>10.2f}"
                         f"{m.device / GiB:>9.2f}{m.between_steps / GiB:>15.2f}")
    return lines


def estimate_table(e: Estimate) -> str:
    p = e.plan
    lines = []
    rep = f" (dp_replicate={p.dp_replicate})" if p.dp_replicate > 1 else ""
    layout = (f"tp={p.tp} pp={p.pp} dp={p.dp}{rep} cp={p.cp} vpp={p.vpp} sp={'on' if p.sequence_parallel else 'off'} "
              f"zero={p.zero} recompute={p.recompute}"
              f"{'[' + ','.join(p.recompute_saved) + ']' if p.recompute == 'names' else ''}"
              f"{' offloaded=' + ','.join(p.recompute_offloaded) if p.recompute_offloaded else ''}"
              f"{f' loss_chunks={p.loss_chunks}' if p.loss_chunks > 1 else ''}"
              f"{' optimizer_offload' if p.optimizer_offload else ''} precision={p.precision}"
              f"{f' ({p.fp8_recipe})' if p.fp8_recipe else ''} "
              f"schedule={p.schedule}"
              f"{lora_text(p.lora)}")
    if (p.ep > 1 or p.etp > 1 or p.moe_dispatcher != "alltoall" or p.expert_imbalance != 1 or p.moe_overlap
            or p.moe_capacity_factor is not None):
        cap = ("" if p.moe_capacity_factor is None else
               f" capacity={p.moe_capacity_factor:g}{' padded' if p.moe_pad_to_capacity else ' (drops)'}")
        layout += (f"\n  experts: ep={p.ep} etp={p.etp} edp={p.edp} dispatcher={p.moe_dispatcher} "
                   f"imbalance={p.expert_imbalance:g}{cap} overlap={'on' if p.moe_overlap else 'off'}"
                   f"{f' cuda_graphs={p.cuda_graphs}' if p.cuda_graphs else ''}{release_text(p)}")
    lines.append(f"{e.model} ({e.params / 1e9:.2f}B params) on {e.gpus} x {e.hardware}")
    lines.append(f"  {layout}")
    lines.append(f"  micro_batch={p.micro_batch} global_batch={p.global_batch} seq_len={p.seq_len} "
                 f"micro-batches/step={e.num_microbatches} attention={p.attention} stack={p.stack}")
    if p.grad_compression != "none" or p.grad_dtype != "fp32":
        rank = f" rank {p.powersgd_rank}" if p.grad_compression == "powersgd" else ""
        lines.append(f"  gradients: {p.grad_dtype}, reduced as {p.grad_compression}{rank} (cost.comm.compression)")
    if (p.weight_dtype, p.moment_dtype) != ("fp32", "fp32"):
        master = "an fp32 master" if p.weight_dtype == "fp32" else "no fp32 master"
        lines.append(f"  weights stored in {p.weight_dtype} ({master}), Adam moments in {p.moment_dtype} (cost.memory.states)")
    lines.append("")
    fit = memory_verdict(e)
    head = [
        ("step time", _t(e.step_time_s) + _band(e)),
        ("tokens/s", f"{e.tokens_per_s:,.0f}  ({e.tokens_per_s_per_gpu:,.0f} per device)"),
        ("model TFLOP/s per device", f"{e.model_tflops_per_gpu:.1f}"),
        ("MFU / HFU", f"{_pct(e.mfu)} / {_pct(e.hfu)}  (vs dense {e.mfu_peak_dtype} peak)"),
        ("peak memory per device", f"{e.memory_bytes.allocated / GiB:.1f} GiB allocated, "
                                   f"{e.memory_bytes.reserved / GiB:.1f} reserved, {e.memory_bytes.device / GiB:.1f} "
                                   f"on the device of {e.memory_capacity_bytes / GiB:.0f} GiB (ranks "
                                   f"{e.memory_rank}, {e.memory_stage} stage)"),
        ("fits in memory", fit),
    ]
    w = max(len(k) for k, _ in head)
    lines += [f"{k:<{w}}  {v}" for k, v in head]
    lines.append("")
    lines.append(f"Time per step ({e.bottleneck_stage} stage, the slowest; parts sum to the step)")
    tb = e.time_s.model_dump()
    total = tb.pop("total")
    for k, v in tb.items():
        if v > 0:
            lines.append(f"  {k:<14}{_t(v):>12}  {_pct(v / total):>6}")
    lines.append(f"  {'total':<14}{_t(total):>12}")
    lines += host_lines(e) + clock_lines(e)
    lines.append("")
    lines += memory_table(e)
    lines.append("")
    lines.append("Ops per micro-batch on that stage (layer ops: per layer)")
    by = max([len("priced by")] + [len(o.priced_by) for o in e.ops]) + 2
    lines.append(f"  {'op':<20}{'where':<10}{'kind':<13}{'fwd':>10}{'bwd':>10}{'recomp':>10}  {'priced by':<{by}}formula")
    for o in e.ops:
        lines.append(f"  {o.name:<20}{o.where:<10}{o.kind:<13}{_t(o.fwd_s):>10}{_t(o.bwd_s):>10}"
                     f"{_t(o.recompute_s):>10}  {o.priced_by:<{by}}{o.formula}")
    if e.comms:
        lines.append("")
        lines.append("Communication per step")
        lines.append(f"  {'pattern':<42}{'collective':<30}{'group':<14}{'tiers':<28}{'MB/call':>9}{'calls':>8}"
                     f"{'total':>11}{'exposed':>11}  priced by")
        for c in e.comms:
            lines.append(f"  {c.name:<42}{c.collective:<30}{c.group + ' x' + str(c.group_size):<14}{c.tiers:<28}"
                         f"{c.bytes / 1e6:>9.1f}{c.calls:>8.0f}{_t(c.total_s):>11}{_t(c.exposed_s):>11}  {c.priced_by}")
    if e.notes:
        lines.append("")
        lines += [f"note: {n}" for n in e.notes]
    return "\n".join(lines)


def hardware_table(s: System) -> str:
    a = s.accelerator
    lines = [f"{s.name}: {s.description}", f"  accelerator {a.name} ({a.vendor})"]
    lines.append("  dense peak TFLOP/s: " + ", ".join(f"{k} {v:g}" for k, v in a.peak_tflops.items()))
    lines.append(f"  HBM {a.hbm_capacity_gib:g} GiB at {a.hbm_bandwidth_tbps:g} TB/s; TDP "
                 f"{'n/a' if a.tdp_w is None else f'{a.tdp_w:g} W'}; {a.compute_units} compute units")
    lines.append("  network tiers (innermost first):")
    for t in s.tiers:
        size = "all devices" if t.domain_size is None else f"domain {t.domain_size}"
        topo = f"torus {'x'.join(map(str, t.torus_dims))}" if t.topology == "torus" else t.topology
        lines.append(f"    {t.name:<12} {size:<14} {topo:<14} {t.bandwidth_gbps:g} GB/s, {t.latency_us:g} us/step, "
                     f"collective efficiency {t.collective_efficiency:g}")
        for kind, groups in t.by_group.items():
            lines.append(f"      measured {kind}: " + ", ".join(
                f"{n} GPUs {t.bandwidth_gbps * f.collective_efficiency:.0f} GB/s {f.latency_us:g} us"
                for n, f in sorted(groups.items(), key=lambda kv: int(kv[0]))))
    e = s.efficiency
    lines.append("  efficiency: matmul " + ", ".join(f"{k} {v:g}" for k, v in e.matmul_max.items())
                 + f" (tile {e.matmul_tile[0]}x{e.matmul_tile[1]}); attention {e.attention_max:g} "
                 f"(half at {e.attention_half_seq:g} keys); memory bandwidth {e.memory_bandwidth:g}; "
                 f"sustained in a step {e.sustained_fraction:g}")
    lines.append(f"  memory overhead {s.memory_overhead_gib:g} GiB per device"
                 + (f"; at most {s.max_devices} devices" if s.max_devices else ""))
    if a.kernel_tables:
        from ..spec.hardware.kernel_tables import table_dtypes

        for kind, path in a.kernel_tables.items():
            shown = path  # a catalogue table by its name; one outside it (held by its absolute path) by whose it is
            if Path(path).is_absolute():
                whose = ("this machine's own, measured by perfmodel calibrate" if "perfmodel calibrate" in
                         a.sources.get("kernel_tables", "") else "the spec's own")
                shown = f"{Path(path).name} ({whose}, not the catalogue's; at {path})"
            if kind == "attention":
                from ..cost.compute.kernels import backward_rate

                which = ("the flash attention of stacks running the part's own kernel (attention_native)"
                         if a.attention_table_kernel == "native" else "every stack's flash attention")
                how = "measured" if a.attention_backward_rate else "FlashAttention-2's, Dao 2023"
                lines.append(f"  kernel tables: attention {shown} (measured {a.attention_table_kernel} forward, "
                             f"bf16: prices {which}, backward at {backward_rate(a):.3f} of its rate ({how}), / sustained "
                             f"{e.sustained_fraction:g}; other stacks from the efficiency line above)")
                continue
            if kind == "allreduce":
                from ..spec.hardware.kernel_tables import allreduce_curves

                sizes = ", ".join(str(g) for g in sorted(allreduce_curves(path)))
                lines.append(f"  kernel tables: allreduce {shown} (measured on {sizes} GPUs: prices perfmodel "
                             "infer's tensor-parallel all-reduces within a node; training's collectives from the "
                             "tiers below)")
                continue
            if kind == "decode_attention":
                from ..spec.hardware.kernel_tables import decode_curves

                heads = len(decode_curves(path))
                lines.append(f"  kernel tables: decode_attention {shown} (measured, {heads} head layouts by KV dtype: "
                             "prices perfmodel infer's decode attention of those heads; others at the HBM rate)")
                continue
            if kind == "moe":
                from ..spec.hardware.kernel_tables import moe_curves

                shapes = len({k[1:5] for k in moe_curves(path).curves})
                lines.append(f"  kernel tables: moe {shown} (measured fused-MoE forward, {shapes} model shapes: prices "
                             f"perfmodel infer's MoE layers of those shapes, / sustained {e.sustained_fraction:g}; "
                             "training and other shapes from the GEMM table)")
                continue
            dtypes = ", ".join(sorted(table_dtypes(path)))
            lines.append(f"  kernel tables: {kind} {shown} (measured {dtypes}: prices a plan's GEMMs in those "
                         f"precisions, / sustained {e.sustained_fraction:g}; other precisions and kernels from the "
                         f"efficiency line above)")
    if a.gemm_power_w:
        lines.append("  GEMM power (measured): " + ", ".join(f"{d} {w:g} W" for d, w in a.gemm_power_w.items())
                     + (" (as AIConfigurator's collector read it)" if a.power else
                        " (the energy model's draw during GEMM time; board power elsewhere)"))
    if a.power:
        from ..cost.power import loop_clock

        p = a.power
        lines.append(f"  power: limit {p.limit_w:g} W over {p.window_s:g} s; idle {p.idle_w:g} W, memory-bound "
                     f"{p.memory_w:g} W, collectives {p.comm_w:g} W, compute {p.compute_w:g} W at the tables' clock "
                     f"(~ clock^{p.clock_exponent:g}): a GEMM looping alone keeps {loop_clock(p):.3f} of it; the "
                     f"tables are priced / (sustained {e.sustained_fraction:g} x {loop_clock(p):.3f}), each step at "
                     f"its own clock (cost.power)")
    lines += host_table(s.host_cpu)
    lines.append("  sources:")
    for owner, src in [(a.name, a.sources), *[(t.name, t.sources) for t in s.tiers],
                       ("efficiency", e.sources), (s.name, s.sources)]:
        for k, v in src.items():
            lines.append(f"    {owner}.{k}: {v}")
    return "\n".join(lines)


def host_table(h) -> list[str]:
    """A system's host (spec.host.cpu.HostCPU) for `hardware show` / `hardware hosts NAME`: the CPU, and each
    kind's seconds per call with its source."""
    from ..spec.host.cpu import CALL_KINDS

    if h is None:
        return ["  host: none named (the launch of kernels is not priced on this system)"]
    out = [f"  host {h.name}: {h.sockets}x {h.cpu}, {h.cores_per_socket} cores each ({h.description}); "
           f"speed {h.speed:.2f} of the DGX H100 host's", "    per call        us  source"]
    out += [f"    {k:<15}{h.calls.cost(k) * 1e6:>7.2f}  {h.sources[f'calls.{k}_s']}" for k in CALL_KINDS]
    return out + [f"    cpu: {h.sources.get('cpu', '')}"]


def model_row(name: str, m: ModelConfig) -> str:
    """One line of `perfmodel models list`: size (and active size, experts, MLA for a MoE model) and shape."""
    moe = f"  experts {m.moe.n_experts} top-{m.moe.top_k}, {m.active_params() / 1e9:.1f}B active" if m.moe else ""
    return (f"{name:<18}{m.n_params() / 1e9:>9.2f}B  layers {m.n_layers:<4} hidden {m.hidden:<6} "
            f"heads {m.n_heads}/{m.n_kv_heads:<4} vocab {m.vocab}{moe}{'  MLA' if m.mla else ''}")


def model_table(m: ModelConfig) -> str:
    rows = [("params", f"{m.n_params():,} ({m.n_params() / 1e9:.2f}B)"), ("layers", m.n_layers), ("hidden", m.hidden),
            ("heads / kv heads / head dim", f"{m.n_heads} / {m.n_kv_heads} / {m.head_dim}"),
            ("ffn hidden", f"{m.ffn_hidden} ({m.mlp})"), ("vocab", m.vocab), ("max seq len", m.max_seq_len),
            ("norm / position", f"{m.norm} / {m.position}"), ("tied embeddings", m.tie_embeddings),
            ("linear bias / dropout", f"{m.linear_bias} / {m.dropout}"),
            ("sliding window", m.sliding_window or "none"), ("source", m.source)]
    if m.global_attention is not None:  # Gemma 4: the full-attention layers' own head shape
        g = m.global_attention
        rows.insert(4, ("global layers' kv heads / head dim", f"{g.n_kv_heads} / {g.head_dim}"
                        + (" (keys = values)" if g.shared_kv else "")))
    w = max(len(k) for k, _ in rows)
    return "\n".join([m.name] + [f"  {k:<{w}}  {v}" for k, v in rows])


def search_table(result, rows, top: int = 0) -> str:
    """The ranked plans of a search (the rows given), its summary line and, for several GPU counts, the
    Pareto front of step time, GPUs and memory."""
    def fmt(df):
        out = df.copy()
        out["sequence_parallel"] = out["sequence_parallel"].map({True: "on", False: "off"})
        out["step_time_s"] = out["step_time_s"].map(lambda x: f"{x:.3f}")
        out["tokens_per_s"] = out["tokens_per_s"].map(lambda x: f"{x:,.0f}")
        out["mfu"] = out["mfu"].map(_pct)
        out["memory_gib"] = out["memory_gib"].map(lambda x: f"{x:.1f}")
        out["gpu_hours_per_step"] = out["gpu_hours_per_step"].map(lambda x: f"{x:.3f}")
        out["goodput"] = out["goodput"].map(_pct)
        for k in ("wall_s_per_step", "wall_gpu_hours_per_step", "energy_kwh_per_step"):
            out[k] = out[k].map(lambda x: "-" if x != x else f"{x:.4g}")  # NaN: no board power for energy
        out["memory_tight"] = out["memory_tight"].map({True: "tight", False: "fits"})
        if (out["dp_replicate"] == 1).all():  # hybrid sharding searched (--only dp_replicate=...) or not shown
            out = out.drop(columns=["dp_replicate"])
        out = out.drop(columns=["fits_in_memory"]).rename(columns={"memory_tight": "memory", "dp_replicate": "dp_rep",
            "sequence_parallel": "sp", "micro_batch": "mb", "memory_gib": "mem_gib", "account_for_embedding": "acc_emb",
            "account_for_loss": "acc_loss", "wall_s_per_step": "wall_s", "wall_gpu_hours_per_step": "wall_gpu_h",
            "gpu_hours_per_step": "gpu_h", "energy_kwh_per_step": "kwh", "remat_policy": "remat"})
        out.index = range(1, len(out) + 1)
        return out.to_string()

    j = result.job
    front = result.pareto()
    lines = [f"{result.model.name} on {result.system.name}: global_batch={j.global_batch} seq_len={j.seq_len} "
             f"precision={j.precision}{lora_text(j.lora)}; ranked by {result.objective}",
             result.summary(), ""]
    lines.append(fmt(rows))
    if result.counts["gpus"].nunique() > 1:
        lines += ["", "per GPU count:", result.counts.to_string(index=False, float_format=lambda x: f"{x:.2f}"),
                  "", "Pareto front (no plan is at least as good on step time, GPUs and memory, and better on one)"
                  + (f", fastest {top} per GPU count:" if top else ":"),
                  fmt(front.groupby("gpus", group_keys=False).head(top) if top else front)]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def whatif_table(across, ups=None) -> str:
    """The what-if rows (perfmodel.search.whatif): per system, then per upgrade, with the step's bound shares."""
    def fmt(w, first: str) -> str:
        df = w.table
        out = pd.DataFrame({first: df["system"], "best layout": df["layout"].fillna("-")})
        num = lambda col, f: df[col].map(lambda x: "-" if x is None or x != x else f(x))  # noqa: E731
        out["step s"] = num("step_time_s", lambda x: f"{x:.3f}")
        if first == "upgrade":
            out["speed-up"] = num("speedup", lambda x: f"{x:.2f}x")
        out["tokens/s"] = num("tokens_per_s", lambda x: f"{x:,.0f}")
        out["MFU"] = num("mfu", _pct)
        out["mem GiB"] = num("memory_gib", lambda x: f"{x:.1f}")
        for k in ("compute", "memory", "network", "bubble"):
            out[k] = num(f"{k}_share", _pct)
        lines = [out.to_string(index=False)]
        lines += [f"  {r.system}: {r.note}" for r in w.rows if r.note]
        return "\n".join(lines)

    head = (f"{across.model}: {across.gpus} devices, global batch {across.global_batch} x {across.seq_len} tokens, "
            f"{across.precision}; each system's best plan (searched); shares of the step: compute-bound kernels, "
            "memory-bound kernels and the optimizer, exposed communication, pipeline bubble")
    lines = [head, "", fmt(across, "system")]
    if ups is not None:
        lines += ["", f"single upgrades of {ups.rows[0].system} (x factor, each re-searched):", fmt(ups, "upgrade")]
    return "\n".join(lines)


def hardware_row(name: str, s) -> str:
    """One line of `perfmodel hardware list`: accelerator, bf16 peak, memory, the network tiers."""
    bw = " > ".join(f"{t.name} {t.bandwidth_gbps:g} GB/s" for t in s.tiers)
    return (f"{name:<16}{s.accelerator.name:<18}{s.accelerator.peak_tflops['bf16']:>8g} TF bf16  "
            f"{s.accelerator.hbm_capacity_gib:>5g} GiB  {bw}")


def release_text(p) -> str:
    """'\n  release megatron-bridge@26.08's recipe: ... (source)' where the plan's stack is a release line and the plan
    is a MoE plan (spec.stack.release), else ''."""
    from ..spec.stack.release import is_release, load_line, release_label, split_stack

    if not is_release(p.stack):
        return ""
    name, version = split_stack(p.stack)
    line = load_line(name)
    r = line.release(version)
    return (f"\n  {name}@{r.version} ({release_label(line, r)}) fills what the plan leaves unset from its MoE "
            f"recipes (perfmodel stacks show {name}@{r.version})")


def versus_table(e: Estimate, o: Estimate) -> str:
    """`predict --versus STACK`: the settings the two stacks (or releases) resolve differently, then the step's parts
    (TimeBreakdown) side by side, each with its change in seconds."""
    a, b = e.plan.model_dump(), o.plan.model_dump()
    lines = [f"versus {o.plan.stack}: the same flags resolved and priced under it"]
    lines += [f"  {k:<21}{_setting(a[k]):<28}{_setting(b[k])}" for k in a if a[k] != b[k]]
    lines.append(f"  {'part':<21}{e.plan.stack:>14}{o.plan.stack:>26}{'change':>12}")
    ta, tb = e.time_s.model_dump(), o.time_s.model_dump()
    for k in ta:
        if k != "total" and (ta[k] or tb[k]):
            lines.append(f"  {k:<21}{_t(ta[k]):>14}{_t(tb[k]):>26}{_signed(tb[k] - ta[k]):>12}")
    lines.append(f"  {'step':<21}{_t(e.step_time_s):>14}{_t(o.step_time_s):>26}{_signed(o.step_time_s - e.step_time_s):>12}")
    if e.clock is not None and o.clock is not None:  # compute parts differ by it where the mixes differ (cost.power)
        lines.append(f"  {'clock':<21}{e.clock.clock:>14.3f}{o.clock.clock:>26.3f}{o.clock.clock - e.clock.clock:>+12.3f}")
    return "\n".join(lines)


def _setting(v) -> str:
    if v is None:
        return "-"
    return ",".join(v) if isinstance(v, list) else ("on" if v is True else "off" if v is False else str(v))


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + _t(abs(seconds)).strip()
