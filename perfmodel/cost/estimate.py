"""Predict one training step of one plan (`estimate`), and check a plan file's prediction against it.

The same code (`cost.step.evaluate`) prices one plan here and every layout of a search: a plan is a `Layouts`
of length 1.
"""

from __future__ import annotations

from ..errors import InputError
from ..hardware import System, load_hardware
from ..models import ModelConfig, load_model
from ..plan import Plan, resolve
from ..result import Estimate, Prediction
from .layouts import Layouts
from .memory import DEFAULT_HEADROOM
from .report import report_plan
from .step import Step, evaluate


def estimate(model: ModelConfig | str, hardware: System | str, plan: Plan | dict,
             headroom: float = DEFAULT_HEADROOM) -> Estimate:
    """Predict one training step of `plan` for `model` on `hardware` (objects, preset names or file paths);
    `headroom`: the share of the allocator's room the fit test keeps free (`cost.memory.memory_budget`)."""
    return evaluate_plan(model, hardware, plan, headroom)[1]


def evaluate_plan(model: ModelConfig | str, hardware: System | str, plan: Plan | dict,
                  headroom: float = DEFAULT_HEADROOM) -> tuple[Step, Estimate]:
    """`estimate`, and the evaluated step it reports (what PaSE's tables take their reference from,
    `cost.tables.cost_tables`), so that a caller needing both evaluates the plan once."""
    model, system = load_model(model), load_hardware(hardware)
    if isinstance(plan, dict):
        plan = Plan(**plan)
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a perfmodel.Plan (or a dict of its fields), got {type(plan).__name__}")
    plan = resolve(plan, model, system)
    step = evaluate(model, system, Layouts.from_plan(plan), headroom=headroom)
    return step, report_plan(model, system, step, 0)


def prediction_of(est: Estimate) -> Prediction:
    """The headline numbers a plan file records."""
    return Prediction(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s, mfu=est.mfu,
                      memory_bytes=est.memory_bytes.reserved, memory_capacity_bytes=est.memory_capacity_bytes,
                      memory_headroom=est.memory_headroom, fits_in_memory=est.fits_in_memory)


def check_prediction(model: ModelConfig, system: System, plan: Plan, prediction: Prediction,
                     where: str = "plan file") -> Estimate:
    """This perfmodel's estimate of a plan file's plan; InputError if the file's `prediction` is not it (the file
    was edited, or written by another version): one line naming the field, the file's value and the estimate."""
    est = estimate(model, system, plan, prediction.memory_headroom)
    now = prediction_of(est).model_dump()
    for field, value in prediction.model_dump().items():
        same = value == now[field] if isinstance(value, bool) else abs(value - now[field]) <= 1e-6 * abs(now[field])
        if not same:
            raise InputError(f"{where}: prediction.{field} = {value!r} disagrees with this perfmodel's estimate of "
                             f"the plan ({now[field]!r}); the file was edited or written by another version: "
                             "re-create it (perfmodel search ... --output FILE or perfmodel predict ... "
                             "--save-plan FILE)")
    return est
