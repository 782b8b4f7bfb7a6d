"""`perfmodel execute`: run plan files with torch.distributed under torchrun and measure them
(`execute.run_plans.run_plans`); the parent process imports no torch."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...errors import InputError
from ..argtypes import RDZV_BACKENDS, integer, nodes, path, seconds, word


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    xe = sub.add_parser(name, help=help)
    xe.add_argument("plans", nargs="+", type=path("plan file"), metavar="PLAN.json", help="plan files; all run in "
                    "one launch (CPU: peak memory in an untimed phase before the timed steps)")
    xe.add_argument("--nproc", type=integer("--nproc"), required=True, help="processes per node (GPUs or CPU ranks)")
    xe.add_argument("--device", default="auto", help="auto (cuda if present) | cpu | cuda")
    xe.add_argument("--steps", type=integer("--steps"), help="training steps per plan (default 8)")
    xe.add_argument("--warmup", type=integer("--warmup", 0), help="leading steps left out of the median (default 3; "
                    "serving plans: leading rounds, default 1)")
    xe.add_argument("--rounds", type=integer("--rounds"),
                    help="run the plans this many times over, interleaved (round 1 runs every plan, then round 2 "
                         "...); the step time is the lowest round's median (default 1; serving plans: times each "
                         "batch is served, default 4)")
    xe.add_argument("--seed", type=integer("--seed", 0, 2**32 - 1), default=0,
                    help="seed of initial weights and synthetic data (0 to 2**32 - 1)")
    xe.add_argument("--data", type=path("--data"), metavar="FILE",
                    help="train on a local text file (byte tokens) instead of random tokens")
    xe.add_argument("--output", type=path("--output"), metavar="FILE",
                    help="measurement file (one plan only; default perfmodel-runs/PLAN.measured.json beside the plan)")
    xe.add_argument("--timeout", type=seconds("--timeout"), default=None, help="wall-clock limit in seconds")
    xe.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                    help="draw every measured step against the prediction")
    xe.add_argument("--checkpoint-every", type=integer("--checkpoint-every"), metavar="K",
                    help="save the full training state (torch.distributed.checkpoint) after every K steps into "
                         "--checkpoint-dir/PLAN/step-N")
    xe.add_argument("--checkpoint-dir", type=path("--checkpoint-dir"), metavar="DIR",
                    help="checkpoints go to DIR/PLAN (one sub-directory per plan file name)")
    xe.add_argument("--resume", action="store_true", help="continue each plan from its newest complete save in "
                    "--checkpoint-dir (a torn one is refused for the one before it; none: from step 0)")
    xe.add_argument("--checkpoint-async", action="store_true", help="write saves from a background thread "
                    "(dcp.async_save): training waits only for the copy to host memory")
    xe.add_argument("--trace", type=path("--trace"), metavar="DIR",
                    help="after each plan's timed steps, trace a few more with torch.profiler (not among the step "
                         "times): one Kineto chrome trace per rank, DIR/PLAN/rank-R.pt.trace.json.gz")
    torchrun = "passed to torchrun (multi-node)"
    xe.add_argument("--nnodes", type=nodes, help=f"{torchrun}: nodes, N or MIN:MAX")
    xe.add_argument("--node-rank", type=integer("--node-rank", 0), help=f"{torchrun}: this node, 0 to nnodes - 1")
    xe.add_argument("--rdzv-backend", choices=RDZV_BACKENDS, help=torchrun)
    xe.add_argument("--rdzv-endpoint", type=word("--rdzv-endpoint", "node0:29400"), help=f"{torchrun}: HOST[:PORT]")
    xe.add_argument("--rdzv-id", type=word("--rdzv-id", "job42"), help=torchrun)
    xe.add_argument("--master-addr", type=word("--master-addr", "node0"), help=torchrun)
    xe.add_argument("--master-port", type=integer("--master-port", 1, 65535), help=f"{torchrun}: 1 to 65535")
    return xe


def check_nodes(a: argparse.Namespace) -> None:
    """execute's torchrun flags together: --node-rank names one of the --nnodes nodes."""
    nodes = int(a.nnodes.split(":")[-1]) if a.nnodes else 1
    if a.node_rank is not None and a.node_rank >= nodes:
        raise InputError(f"--node-rank {a.node_rank} with --nnodes {a.nnodes or 1}; valid: --node-rank 0 to "
                         f"{nodes - 1}")


def run(a: argparse.Namespace) -> str:
    from ...execute.run_plans import run_plans
    from ...plots.canvas import check_plot_path
    from ...spec.plan.file import load_plan_file

    check_nodes(a)
    if any(is_serve_plan_path(p) for p in a.plans):
        return serve(a)
    rdzv = [f"{f}={getattr(a, f[2:].replace('-', '_'))}" for f in ("--nnodes", "--node-rank", "--rdzv-backend",
            "--rdzv-endpoint", "--rdzv-id", "--master-addr", "--master-port") if getattr(a, f[2:].replace("-", "_"))]
    if a.plot is not None:
        check_plot_path(a.plot)
    if a.output and len(a.plans) > 1:
        raise InputError(f"--output names one file but {len(a.plans)} plans were given; valid: --output with one "
                         "plan, or none (each plan's measurement goes to perfmodel-runs/ beside it)")
    a.steps, a.warmup, a.rounds = (8 if a.steps is None else a.steps), (3 if a.warmup is None else a.warmup), \
        (1 if a.rounds is None else a.rounds)
    outputs = [a.output] if a.output else default_outputs(a.plans, "measured")
    ms = run_plans(a.plans, a.nproc, device=a.device, steps=a.steps, warmup=a.warmup, rounds=a.rounds,
                   seed=a.seed, outputs=outputs, rdzv=rdzv or None, timeout_s=a.timeout, data=a.data,
                   checkpoint_dir=a.checkpoint_dir, checkpoint_every=a.checkpoint_every, resume=a.resume,
                   checkpoint_async=a.checkpoint_async, make_folders=not a.output, trace_dir=a.trace)
    preds = [load_plan_file(path).prediction.step_time_s for path in a.plans]
    rows = [f"{'plan':<40}{'predicted':>12}{'measured':>12}{'error':>8}{'peak memory':>14}  loss first -> last"]
    for path, m, pred in zip(a.plans, ms, preds):
        err = f"{(pred - m.step_time_s) / m.step_time_s:+.0%}" if pred > 0 else "-"
        rows.append(f"{path[-40:]:<40}{pred * 1e3:>10.1f}ms{m.step_time_s * 1e3:>10.1f}ms{err:>8}"
                    f"{m.peak_memory_bytes / 2**20:>10.1f} MiB  {m.losses[0]:.4f} -> {m.losses[-1]:.4f}")
        rows += [f"  checkpoints: {m.checkpoint.summary()} in {m.checkpoint.directory}"] if m.checkpoint else []
        rows += [f"  note: {n}" for n in m.notes]
    rows += [f"wrote {o}" for o in outputs]
    rows += [f"wrote traces under {a.trace}"] if a.trace else []
    if a.plot is not None:
        from ...plots.canvas import unique_labels
        from ...plots.measured_steps import steps_figure

        steps_figure(dict(zip(unique_labels(a.plans), zip(ms, preds))), a.plot)
        rows.append(f"wrote {a.plot}")
    return "\n".join(rows)


def default_outputs(plans: list[str], kind: str) -> list[str]:
    """Where execute writes each plan's measurement unless told: a `perfmodel-runs` folder beside the plan
    (files.RUNS_DIR, which .gitignore covers wherever it lies; created once the run goes ahead), NAME.KIND.json,
    naming its plan relative to itself (../NAME.json)."""
    from ...files import RUNS_DIR
    from ...spec.measurement import beside

    return [str(Path(p).parent / RUNS_DIR / beside(p, kind).name) for p in plans]


def is_serve_plan_path(path: str) -> bool:
    """A serving plan file (kind 'serve', perfmodel infer --write-plan) rather than a training plan."""
    from ...files import read_json_object
    from ...spec.serving.files import is_serve_plan

    return is_serve_plan(read_json_object(path, "plan file"))


SERVE_FLAGS = ("steps", "data", "output", "plot", "trace", "checkpoint_every", "checkpoint_dir", "resume", "checkpoint_async",
               "nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr", "master_port")


def serve(a: argparse.Namespace) -> str:
    """Serving plan files: serve each static batch (execute.serve_plans), print predicted against measured."""
    from ...execute.serve_plans import serve_plans
    from ...spec.serving.files import load_serve_plan

    if not all(is_serve_plan_path(p) for p in a.plans):
        raise InputError("execute got serving and training plan files together; valid: one kind per launch")
    given = [f"--{f.replace('_', '-')}" for f in SERVE_FLAGS
             if getattr(a, f) not in (None, False)]
    if given:
        raise InputError(f"{given[0]} does not apply to serving plan files; valid: --nproc, --device, --rounds, "
                         "--warmup, --seed, --timeout")
    rounds = 4 if a.rounds is None else a.rounds
    warmup = min(1, rounds - 1) if a.warmup is None else a.warmup  # as validate's serving sweep
    outputs = default_outputs(a.plans, "served")
    ms = serve_plans(a.plans, a.nproc, device=a.device, rounds=rounds, warmup=warmup, seed=a.seed,
                     timeout_s=a.timeout, outputs=outputs, make_folders=True)
    rows = [f"{'serving plan':<40}{'prefill pred':>14}{'meas':>10}{'decode pred':>14}{'meas':>10}"]
    for path, m, out in zip(a.plans, ms, outputs):
        pf = load_serve_plan(path)
        rows.append(f"{path[-40:]:<40}{pf.predicted.prefill_s * 1e3:>12.2f}ms{m.prefill_time_s * 1e3:>8.2f}ms"
                    f"{pf.predicted.decode_s * 1e3:>12.2f}ms{m.decode_time_s * 1e3:>8.2f}ms")
        if pf.plan.stack != "plain-torch":
            rows.append(f"  note: the prediction is for the {pf.plan.stack} stack; the executor serves as plain-torch "
                        "(write the plan with --stack plain-torch to predict what it runs)")
        rows += [f"  note: {n}" for n in m.notes]
        rows.append(f"  wrote {out}")
    return "\n".join(rows)
