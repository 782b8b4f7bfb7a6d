"""Megatron-LM's mixture-of-experts, latent-attention and multi-token-prediction arguments for a plan file
(`export.megatron.script` writes them beside the dense ones)."""

from __future__ import annotations


from ...spec.plan.file import PlanFile
from ..plan_facts import moe_layer_pattern


def pattern_expression(bits: list[int]) -> str:
    """A short Python list expression for a 0/1 layer pattern, in the form Megatron-LM's --moe-layer-freq evaluates
    (e.g. [0, 0, 0, 1, ..., 1] -> '([0]*3+[1]*58)'): runs as [v]*n, repeated groups of runs as (...)*k."""
    runs: list[list[int]] = []
    for b in bits:
        if runs and runs[-1][0] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    terms = [f"[{v}]" + (f"*{n}" if n > 1 else "") for v, n in runs]
    out, i = [], 0
    while i < len(terms):
        period, reps = 1, 1
        for size in range(1, (len(terms) - i) // 2 + 1):
            k = 1
            while terms[i + k * size:i + (k + 1) * size] == terms[i:i + size]:
                k += 1
            if k > 1 and size * k > period * reps:
                period, reps = size, k
        group = "+".join(terms[i:i + period])
        out.append(f"({group})*{reps}" if reps > 1 else group)
        i += period * reps
    expr = "+".join(out)
    return expr if len(out) == 1 and out[0].startswith("(") else f"({expr})"


def megatron_moe(pf: PlanFile) -> tuple[list[str], list[str], list[str], list[str]]:
    """(model arguments, expert-parallel arguments, comments, not-expressed notes) for the experts, latent attention
    and multi-token prediction; nothing for a dense model."""
    m, p = pf.model, pf.plan
    model, par, comments, notes = [], [], [], []
    if m.mla is not None:
        a = m.mla
        model += ["--multi-latent-attention", *([f"--q-lora-rank {a.q_lora_rank}"] if a.q_lora_rank else []),
                  f"--kv-lora-rank {a.kv_lora_rank}", f"--qk-head-dim {a.qk_nope_head_dim}",
                  f"--qk-pos-emb-head-dim {a.qk_rope_head_dim}", f"--v-head-dim {a.v_head_dim}", "--qk-layernorm"]
        comments.append(f"multi-latent attention: --qk-head-dim is the per-head part without rotary embedding "
                        f"(qk_nope_head_dim = {a.qk_nope_head_dim}), --qk-pos-emb-head-dim the rotary part "
                        f"({a.qk_rope_head_dim}); --qk-layernorm adds the RMSNorms on the query and key/value latents "
                        "that the model counts; with latent attention Megatron-LM's YaRN rotary embedding (its "
                        "default) also reads --max-position-embeddings as the original context length: the YaRN "
                        "settings are not part of the plan, set them for the model")
    if m.mtp_layers:
        model.append(f"--mtp-num-layers {m.mtp_layers}")
        comments.append(f"--mtp-num-layers {m.mtp_layers}: Megatron-LM builds the multi-token prediction module(s) on "
                        f"the last pipeline stage, after the plan's stage_layers {pf.stage_layers} (which count the "
                        "main model's layers only); their loss weight --mtp-loss-scaling-factor (default 0.1) is a "
                        "training setting")
        notes.append(f"mtp_layers={m.mtp_layers}: the predicted step time and memory price each multi-token "
                     "prediction module as one more block and LM head on the last stage (cost.pipeline.stages.Stages."
                     "with_mtp), as Megatron-LM places them; its 2h x h input projection is left out")
        if m.moe is not None and not moe_layer_pattern(pf)[-1]:
            notes.append(f"mtp_layers={m.mtp_layers}: the plan counts each multi-token prediction block as a MoE "
                         "block; Megatron-LM builds it with the last layer's spec, which is dense here")
    if m.moe is None:
        return model, par, comments, notes
    e = m.moe
    bits = moe_layer_pattern(pf)
    freq = "1" if e.first_dense_layers == 0 and e.layer_freq == 1 else f"'{pattern_expression(bits)}'"
    model += [f"--num-experts {e.n_experts}", f"--moe-ffn-hidden-size {e.expert_ffn_hidden}",
              f"--moe-router-topk {e.top_k}", f"--moe-layer-freq {freq}"]
    if freq != "1":
        comments.append(f"--moe-layer-freq {freq}: one entry per layer, 1 for a MoE layer ({m.moe_layers()} of "
                        f"{m.n_layers}: first_dense_layers = {e.first_dense_layers}, then every "
                        f"{'layer' if e.layer_freq == 1 else f'{e.layer_freq}th layer'}); Megatron's integer form N "
                        "makes layers 0, N, 2N, ... MoE layers, which is not this pattern")
    if e.shared_ffn_hidden:
        model.append(f"--moe-shared-expert-intermediate-size {e.shared_ffn_hidden}")
        comments.append(f"--moe-shared-expert-intermediate-size {e.shared_ffn_hidden}: the {e.n_shared_experts} "
                        "shared expert(s) together, as Megatron-LM takes them (one MLP of that width)")
    model.append(f"--moe-router-score-function {e.router_scoring}")
    if e.router_scoring == "sigmoid":
        model += ["--moe-router-load-balancing-type seq_aux_loss", "--moe-aux-loss-coeff 1e-4",
                  "--moe-router-enable-expert-bias"]
        comments.append("routing balance (training settings, not part of the plan; later arguments in \"$@\" "
                        "override the values): sigmoid scores with DeepSeek-V3's auxiliary-loss-free balancing, a "
                        "per-expert bias (--moe-router-enable-expert-bias, updated at --moe-router-bias-update-rate "
                        "1e-3 by default) and a small sequence-wise loss (seq_aux_loss, coefficient 1e-4); the "
                        "model's routed scaling factor and group-limited routing (--moe-router-topk-scaling-factor, "
                        "--moe-router-num-groups, --moe-router-group-topk) are not in the model schema: add them")
    else:
        model += ["--moe-router-load-balancing-type aux_loss", "--moe-aux-loss-coeff 1e-2"]
        comments.append("routing balance (training settings, not part of the plan; later arguments in \"$@\" "
                        "override the values): the GShard/Switch auxiliary loss at the coefficient 1e-2 that "
                        "Megatron-LM recommends as a start (its default coefficient, 0, would not balance at all)")
    model.append("--moe-grouped-gemm")
    model.append(f"--moe-token-dispatcher-type {p.moe_dispatcher}")
    if p.moe_capacity_factor is not None:
        model.append(f"--moe-expert-capacity-factor {p.moe_capacity_factor:g}")
        if p.moe_pad_to_capacity:
            model.append("--moe-pad-expert-input-to-capacity")
        if p.moe_pad_to_capacity and p.moe_dispatcher == "flex":
            notes.append("moe_pad_to_capacity with the flex dispatcher: Megatron-Core pads only with the HybridEP "
                         "backend (--moe-flex-dispatcher-backend hybridep; core_v0.17.0 refuses DeepEP with padding, "
                         "core_v0.14.0 any flex dispatcher with it: TransformerConfig.__post_init__)")
        comments.append(f"token dropping as planned: each expert keeps at most {p.moe_capacity_factor:g} x its mean "
                        "share of a rank's routed tokens (moe_utils.get_capacity)"
                        + ("; every expert's input padded to that capacity" if p.moe_pad_to_capacity else ""))
    if p.moe_overlap:
        model.append("--overlap-moe-expert-parallel-comm")
        comments.append("--overlap-moe-expert-parallel-comm (Megatron-Core 0.14+): one micro-batch's dispatch and "
                        "combine run beside another's compute, as the plan prices it (moe_overlap)")
    comments.append(f"--moe-grouped-gemm: each rank's {e.n_experts // p.ep} local experts in one grouped GEMM "
                    f"(Transformer Engine); --moe-token-dispatcher-type {p.moe_dispatcher} as planned "
                    f"(Megatron-LM's default is allgather)")
    if p.expert_imbalance == 1.0:
        notes.append("expert_imbalance=1.0: the plan prices perfectly balanced routing, which trained routers only "
                     "approach; Megatron-LM forces it with --moe-router-force-load-balancing (core_r0.13+), a "
                     "benchmarking setting that routes tokens evenly whatever the router scores, so the run trains "
                     "no useful model; not set here, so expect the busiest expert to hold more tokens than planned "
                     "(add the flag after this script's name to time the planned step)")
    else:
        comments.append(f"expert_imbalance = {p.expert_imbalance}: the plan prices the busiest expert at "
                        f"{p.expert_imbalance} x the mean tokens; the run's routing decides the real imbalance "
                        "(no Megatron-LM setting)")
    lb_all = m.linear_bias == "all"
    if lb_all:
        notes.append(f"linear_bias=all with experts (router_bias={e.router_bias}, expert_bias={e.expert_bias}): "
                     "Megatron-LM biases the router and experts exactly when it biases every linear (no "
                     "--disable-bias-linear); core_r0.12-r0.14 refuse biases in grouped-GEMM experts ('bias not "
                     "supported in TEGroupedMLP yet') and have no router bias; later releases add both, with "
                     "expert biases only at etp=1")
    elif e.router_bias or e.expert_bias:
        notes.append(f"router_bias={e.router_bias}, expert_bias={e.expert_bias}: Megatron-LM biases the router and "
                     f"experts only together with every other linear (no --disable-bias-linear), and the model's "
                     f"linear_bias={m.linear_bias} disables them; exported without router and expert biases")

    par += [f"--expert-model-parallel-size {p.ep}", f"--expert-tensor-parallel-size {p.etp}"]
    comments.append(f"MoE parallel folding: attention runs on tp x cp x dp = {p.tp} x {p.cp} x {p.dp} = "
                    f"{p.tp * p.cp * p.dp} ranks per pipeline stage, the experts on etp x ep x edp = {p.etp} x "
                    f"{p.ep} x {p.edp} of the same ranks (Megatron-LM derives the expert data-parallel size "
                    f"{p.edp}); --expert-tensor-parallel-size is given because its default is tp")
    return model, par, comments, notes
