"""perfmodel: predict, search and validate the step time and memory of LLM training on GPU/TPU clusters.

    import perfmodel
    est = perfmodel.estimate(perfmodel.load_model("llama-3-70b"), perfmodel.load_hardware("dgx-h100"),
                             perfmodel.Plan(gpus=512, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192))
    est.step_time_s, est.mfu, est.fits_in_memory, est.memory_bytes.reserved

    from perfmodel.search import search   # every layout of a job, ranked

The package is laid out as the data flows (docs/architecture.md): spec -> cost -> run / search -> export,
execute -> calibrate -> validate, with cli and plots on top. The names below are read lazily, so importing a
module of one stage (the executor's workers import `perfmodel.spec` and `perfmodel.execute` only) does not load
the cost model.
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
