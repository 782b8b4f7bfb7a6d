"""What torch's optimizer step, gradient clipping and zero_grad call, per parameter tensor and per step (the line
through 8 and 64 tensors): every stack's `_optimizer`."""

from __future__ import annotations

import torch

from benchmarks.tools.host_counts.counter import Counter


def _count_call(fn, state="_call") -> dict:
    """Kinds (and meta, kernels) of one call of fn() under a model-less Counter."""
    c = Counter(None, lambda n: None, lambda n: None, state)
    with c.active():
        c.set(state)
        fn()
    out = dict(c.tally.counts.get((state, None), {}).get("forward", {}))
    d = c.tally.diag.get((state, None), {}).get("forward", {})
    out.update({f"diag.{k}": v for k, v in d.items() if k in ("meta", "aten_kernels", "syncs")})
    return out


def _line(measure) -> dict:
    """Per tensor and per step: the line through 8 and 64 tensors."""
    a, b = measure(8), measure(64)
    keys = sorted(set(a) | set(b))
    per = {k: (b.get(k, 0) - a.get(k, 0)) / 56 for k in keys}
    step = {k: a.get(k, 0) - 8 * per[k] for k in keys}
    clean = lambda d: {k: round(v, 3) for k, v in d.items() if abs(v) > 1e-9}  # noqa: E731
    return {"per_tensor": clean(per), "per_step": clean(step), "n8": a, "n64": b}


def _params(n):
    ps = [torch.zeros(16, requires_grad=True) for _ in range(n)]
    for p in ps:
        p.grad = torch.ones_like(p)
    return ps


def optimizer_counts() -> dict:
    """torch.optim.AdamW.step (fused, foreach, for-loop), clip_grad_norm_ (foreach) and zero_grad(set_to_none=True):
    calls by kind per parameter tensor and per step (8 and 64 tensors of 16 elements, after one warm-up step that
    creates the state). On a GPU the same Python runs: fused is one _fused_adamw_ for all tensors of a device and
    dtype, foreach one _foreach_* per arithmetic step, the for-loop ~a dozen ops per tensor."""
    out = {}
    for name, kw in (("adamw_fused", dict(fused=True)), ("adamw_foreach", dict(foreach=True)),
                     ("adamw_forloop", dict(foreach=False))):
        def measure(n, kw=kw):
            opt = torch.optim.AdamW(_params(n), lr=1e-4, weight_decay=0.1, **kw)
            opt.step()
            return _count_call(opt.step)
        out[name] = _line(measure)

    def clip(n):
        ps = _params(n)
        torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
        return _count_call(lambda: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True))
    out["clip_grad_norm_foreach"] = _line(clip)

    def zero(n):
        opt = torch.optim.AdamW(_params(n), lr=1e-4, fused=True)
        return _count_call(lambda: opt.zero_grad(set_to_none=True))
    out["zero_grad_set_to_none"] = _line(zero)
    out["note"] = ("record_function's enter/exit (profiler ops, no kernel) count as view_op; diag.meta: attribute "
                   "reads (p.grad, .is_sparse, ...: ~0.1 us each), not priced; clip_grad_norm_ returns the norm as a "
                   "device tensor (no sync); a loop that then calls .item() on it pays a sync")
    return out

