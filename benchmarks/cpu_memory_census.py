"""What is live at a CPU plan's measured memory peak, by kind: weights, gradients, optimizer state, saved
activations, temporaries of forward / backward / loss / optimizer, communication and pipeline buffers, and what
torch's tensors do not explain (resident memory outside them: gloo's own buffers, Python objects).

    python benchmarks/cpu_memory_census.py /tmp/memval/plans/tp4-sp.json /tmp/memval/plans/dp4.json --nproc 4 \
        --out /tmp/census.json

Each plan runs as the executor's untimed memory phase runs it (execute/memory_probe.py, execute.launch.torchrun.MALLOC_MEMORY: glibc
returns every block of a page or more at once, so resident memory follows the live tensors; the same steps,
the same baseline), under a TorchDispatchMode that registers the storage of every tensor an op returns (with the
phase it was made in, the module or autograd node, and the first Python frame outside torch's dispatch
machinery), `saved_tensors_hooks` that mark what autograd saves for the backward, and a census of every tensor
alive when the step starts (gc). After every op it reads the resident size; at the largest (the peak the
executor measures, up to transients inside one op, reported apart from the resident high-water mark) it takes
the census: every live registered storage classed by what it is at that moment (a parameter's storage: weights;
a .grad: gradients; optimizer state; saved for backward: saved activations; else by how it was made).

measured peak (the executor's number) = tensors live at the peak (by kind) + resident memory no tensor explains
at that op + the in-op transient (the high-water mark above the resident size after the op that set it).

Per plan it prints the most loaded rank's census beside the cost model's parts (est.memory_bytes of the plan
file's spec, on the executor's stack), in MiB, and writes every rank's census as JSON (--out).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

MiB = 2**20
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------------
# Parent: launch the workers, print the census against the prediction
# ---------------------------------------------------------------------------------------------------------
def launch(plans: list[Path], nproc: int, steps: int, out: Path) -> list[dict]:
    from perfmodel.execute.launch.torchrun import worker_env

    env = worker_env("cpu", measure_memory=True)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "--max-restarts=0", __file__, "--worker", "--steps", str(steps), "--out", str(out),
           *map(str, plans)]
    subprocess.run(cmd, env=env, check=True)
    return json.loads(out.read_text())


def predicted(plan_path: Path) -> dict:
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.spec.plan.file import load_plan_file
    from perfmodel.spec.stack.profile import EXECUTOR_STACK

    pf = load_plan_file(plan_path)
    _, est = evaluate_plan(pf.model, pf.hardware, pf.plan.model_copy(update={"stack": EXECUTOR_STACK}))
    out = {"memory_bytes": est.memory_bytes.model_dump(), "memory_stage": est.memory_stage,
           "ranks": [{"stage": r.stage, "ranks": r.ranks, "layers": r.layers,
                      "memory_bytes": r.memory_bytes.model_dump()} for r in est.memory_ranks]}
    return out


def report(results: list[dict], plans: list[Path]) -> str:
    lines = []
    for res, path in zip(results, plans):
        pred = predicted(path)
        res["predicted"] = pred
        ranks = res["ranks"]
        top = max(ranks, key=lambda r: r["measured_peak"])
        mb = pred["memory_bytes"]
        lines.append(f"== {path.stem}: measured peak (most loaded rank {top['rank']}) "
                     f"{top['measured_peak'] / MiB:.2f} MiB; predicted allocated {mb['allocated'] / MiB:.2f} MiB "
                     f"({100 * (mb['allocated'] - top['measured_peak']) / top['measured_peak']:+.0f}%, "
                     f"stage {pred['memory_stage']})")
        lines.append("   predicted parts: " + ", ".join(f"{k} {mb[k] / MiB:.2f}" for k in
                                                        ("weights", "gradients", "optimizer", "activations",
                                                         "transient", "between_steps")))
        lines.append("   every rank's measured peak (MiB): "
                     + " ".join(f"r{r['rank']}={r['measured_peak'] / MiB:.2f}" for r in ranks)
                     + "; predicted allocated per stage: "
                     + " ".join(f"s{s['stage']}={s['memory_bytes']['allocated'] / MiB:.2f}" for s in pred["ranks"]))
        c = top["census"]
        lines.append(f"   at the peak (step {c['step']}, op {c['op']}, phase {c['phase']}, in {c['where']}):")
        for kind, b in sorted(c["kinds"].items(), key=lambda kv: -kv[1]):
            lines.append(f"     {kind:<34} {b / MiB:8.2f}")
        lines.append(f"     {'resident, no tensor (gloo, Python)':<34} {c['untracked'] / MiB:8.2f}")
        lines.append(f"     {'in-op transient (HWM - resident)':<34} {top['in_op_transient'] / MiB:8.2f}"
                     f"   (set during {top['hwm_op']})")
        lines.append(f"     {'= measured peak':<34} {top['measured_peak'] / MiB:8.2f}   (baseline: resident before the "
                     f"model {top['base_before'] / MiB:.1f} MiB, after it was freed {top['resident_after_free'] / MiB:.1f}, "
                     f"of which tensors still alive {top['tensors_after_free'] / MiB:.1f}; after malloc_trim "
                     f"{top['resident_after_trim'] / MiB:.1f})")
        if top["leftover"]:
            lines.append("   tensors the plan left alive after its objects were freed: " + "; ".join(top["leftover"]))
        lines.append("   resident by kind, MiB (before the model / at the peak / after it was freed): " + ", ".join(
            f"{k} {top['rss_before'][k] / MiB:.1f} / {c['rss'][k] / MiB:.1f} / {top['rss_after'][k] / MiB:.1f}"
            for k in ("RssAnon", "RssFile", "RssShmem")))
        lines.append("   largest non-state sources live at the peak (MiB):")
        for label, b in c["sources"][:12]:
            lines.append(f"     {b / MiB:8.2f}  {label}")
        bs = top["between"]
        lines.append(f"   between steps: measured {bs['measured'] / MiB:.2f} MiB (tensors: "
                     + ", ".join(f"{k} {v / MiB:.2f}" for k, v in sorted(bs["kinds"].items(), key=lambda kv: -kv[1]))
                     + f"; no tensor {bs['untracked'] / MiB:.2f}); predicted {mb['between_steps'] / MiB:.2f}")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Worker: one census per plan per rank
# ---------------------------------------------------------------------------------------------------------
def worker(plan_paths: list[str], steps: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode

    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer
    from perfmodel.execute.host import rss_bytes
    from perfmodel.spec.plan.file import load_plan_file

    import warnings

    warnings.simplefilter("ignore", FutureWarning)  # gc.get_objects() meets torch's deprecated aliases
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    statm = os.open("/proc/self/statm", os.O_RDONLY)
    page = os.sysconf("SC_PAGE_SIZE")

    def kinds() -> dict:
        """Resident memory by kind (anonymous: heap and mmap'd blocks; file: library code; shmem)."""
        return {k: rss_bytes(k) for k in ("RssAnon", "RssFile", "RssShmem")}

    def resident() -> float:
        return float(os.pread(statm, 128, 0).split()[1]) * page

    def plain(t):
        """The plain tensors under a tensor subclass (DTensor, AsyncCollectiveTensor ...)."""
        if type(t) in (torch.Tensor, torch.nn.Parameter) or not hasattr(t, "__tensor_flatten__"):
            return [t]
        names, _ = t.__tensor_flatten__()
        return [x for n in names if isinstance(getattr(t, n, None), torch.Tensor) for x in plain(getattr(t, n))]

    def skey(t):
        """(the storage's identity, the storage): its StorageImpl, which outlives a resize_ (FSDP2 frees an
        unsharded weight by resizing its storage to 0 and gathers into it again)."""
        try:
            s = t.untyped_storage()
            return s._cdata, s
        except Exception:
            return None, None

    def storage_bytes(ref) -> int:
        """A registered storage's bytes now (0 once resized away or freed)."""
        if ref.expired():
            return 0
        st = torch.UntypedStorage._new_with_weak_ptr(ref.cdata)
        return 0 if st is None else st.nbytes()

    SKIP = ("cpu_memory_census.py", "torch/utils/_python_dispatch.py", "torch/_ops.py", "torch/overrides.py",
            "torch/_tensor.py", "torch/utils/_pytree.py", "torch/_compile.py", "torch/_dynamo", "contextlib.py",
            "torch/utils/_contextlib.py", "torch/nn/modules/module.py", "torch/autograd/")

    def source() -> str:
        f = sys._getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            if not any(s in name for s in SKIP):
                short = name.split("site-packages/")[-1].split("perfmodel/")[-1]
                return f"{short}:{f.f_code.co_name}"
            f = f.f_back
        return "?"

    class State:
        modules: list[str] = []
        loss = optimizer = False
        names: dict[int, str] = {}

    def phase() -> tuple[str, str]:
        node = torch._C._current_autograd_node()
        if node is not None:
            return ("recompute" if State.modules else "backward"), node.name()
        if State.optimizer:
            return "optimizer", ""
        if State.loss:
            return "loss", ""
        if State.modules:
            return "forward", State.modules[-1]
        return "other", ""

    class Census(TorchDispatchMode):
        """Registers every op output's storage; after every op reads the resident size and keeps the census of
        its largest value."""

        def __init__(self, classify):
            super().__init__()
            self.live: dict[int, tuple] = {}  # storage identity -> (weakref, label)
            self.baseline: set[int] = set()  # storages alive before the plan was built (not the plan's)
            self.saved: set[int] = set()
            self.classify = classify
            self.best = -1.0
            self.census = None
            self.hwm_op = ""
            self.step = 0

        def register(self, t, label):
            for x in plain(t):
                ptr, s = skey(x)
                if ptr is None or x.device.type != "cpu" or ptr in self.baseline:
                    continue
                old = self.live.get(ptr)
                if old is not None and not old[0].expired():
                    continue
                self.saved.discard(ptr)  # a freed storage's identity, reused
                self.live[ptr] = (StorageWeakRef(s), label)

        def alive(self):
            dead = [k for k, v in self.live.items() if v[0].expired()]
            for k in dead:
                del self.live[k]
                self.saved.discard(k)
            return self.live

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            hwm0 = self.hwm
            out = func(*args, **(kwargs or {}))
            ph, where = phase()
            name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
            ns = getattr(func, "namespace", "")
            label = None
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    if label is None:
                        if ns in ("c10d", "_c10d_functional", "c10d_functional"):
                            kind = "comm"
                        else:
                            kind = ph
                        src = source() if kind not in ("backward",) else f"autograd {where}"
                        label = (kind, name, where if kind in ("forward", "recompute") else "", src)
                    self.register(t, label)
            now = resident()
            hwm = rss_bytes("VmHWM")
            if hwm > hwm0:
                self.hwm, self.hwm_op = hwm, f"{ns}.{name} ({ph} {where})"
            if now > self.best:
                self.best = now
                self.census = self.classify(self.alive(), self.saved, now) | {
                    "op": f"{ns}.{name}", "phase": ph, "where": where, "step": self.step, "rss": kinds()}
            return out

    results = []
    for path in plan_paths:
        pf = load_plan_file(path)
        gc.collect()
        base, base_kinds = rss_bytes(), kinds()
        baseline = {skey(x)[0] for o in gc.get_objects() if isinstance(o, torch.Tensor) for x in plain(o)}
        trainer = Trainer(pf, torch.device("cpu"), seed=0)
        names = {id(m): f"s{v}.{n}" if n else f"s{v}" for v, raw in zip(trainer.indices, trainer.raw)
                 for n, m in raw.named_modules()}
        batches = Batches(pf.model.vocab, pf.plan.global_batch, pf.plan.seq_len, 0, None)
        optimizers = getattr(trainer.optimizer, "optimizers", (trainer.optimizer,))
        optimizers = [getattr(o, "optim", o) for o in optimizers]
        own_weights: set[int] = set()  # parameter storages between steps (FSDP: the shards)

        def params():
            return [x for m in trainer.raw for p in m.parameters() for x in plain(p)]

        def classify(live, saved, now):
            weights = {skey(p)[0] for p in params()}
            grads = {skey(x)[0] for m in trainer.raw for p in m.parameters() if p.grad is not None
                     for x in plain(p.grad)}
            opt = {skey(x)[0] for o in optimizers for st in o.state.values() for v in st.values()
                   if isinstance(v, torch.Tensor) and v.dim() > 0 for x in plain(v)}
            kinds, sources = defaultdict(float), defaultdict(float)
            for ptr, (ref, label) in live.items():
                nbytes = storage_bytes(ref)
                if nbytes == 0:
                    continue
                if ptr in weights:
                    kind = "weights" if ptr in own_weights else "weights gathered (FSDP unsharded)"
                elif ptr in grads:
                    kind = "gradients"
                elif ptr in opt:
                    kind = "optimizer state"
                else:
                    k, name, where, src = label
                    if ptr in saved:
                        kind = "saved activations" if k != "pre-step" else "saved (made before the step)"
                    elif k == "comm" or "distributed" in src:
                        kind = ("pipeline buffers" if "pipelining" in src else
                                "FSDP buffers" if "fsdp" in src else
                                "DTensor redistribution" if "tensor/" in src else
                                "DDP / c10d buffers" if k != "comm" else "collective outputs")
                    else:
                        kind = {"forward": "forward temporaries (not saved)", "recompute": "recomputed (backward)",
                                "backward": "backward temporaries", "loss": "loss temporaries",
                                "optimizer": "optimizer temporaries", "other": "other (outside fwd/bwd/opt)",
                                "pre-step": "other tensors made before the step"}.get(k, k)
                    sources[f"{kind}: {name} in {where or '-'} from {src}"] += nbytes
                kinds[kind] += nbytes
            tracked = sum(kinds.values())
            return {"kinds": dict(kinds), "tracked": tracked, "resident": now,
                    "sources": sorted(sources.items(), key=lambda kv: -kv[1])}

        def register_alive(census):
            """Every tensor alive as the step starts (in a function: a loop variable left in the worker's frame
            would keep the last one alive after the plan is freed)."""
            for o in gc.get_objects():
                if isinstance(o, torch.Tensor) and not isinstance(o, torch.nn.Parameter):
                    census.register(o, ("pre-step", "", "", type(o).__name__))
            for p in params():
                census.register(p, ("pre-step", "param", "", ""))

        census = Census(classify)
        census.hwm = 0.0
        census.baseline = baseline

        def pre(module, args):
            State.modules.append(names.get(id(module), type(module).__name__))

        def post(module, args, output):
            if State.modules:
                State.modules.pop()

        def opt_pre(*a):
            State.optimizer = True

        def opt_post(*a):
            State.optimizer = False

        def pack(t):
            for x in plain(t):
                ptr, _ = skey(x)
                if ptr:
                    census.saved.add(ptr)
            return t

        loss_fn = trainer.loss_fn

        def traced_loss(*a, **k):
            State.loss = True
            try:
                return loss_fn(*a, **k)
            finally:
                State.loss = False

        trainer.loss_fn = traced_loss
        if trainer.schedule is not None and hasattr(trainer.schedule, "_loss_fn"):
            trainer.schedule._loss_fn = traced_loss
        import torch.nn.modules.module as mm
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        handles = [mm.register_module_forward_pre_hook(pre), mm.register_module_forward_hook(post, always_call=True),
                   register_optimizer_step_pre_hook(opt_pre), register_optimizer_step_post_hook(opt_post)]
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        between = None
        for step in range(steps):
            census.step = step + 1
            tokens = batches.step(step)
            own_weights.clear()
            own_weights.update(skey(p)[0] for p in params())
            register_alive(census)
            census.hwm = rss_bytes("VmHWM")
            with census, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                trainer.step(tokens)
            census.saved.clear()
            now = resident()
            if between is None or now > between[0]:
                between = (now, classify(census.alive(), set(), now))
        hwm = rss_bytes("VmHWM")
        for h in handles:
            h.remove()
        peak, hwm_op = census.census, census.hwm_op
        trainer = batches = optimizers = census = loss_fn = traced_loss = None  # the plan's objects freed
        gc.collect()
        after = rss_bytes()
        final = max(base, after)
        left = {k: st.nbytes() for o in gc.get_objects() if isinstance(o, torch.Tensor) for x in plain(o)
                if x.device.type == "cpu" for k, st in [skey(x)] if k is not None and k not in baseline}
        left = sum(left.values())
        leftover = [f"{type(o).__name__} {tuple(o.shape)} {o.dtype} {o.untyped_storage().nbytes() / MiB:.2f} MiB, held by "
                    + ", ".join(sorted({type(r).__name__ for r in gc.get_referrers(o)} - {"list", "frame"}))
                    for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.device.type == "cpu"
                    and skey(o)[0] not in baseline and o.untyped_storage().nbytes() >= MiB]
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        trimmed, after_kinds = rss_bytes(), kinds()
        measured = max(0.0, hwm - final)
        peak["untracked"] = peak["resident"] - final - peak["tracked"]
        bkinds = between[1]
        results.append({"rank": rank, "plan": path, "measured_peak": measured, "base": final,
                        "base_before": base, "resident_after_free": after, "tensors_after_free": left, "leftover": leftover,
                        "resident_after_trim": trimmed, "rss_before": base_kinds, "rss_after": after_kinds,
                        "in_op_transient": hwm - peak["resident"], "hwm_op": hwm_op, "census": peak,
                        "between": {"measured": between[0] - final, "kinds": bkinds["kinds"],
                                    "untracked": between[0] - final - bkinds["tracked"]}})
        dist.barrier()
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, results)
    if rank == 0:
        per_plan = [{"plan": p, "ranks": [g[i] for g in gathered]} for i, p in enumerate(plan_paths)]
        Path(out).write_text(json.dumps(per_plan, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plans", nargs="+", type=Path)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--steps", type=int, default=2, help="steps per plan (the executor's memory phase runs 2)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/cpu_memory_census.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker([str(p) for p in a.plans], a.steps, str(a.out))
        return 0
    t0 = time.time()
    results = launch(a.plans, a.nproc, a.steps, a.out)
    print(report(results, a.plans))
    a.out.write_text(json.dumps(results, indent=1))
    print(f"({time.time() - t0:.0f} s; every rank's census: {a.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
