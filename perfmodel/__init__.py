"""perfmodel: how long an LLM's training step or served request takes on a GPU/TPU cluster, whether it fits in
memory, and which parallel layout is best.

    import perfmodel
    est = perfmodel.estimate(perfmodel.load_model("llama-3-70b"), perfmodel.load_hardware("dgx-h100"),
                             perfmodel.Plan(gpus=512, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192))
    est.step_time_s, est.mfu, est.fits_in_memory, est.memory_bytes.reserved

    from perfmodel.search import search   # every layout of a job, ranked

One analytical cost model prices training (a step's time and memory per device; the whole run's days, dollars,
energy and failures) and serving (TTFT, TPOT, throughput, requests simulated one by one). Around it perfmodel
searches every layout, imports a framework's own config and exports a plan as one, runs a plan with
torch.distributed to measure it, calibrates a hardware spec from measurements (microbenchmarks, a user's runs, a
profiler trace), and sweeps a design space of hypothetical systems.

The package is a stack of stages, lowest first; a module imports only what its stage's row of the layer table
allows (`layers`, docs/architecture.md):

- `errors`, `types`, `files`: the ground: errors, the schema base and field types, files read and written.
- `spec`: what a user describes: model, hardware, host, software stack, plan, serving.
- `ingest`: a framework's own config read into a model and a plan.
- `cost`: the cost model of a training step; `serve`: of serving; `run`: of a whole training run.
- `search`: every layout of a job ranked; `sweep`: many systems x workloads, each searched.
- `export`: a plan as a framework's config; `execute`: a plan run for real and measured.
- `calibrate`: measurements back into a spec; `plots`: figures; `validate`: predicted against measured.
- `cli`: the `perfmodel` command (`__main__`: `python -m perfmodel`); `app`: the planner page.

This module may import every stage, lazily: the names below are read on first use, so importing one stage (the
executor's workers import `spec` and `execute` only) does not load the cost model.
"""

_PUBLIC = {"estimate": "perfmodel.cost.estimate", "load_model": "perfmodel.spec.model.catalogue",
           "load_hardware": "perfmodel.spec.hardware.system", "Plan": "perfmodel.spec.plan.layout",
           "Estimate": "perfmodel.spec.result", "ModelConfig": "perfmodel.spec.model.config",
           "System": "perfmodel.spec.hardware.system", "InputError": "perfmodel.errors"}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
