"""Design-space sweeps (`perfmodel sweep`, docs/sweep.md): many hypothetical systems, each running the real search of
every workload.

    from perfmodel.sweep import load_sweep, run_sweep, report
    run_sweep(load_sweep("sweeps/example.yaml"), "out/example", workers=2)
    report("out/example").pareto

- `schema`: the sweep file: base systems, axes, sampling, workloads, objectives, constraints.
- `axes`: a point's system: a base system with each axis's value applied.
- `points`: the points (a grid or quasi-random draws), their tasks grouped into chunks.
- `evaluate`: one chunk: each point's best plan per workload, one row each.
- `engines`: where chunks run: in process, a local pool, Ray.
- `store`: the results folder: one Parquet file per finished chunk, resumable.
- `run`: a sweep run: checked, laid out, finished chunks skipped, the rest run with a progress bar.
- `analysis`: what a finished sweep says: the Pareto front, best points, sensitivities.

It may import every stage below it (perfmodel.layers) and holds no cost formula of its own.
"""


def __getattr__(name: str):
    if name == "load_sweep":
        from .schema import load_sweep

        return load_sweep
    if name == "run_sweep":
        from .run import run_sweep

        return run_sweep
    if name == "report":
        from .analysis import report

        return report
    raise AttributeError(f"module 'perfmodel.sweep' has no attribute {name!r}")
