"""Rank serving layouts of a job, and find the fewest GPUs that serve a target request rate.

Every layout of `gpus` GPUs: tp a divisor of the heads, pp of the layers' count range, dp the rest, ep a divisor
of tp and of the experts (MoE), and for a MoE model at pp 1 attention data parallelism with wide expert
parallelism (attention_dp groups of tp GPUs, ep = tp x attention_dp, as DeepSeek serves it); each predicted by
`batching.infer` at the job's lengths and load. A layout that
does not fit, or whose TTFT or TPOT passes the limits, is dropped; the rest are ranked by output tokens/s.
"""

from __future__ import annotations

from ..errors import InputError
from ..spec.hardware.system import System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.plan.layout import divisors
from ..spec.serving.schema import ServeEstimate, ServePlan
from .batching import infer


def layouts(model: ModelConfig, gpus: int, per_node: int) -> list[tuple[int, int, int, int, int]]:
    """(tp, pp, dp, ep, attention_dp) with tp x attention_dp x pp x dp = gpus, tp within a node (NVLink) and
    dividing the heads, pp at most the layers, ep dividing tp and the experts (1 for a dense model); for a MoE
    model at pp 1 also attention_dp > 1 with ep = tp x attention_dp where that divides the experts."""
    out = []
    for tp in divisors(gpus):
        if tp > per_node or model.n_heads % tp:
            continue
        for pp in divisors(gpus // tp):
            if pp > model.n_layers:
                continue
            eps = [1] if model.moe is None else [e for e in divisors(tp) if model.moe.n_experts % e == 0]
            out += [(tp, pp, gpus // (tp * pp), ep, 1) for ep in eps]
            if model.moe is not None and pp == 1:
                out += [(tp, 1, gpus // (tp * a), tp * a, a) for a in divisors(gpus // tp)
                        if a > 1 and model.moe.n_experts % (tp * a) == 0]
    return out


def serve_label(tp: int, attention_dp: int, pp: int, dp: int, ep: int) -> str:
    """A serving layout as reports write it: 'tp4 pp1 dp2', 'tp8 adp4 pp1 dp1 ep32'."""
    return (f"tp{tp}" + (f" adp{attention_dp}" if attention_dp > 1 else "") + f" pp{pp} dp{dp}"
            + (f" ep{ep}" if ep > 1 else ""))


def rank(model: ModelConfig | str, hardware: System | str, gpus: int, job: dict, ttft_s: float | None = None,
         tpot_s: float | None = None) -> tuple[list[ServeEstimate], list[str]]:
    """The layouts of `gpus` GPUs that fit and meet the limits, best output tokens/s first, and one line per layout
    dropped with the reason. `job`: the ServePlan fields other than the layout (precision, kv_dtype, lengths,
    concurrency, stack)."""
    model, system = load_model(model), load_hardware(hardware)
    per_node = system.tiers[0].domain_size or gpus
    kept, dropped = [], []
    for tp, pp, dp, ep, adp in layouts(model, gpus, per_node):
        label = serve_label(tp, adp, pp, dp, ep)
        try:
            e = infer(model, system, ServePlan(tp=tp, attention_dp=adp, pp=pp, dp=dp, ep=ep,
                                                   **job | ({"moe_a2a": None, "two_batch_overlap": False} if adp == 1 else {})))
        except InputError as err:
            dropped.append(f"{label}: {err}")
            continue
        if ttft_s is not None and e.ttft_s > ttft_s:
            dropped.append(f"{label}: TTFT {1e3 * e.ttft_s:.0f} ms > {1e3 * ttft_s:g} ms")
        elif tpot_s is not None and e.tpot_s > tpot_s:
            dropped.append(f"{label}: TPOT {1e3 * e.tpot_s:.1f} ms > {1e3 * tpot_s:g} ms")
        else:
            kept.append(e)
    return sorted(kept, key=lambda e: -e.output_tokens_per_s), dropped


def fewest_gpus(model: ModelConfig | str, hardware: System | str, max_gpus: int, target_rps: float, job: dict,
                ttft_s: float | None = None, tpot_s: float | None = None) -> tuple[int, list[ServeEstimate]]:
    """The fewest GPUs (1, 2, 4, ... up to max_gpus, then max_gpus) whose best layout serves `target_rps`
    requests/s within the limits, and that count's ranking. InputError when even max_gpus does not."""
    if not target_rps > 0:
        raise InputError(f"--target-rps {target_rps:g}: valid: requests per second > 0")
    counts, n = [], 1
    while n < max_gpus:
        counts.append(n)
        n *= 2
    counts.append(max_gpus)
    best = None
    for n in counts:
        ranked, _ = rank(model, hardware, n, job, ttft_s, tpot_s)
        if ranked:
            best = (n, ranked[0].requests_per_s)
            if ranked[0].requests_per_s >= target_rps:
                return n, [e for e in ranked if e.requests_per_s >= target_rps]
    got = (f"; the most with {best[0]} GPUs: {best[1]:.2f} requests/s" if best
           else "; no layout fits or meets the limits")
    raise InputError(f"--target-rps {target_rps:g}: no count up to --gpus {max_gpus} serves it{got}; valid: more "
                     "--gpus, looser --ttft-ms / --tpot-ms, or a lower target")
