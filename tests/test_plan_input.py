"""cli.plan_input: the one place a command's flags become the (model, system, resolved plan) the cost model prices,
from the plan flags, a plan file, a framework config or (predict, no flags) the built-in example."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from perfmodel.cli.main import build_parser
from perfmodel.cli.plan_input import imported_plan, plan_input, save_plan
from perfmodel.cost.estimate import evaluate_plan, prediction_of
from perfmodel.errors import InputError
from perfmodel.spec import example
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve

ROOT = Path(__file__).parents[1]
TORCHTITAN_8B = ROOT / "tests" / "fixtures" / "configs" / "torchtitan" / "llama3_8b.toml"
FLAGS = ["--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "64", "--tp", "2", "--pp", "2",
         "--micro-batch", "1", "--global-batch", "256", "--seq-len", "8192", "--zero", "1", "--headroom", "0.2"]


def args(*argv: str):
    return build_parser(argv[0]).parse_args(list(argv))


def test_flags_give_the_resolved_plan_and_headroom():
    p = plan_input(args("predict", *FLAGS))
    model, system = load_model("llama-3-8b"), load_hardware("dgx-h100")
    plan = resolve(Plan(gpus=64, tp=2, pp=2, micro_batch=1, global_batch=256, seq_len=8192, zero=1), model, system)
    assert (p.model, p.system, p.plan, p.plan_file, p.headroom) == (model, system, plan, None, 0.2)
    assert p.plan.dp == 16  # gpus / (tp pp cp)
    assert plan_input(args("forecast", "--tokens", "1T", *FLAGS)).plan == plan


def test_no_flags_give_the_example_only_where_asked():
    p = plan_input(args("predict"), builtin_example=True)
    assert (p.model, p.system) == (load_model(example.MODEL), load_hardware(example.HARDWARE))
    assert {k: getattr(p.plan, k) for k in example.PLAN} == example.PLAN
    with pytest.raises(InputError, match="forecast needs --model, --hardware"):
        plan_input(args("forecast", "--tokens", "1T"))


def test_a_saved_plan_file_reads_back_as_the_plan_it_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["perfmodel", "predict", *FLAGS])
    p = plan_input(args("predict", *FLAGS))
    step, est = evaluate_plan(p.model, p.system, p.plan, p.headroom)
    out = tmp_path / "plan.json"
    assert save_plan(p.model, p.system, est.plan, (step, est), "--save-plan", out, False, p.headroom) is None  # fits
    back = plan_input(args("predict", "--plan", str(out)))
    assert (back.model, back.plan) == (p.model, p.plan)
    assert back.plan_file.prediction == prediction_of(est)
    assert back.plan_file.created_by == "perfmodel predict " + " ".join(FLAGS)
    with pytest.raises(InputError, match="predict --plan takes its inputs from the plan file; drop --tp"):
        plan_input(args("predict", "--plan", str(out), "--tp", "2"))


def test_a_config_gives_the_plan_import_reads():
    launch = ["--from", "torchtitan", "--hardware", "dgx-h100", "--gpus", "8"]
    p = plan_input(args("predict", "--config", str(TORCHTITAN_8B), *launch))
    imp, model, system, plan = imported_plan(args("import", str(TORCHTITAN_8B), *launch), [str(TORCHTITAN_8B)])
    assert (p.model, p.system, p.plan) == (model, system, plan)
    # llama3_8b.toml: tp 1, dp_shard -1 (the rest of the job's 8 devices), local_batch_size 1, seq_len 8192
    assert (plan.gpus, plan.tp, plan.dp, plan.micro_batch, plan.seq_len, plan.stack) == (8, 1, 8, 1, 8192, "torchtitan")
    assert imp.framework == "torchtitan"
    with pytest.raises(InputError, match="predict --config takes the plan from the config; drop --tp"):
        plan_input(args("predict", "--config", str(TORCHTITAN_8B), *launch, "--tp", "2"))


@pytest.mark.parametrize("module", ["plan_flags.py", "plan_input.py", "report.py", "argtypes.py"])
def test_the_layer_under_the_commands_never_calls_a_command(module):
    """The commands call plan_flags, plan_input and report; none of these imports a command back."""
    tree = ast.parse((ROOT / "perfmodel" / "cli" / module).read_text())
    names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.startswith("commands") or ".commands" in n or n.endswith("main")]
