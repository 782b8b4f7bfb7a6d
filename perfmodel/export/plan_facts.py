"""What every exporter says about a plan file: its summary, the prediction, the model's shape, the launch
geometry, the pipeline's virtual stages, and the placements that differ from Megatron-LM's pattern."""

from __future__ import annotations

import math

from ..spec.model.operators import AXES, megatron_dim, megatron_placement
from ..spec.plan.layout import chunk_layers
from ..spec.plan.file import OpPlacement, PlanFile

DEFAULT_DEVICES_PER_NODE = 8


def plan_change(pf: PlanFile, updates: dict, lines: list[str], field: str, new, why: str) -> None:
    """Record one nearest-plan change: updates[field] = new, and the line 'field old -> new: why' (booleans
    lower-case, as in plan files)."""
    def shown(v):
        return str(v).lower() if isinstance(v, bool) else v

    updates[field] = new
    if field == "precision" and new != "fp8" and pf.plan.fp8_recipe is not None:  # a recipe scales fp8 alone
        updates["fp8_recipe"] = None
    if field == "optimizer_offload" and not new:  # the update runs where the state is: on the device
        updates.update(optimizer_update="device", optimizer_offload_ratio=1.0)
    lines.append(f"{field} {shown(getattr(pf.plan, field))} -> {shown(new)}: {why}")


def grouped_dispatch(pf: PlanFile, updates: dict, lines: list[str], framework: str) -> None:
    """A framework that routes tokens to grouped GEMMs only (Megatron-Core, torchtitan, DeepSpeed): the plan's
    MaxText dense one-hot dispatch (Plan.moe_dense_dispatch) becomes its grouped path."""
    if pf.plan.moe_dense_dispatch:
        plan_change(pf, updates, lines, "moe_dense_dispatch", False, f"{framework} routes tokens to grouped expert "
                    "GEMMs; it has no one-hot dispatch into [experts, capacity] buffers (MaxText sparse_matmul: false)")


def summary(pf: PlanFile) -> str:
    p, m = pf.plan, pf.model
    layout = f"tp={p.tp} pp={p.pp} dp={p.dp} cp={p.cp}" + (f" vpp={p.vpp}" if p.vpp > 1 else "")
    if m.moe is not None:
        layout += f" ep={p.ep} etp={p.etp} edp={p.edp}"
    return (f"{m.name} on {pf.hardware.name} ({p.gpus} x {pf.hardware.accelerator.name}), {layout}, "
            f"micro_batch={p.micro_batch} global_batch={p.global_batch} seq_len={p.seq_len}")


def prediction(pf: PlanFile) -> str:
    r = pf.prediction
    return (f"perfmodel predicted step {r.step_time_s:.3g} s, {r.tokens_per_s:.4g} tokens/s, MFU {r.mfu:.1%}, "
            f"peak memory {r.memory_bytes / 2**30:.1f} of {r.memory_capacity_bytes / 2**30:.1f} GiB"
            + ("" if r.fits_in_memory else " (does NOT fit)"))


def shape(pf: PlanFile) -> str:
    m = pf.model
    return (f"n_layers={m.n_layers} hidden={m.hidden} n_heads={m.n_heads} n_kv_heads={m.n_kv_heads} "
            f"head_dim={m.head_dim} ffn_hidden={m.ffn_hidden} vocab={m.vocab} mlp={m.mlp} norm={m.norm} "
            f"position={m.position} tie_embeddings={m.tie_embeddings} linear_bias={m.linear_bias} "
            f"dropout={m.dropout}" + moe_shape(pf))


def moe_shape(pf: PlanFile) -> str:
    """The experts, latent attention and multi-token prediction of the model (shape's tail; '' for a dense
    model with grouped-query attention)."""
    m, out = pf.model, ""
    if m.moe is not None:
        e = m.moe
        out += (f" moe=(n_experts={e.n_experts} top_k={e.top_k} expert_ffn_hidden={e.expert_ffn_hidden} "
                f"n_shared_experts={e.n_shared_experts} shared_ffn_hidden={e.shared_ffn_hidden} "
                f"first_dense_layers={e.first_dense_layers} layer_freq={e.layer_freq} "
                f"router_scoring={e.router_scoring} router_bias={e.router_bias} expert_bias={e.expert_bias}; "
                f"{m.moe_layers()} MoE layers)")
    if m.mla is not None:
        a = m.mla
        out += (f" mla=(q_lora_rank={a.q_lora_rank} kv_lora_rank={a.kv_lora_rank} "
                f"qk_nope_head_dim={a.qk_nope_head_dim} qk_rope_head_dim={a.qk_rope_head_dim} "
                f"v_head_dim={a.v_head_dim})")
    if m.mtp_layers:
        out += f" mtp_layers={m.mtp_layers}"
    return out


def moe_layer_pattern(pf: PlanFile) -> list[int]:
    """1 for each MoE layer, 0 for each dense one, in layer order (ModelConfig.is_moe_layer)."""
    return [int(pf.model.is_moe_layer(i)) for i in range(pf.model.n_layers)]


def hardware_notes(pf: PlanFile) -> list[str]:
    acc = pf.hardware.accelerator.name
    if acc.lower().startswith("tpu"):
        return [(f"hardware {pf.hardware.name} ({acc}) is a TPU system: Megatron-LM, torchtitan and DeepSpeed run on "
                "CUDA/ROCm GPUs, so this configuration cannot run on it as is")]
    return []


def devices_per_node(pf: PlanFile) -> tuple[int, int, list[str]]:
    """(processes per node, nodes, notes): per node = the fastest tier's domain, 8 when it is larger or unbounded."""
    domain = pf.hardware.tiers[0].domain_size
    notes = []
    per_node = domain if domain is not None and domain <= DEFAULT_DEVICES_PER_NODE else DEFAULT_DEVICES_PER_NODE
    if per_node != domain:
        what = "unbounded" if domain is None else f"{domain} devices"
        notes.append(f"devices per node assumed {per_node}: the fastest tier ({pf.hardware.tiers[0].name}) spans "
                     f"{what}, larger than one host; set the per-node process count to the GPUs of one host "
                     "(e.g. 4 on a GB200 compute tray)")
    gpus = pf.plan.gpus
    per_node = min(per_node, gpus)
    nodes = math.ceil(gpus / per_node)
    if gpus % per_node:
        notes.append(f"gpus = {gpus} is not a multiple of {per_node} devices per node: {nodes} nodes with the last "
                     "one partly used cannot be launched with one per-node process count")
    return per_node, nodes, notes


def virtual_stages(pf: PlanFile) -> list[int]:
    """Layers of each model chunk in model order: chunk c of stage r is virtual stage c*pp + r (Megatron's
    interleaving), as `spec.plan.layout.chunk_layers` splits them."""
    return chunk_layers(pf.plan, pf.model.n_layers)


def layers_label(pl: OpPlacement) -> str:
    if pl.layers is None:
        return pl.op
    a, b = pl.layers
    return f"layer{'' if a == b else 's'} {a}{'' if a == b else f'-{b}'} {pl.op}"


def not_expressed_comments(framework: str, notes: list[str]) -> list[str]:
    if not notes:
        return [f"# Not expressed in {framework}: nothing; every plan setting is carried above."]
    return [f"# Not expressed in {framework} ({len(notes)} plan setting{'s' if len(notes) > 1 else ''}):",
            *[f"#   - {n}" for n in notes]]


def placement_deviations(pf: PlanFile) -> list[str]:
    """Placements that differ from Megatron-LM's (perfmodel.spec.model.operators.megatron_placement; torchtitan's llama plan
    is the same): the activation Shard(0) over dp and Shard(1) over cp; over tp, the weight where Megatron splits
    one (colwise qkv / mlp_in, rowwise out_proj / mlp_out, vocab-parallel embedding and LM head), else the
    activation (heads / features Shard(2) inside attention and the MLP, the vocab-parallel logits, and with
    sequence parallelism norms and residuals Shard(1)). Axes of size 1 are not checked (any placement is the
    same)."""
    p = pf.plan
    sizes = {"dp": p.dp, "cp": p.cp, "tp": p.tp}
    out = []
    for pl in pf.placements:
        want = megatron_placement(pl.op, sizes, p.sequence_parallel)
        loss = pl.op == "loss"
        role = "input" if loss else "output"
        act, act_want = (pl.input, want.input) if loss else (pl.output, want.output)
        found, expected = [], []
        for i, (axis, dim) in enumerate((("dp", "batch"), ("cp", "sequence"))):
            if sizes[axis] > 1 and act[i] != act_want[i]:
                found.append(f"{role} {act[i]} on {axis}")
                expected.append(f"{dim} {act_want[i]} on {axis}")
        t = AXES.index("tp")
        if p.tp > 1:
            if want.weight is not None and want.weight[t] != "Replicate()":  # Megatron splits the weight
                style_ok = pl.style in (None, want.style) or (pl.op == "lm_head" and pl.style == "colwise")
                if pl.weight is None or pl.weight[t] != want.weight[t] or not style_ok:
                    found.append(f"weight {pl.weight[t] if pl.weight else None} on tp, style {pl.style}")
                    expected.append(f"{want.style}: weight {want.weight[t]} on tp")
            elif act[t] != act_want[t] or pl.style not in (None, want.style):
                dim = megatron_dim(pl.op, p.sequence_parallel)
                odd_style = f", style {pl.style}" if pl.style not in (None, want.style) else ""
                found.append(f"{role} {act[t]} on tp{odd_style}")
                expected.append(f"{act_want[t]} on tp" + (" (sequence parallel)" if dim == "seq" else
                                                          f" ({dim} split)" if dim else ""))
        if found:
            out.append(f"{layers_label(pl)} ({'; '.join(found)}; expected {'; '.join(expected)})")
    return out
