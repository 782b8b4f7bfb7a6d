"""Turn a chosen plan into a plan file: balanced pipeline stages, per-operator placements, and the prediction."""

from __future__ import annotations

from ..cost.estimate import evaluate_plan, prediction_of
from ..cost.step.evaluate import Step
from ..spec.hardware.system import DEFAULT_HEADROOM, System
from ..spec.model.config import ModelConfig
from ..spec.plan.layout import Plan, megatron_rules, resolve
from ..spec.plan.file import VERSION, OpPlacement, PlacementCost, PlanFile, mesh_of
from ..spec.result import Estimate
from .pase import solver as pase
from .stage_split import balance_stages


def megatron_cost(model: ModelConfig, system: System, plan: Plan,
                  tables: pase.CostTables | None = None) -> tuple[float, float]:
    """PaSE's (seconds per step, bytes per device) for Megatron-LM's placements of `plan` (its bytes are the
    estimate's memory of the plan: the same functions count them). `tables`: the plan's, if at hand."""
    graph = pase.operator_graph(model.n_layers, model.moe is not None)
    tables = pase.cost_tables(graph, model, system, plan) if tables is None else tables
    return pase.evaluate(graph, tables, pase.megatron_assignment(graph, tables, plan.sequence_parallel),
                         use_alt=pase.megatron_alternatives(graph, tables))


def balanced(model: ModelConfig, system: System, plan: Plan, default: tuple[Step, Estimate],
             headroom: float = DEFAULT_HEADROOM) -> tuple[Plan, tuple[Step, Estimate], str | None]:
    """The plan with the stage split of `balance_stages` when it fits and is faster than the default split
    (`default`: the plan evaluated, `cost.estimate.evaluate_plan`), or fits where the default does not; else
    the plan as it is. With the plan chosen: its evaluation, and a note when the split changed."""
    est = default[1]
    split = balance_stages(model, system, plan, default[0])
    if not split.fits or split.layers == est.stage_layers:
        return plan, default, None
    candidate = resolve(plan.model_copy(update={"stage_layers": split.layers}), model, system)
    after = evaluate_plan(model, system, candidate, headroom)
    # the DP balances stage time; the whole step (DP/ZeRO comm, optimizer) decides
    if after[1].fits_in_memory and (after[1].step_time_s < est.step_time_s or not est.fits_in_memory):
        note = (f"stage split {split.layers} from balance_stages: step {after[1].step_time_s:.4f} s against "
                f"{est.step_time_s:.4f} s with the default split {est.stage_layers}"
                + ("" if est.fits_in_memory else ", which does not fit in memory"))
        return candidate, after, note
    return plan, default, None


def plan_file(model: ModelConfig, system: System, plan: Plan, created_by: str = "", balance: bool = False,
              evaluated: tuple[Step, Estimate] | None = None, headroom: float = DEFAULT_HEADROOM) -> PlanFile:
    """A plan file for `plan`: its estimate (`evaluated`: `cost.estimate.evaluate_plan` of it, if the caller has
    it), the PaSE placements for its mesh within the memory Megatron-LM's placements need (a budget of the whole
    HBM would let PaSE replicate weights the estimate never counted) and, with `balance`, the stage split of
    `balance_stages` where `balanced` keeps it. The plan is evaluated once: the estimate and PaSE's tables
    share it."""
    plan = resolve(plan, model, system)
    evaluated = evaluate_plan(model, system, plan, headroom) if evaluated is None else evaluated
    notes = []
    if balance and plan.pp > 1 and plan.stage_layers is None and not megatron_rules(plan):
        plan, evaluated, note = balanced(model, system, plan, evaluated, headroom)
        notes += [note] if note else []
    step, est = evaluated
    if plan.lora is not None:  # PaSE's tables price full training's states and traffic: Megatron's placements stand
        return estimated_plan_file(model, system, plan, est, (), None, "; ".join(
            [created_by, *notes, "placements: Megatron-LM's (PaSE does not price LoRA's frozen base)"]))
    graph = pase.operator_graph(model.n_layers, model.moe is not None)
    tables = pase.cost_tables(graph, model, system, plan, step)
    mega_s, mega_bytes = megatron_cost(model, system, plan, tables)
    found = pase.solve(model, system, plan, memory_budget=mega_bytes, tables=tables)
    cost = PlacementCost(time_s=found.time_s, memory_bytes=found.memory_bytes, megatron_time_s=mega_s,
                         megatron_memory_bytes=mega_bytes)
    return estimated_plan_file(model, system, plan, est, found.placements(), cost,
                               "; ".join([created_by, *notes]) if notes else created_by)


def estimated_plan_file(model: ModelConfig, system: System, plan: Plan, est: Estimate,
                        placements: list[OpPlacement] = (), cost: PlacementCost | None = None,
                        created_by: str = "") -> PlanFile:
    """The plan file of a resolved plan and its estimate: no placements means Megatron-LM's, no cost means PaSE
    did not price them."""
    return PlanFile(version=VERSION, model=model, hardware=system, plan=plan, mesh=mesh_of(plan),
                    stage_layers=est.stage_layers, placements=list(placements), prediction=prediction_of(est),
                    placement_cost=cost, created_by=created_by)
