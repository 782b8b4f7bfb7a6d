"""Design-space sweeps (`perfmodel sweep`, docs/sweep.md): many hypothetical systems (`axes`, `points`), each
running the real best-plan search of every workload (`evaluate`), on this machine's cores or a Ray cluster
(`engines`), rows streamed to Parquet and resumable (`store`, `run`), and read back as a Pareto front, best points
and sensitivities (`analysis`). It imports `perfmodel.search`, `perfmodel.serve`, `perfmodel.run` and `perfmodel.spec`
and holds no cost formula of its own.

    from perfmodel.sweep import load_sweep, run_sweep, report
    run_sweep(load_sweep("sweeps/example.yaml"), "out/example", workers=2)
    report("out/example").pareto
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
