"""Turn a chosen plan into a plan file: balanced pipeline stages, per-operator placements, and the prediction."""

from __future__ import annotations

from ..cost.estimate import estimate
from ..errors import InputError
from ..hardware import System
from ..models import ModelConfig
from ..plan import Plan, resolve
from ..planfile import VERSION, PlacementCost, PlanFile, Prediction, mesh_of
from . import pase
from .stages import balance_stages


def megatron_cost(model: ModelConfig, system: System, plan: Plan) -> tuple[float, float]:
    """PaSE's (seconds per step, bytes per device) for Megatron's placements of `plan`."""
    graph = pase.operator_graph(model, plan)
    tables = pase.cost_tables(graph, model, system, plan)
    return pase.evaluate(graph, tables, pase.megatron_assignment(graph, tables, plan.sequence_parallel))


def megatron_memory(model: ModelConfig, system: System, plan: Plan) -> float:
    """Bytes per device PaSE counts for Megatron's placements of `plan`: the budget a plan file's placements get.

    The step time and memory a plan file predicts come from `estimate`, which assumes Megatron's placements;
    PaSE may replace them where that is faster without needing more memory than they do, so the prediction's
    memory still holds (a budget of the whole HBM would let PaSE replicate weights the estimate never counted).
    """
    return megatron_cost(model, system, plan)[1]


def prediction_of(est) -> Prediction:
    return Prediction(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s, mfu=est.mfu,
                      memory_bytes=est.memory_bytes.total, memory_capacity_bytes=est.memory_capacity_bytes,
                      fits_in_memory=est.fits_in_memory)


def check_prediction(pf: PlanFile, where: str = "plan file") -> None:
    """Refuse a plan file whose `prediction` is not what this perfmodel predicts for its plan (edited, or written
    by another version): one line naming the field, the file's value and the estimate."""
    now = prediction_of(estimate(pf.model, pf.hardware, pf.plan)).model_dump()
    for field, value in pf.prediction.model_dump().items():
        same = value == now[field] if isinstance(value, bool) else abs(value - now[field]) <= 1e-6 * abs(now[field])
        if not same:
            raise InputError(f"{where}: prediction.{field} = {value!r} disagrees with this perfmodel's estimate of "
                             f"the plan ({now[field]!r}); the file was edited or written by another version: "
                             "re-create it (perfmodel search ... --output FILE or perfmodel predict ... --save-plan FILE)")


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
        if split.fits and split.layers != default.stage_layers:
            balanced = resolve(plan.model_copy(update={"stage_layers": split.layers}), model, system)
            after = estimate(model, system, balanced)
            # the DP balances stage time; the whole step (DP/ZeRO comm, optimizer) decides
            if after.fits_in_memory and (after.step_time_s < default.step_time_s or not default.fits_in_memory):
                plan = balanced
                notes.append(f"stage split {split.layers} from balance_stages: step {after.step_time_s:.4f} s "
                             f"against {default.step_time_s:.4f} s with the default split {default.stage_layers}"
                             + ("" if default.fits_in_memory else ", which does not fit in memory"))
    est = estimate(model, system, plan)
    mega_s, mega_bytes = megatron_cost(model, system, plan)
    found = pase.solve(model, system, plan, memory_budget=mega_bytes)
    cost = PlacementCost(time_s=found.time_s, memory_bytes=found.memory_bytes, megatron_time_s=mega_s,
                         megatron_memory_bytes=mega_bytes)
    return PlanFile(version=VERSION, model=model, hardware=system, plan=plan, mesh=mesh_of(plan),
                    stage_layers=est.stage_layers, placements=found.placements(), prediction=prediction_of(est),
                    placement_cost=cost,
                    created_by="; ".join([created_by, *notes]) if notes else created_by)
