"""Turn a chosen plan into a plan file: balanced pipeline stages, per-operator placements, and the prediction."""

from __future__ import annotations

from ..cost.estimate import estimate
from ..hardware import System
from ..models import ModelConfig
from ..plan import Plan, resolve
from ..planfile import PlanFile, Prediction, mesh_of
from . import pase
from .stages import balance_stages


def megatron_memory(model: ModelConfig, system: System, plan: Plan) -> float:
    """Bytes per device PaSE counts for Megatron's placements of `plan`: the budget a plan file's placements get.

    The step time and memory a plan file predicts come from `estimate`, which assumes Megatron's placements;
    PaSE may replace them where that is faster without needing more memory than they do, so the prediction's
    memory still holds (a budget of the whole HBM would let PaSE replicate weights the estimate never counted).
    """
    graph = pase.operator_graph(model, plan)
    tables = pase.cost_tables(graph, model, system, plan)
    return pase.evaluate(graph, tables, pase.megatron_assignment(graph, tables, plan.sequence_parallel))[1]


def plan_file(model: ModelConfig, system: System, plan: Plan, created_by: str = "",
              balance: bool = False) -> PlanFile:
    """A plan file for `plan`: its estimate, the PaSE placements for its mesh (within `megatron_memory`) and,
    with `balance`, the stage split of `balance_stages` when it is faster than the default split or fits where
    the default does not."""
    plan = resolve(plan, model, system)
    notes = []
    if balance and plan.pp > 1 and plan.stage_layers is None:
        split = balance_stages(model, system, plan)
        default = estimate(model, system, plan)
        better = split.t_max < split.default_t_max * (1 - 1e-9)
        if split.fits and (better or not default.fits_in_memory):
            plan = resolve(plan.model_copy(update={"stage_layers": split.layers}), model, system)
            notes.append(f"stage split {split.layers} from balance_stages (default split: slowest stage "
                         f"{split.default_t_max * 1e3:.2f} ms per micro-batch, balanced {split.t_max * 1e3:.2f} ms)")
    est = estimate(model, system, plan)
    placements = pase.solve(model, system, plan, memory_budget=megatron_memory(model, system, plan)).placements()
    prediction = Prediction(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s, mfu=est.mfu,
                            memory_bytes=est.memory_bytes.total, memory_capacity_bytes=est.memory_capacity_bytes,
                            fits_in_memory=est.fits_in_memory)
    return PlanFile(model=model, hardware=system, plan=plan, mesh=mesh_of(plan), stage_layers=est.stage_layers,
                    placements=placements, prediction=prediction,
                    created_by="; ".join([created_by, *notes]) if notes else created_by)
