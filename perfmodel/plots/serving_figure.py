"""`perfmodel infer --plot`: memory per GPU against capacity, and the steady step's and one prefill's time by part."""

from __future__ import annotations

from pathlib import Path

from .canvas import pyplot, save

MEMORY = ("weights", "activations", "runtime", "kv_in_use")
COLOURS = ("#4c72b0", "#dd8452", "#8c8c8c", "#55a868")


def serving_figure(e, path: str | Path) -> Path:
    """Two panels: stacked GiB per GPU (weights, activations, runtime, the KV cache the batch uses) beside the
    device's capacity and the KV budget; milliseconds by part of one steady step and of one request's prefill."""
    plt = pyplot()
    fig, (mem, time) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    bottom = 0.0
    for part, colour in zip(MEMORY, COLOURS):
        v = e.memory_gib[part]
        mem.bar(0, v, bottom=bottom, color=colour, label=f"{part} {v:.1f}")
        bottom += v
    cap = e.memory_gib["capacity"]
    mem.axhline(cap, color="black", lw=1)
    mem.text(0.45, cap, f" capacity {cap:.0f} GiB", va="bottom", ha="right", fontsize=8)
    mem.set_xticks([])
    mem.set_ylabel("GiB per GPU")
    mem.set_title(f"memory; KV cache {e.kv_cache_tokens:,.0f} tokens")
    mem.legend(fontsize=7, loc="lower right")
    parts = [k for k in e.decode_step_s if e.decode_step_s[k] > 0 or e.prefill_s.get(k, 0) > 0]
    y = range(len(parts))
    time.barh([i + 0.2 for i in y], [1e3 * e.decode_step_s[k] for k in parts], height=0.4,
              label=f"steady step ({e.batch:,.0f} in flight): TPOT {1e3 * e.tpot_s:.1f} ms")
    time.barh([i - 0.2 for i in y], [1e3 * e.prefill_s[k] for k in parts], height=0.4,
              label=f"a prefill-pool step (prompts of {e.plan.input_len})" if e.plan.disaggregated else
              f"one prompt of {e.plan.input_len} alone")
    time.set_yticks(list(y), parts)
    time.set_xlabel("ms")
    time.legend(fontsize=8)
    time.set_title(f"{e.output_tokens_per_s:,.0f} output tokens/s; TTFT {1e3 * e.ttft_s:.0f} ms")
    fig.suptitle(f"{e.model} on {e.plan.gpus} x {e.hardware} (tp{e.plan.tp} pp{e.plan.pp} dp{e.plan.dp}, "
                 f"{e.plan.precision}, {e.plan.stack})", fontsize=10)
    fig.tight_layout()
    return save(fig, path)
