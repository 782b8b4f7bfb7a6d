"""The docs cannot drift from the code: generated schema blocks, named functions, the example spec, and the
numbers of model.md's worked trace."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
import yaml

from perfmodel.cli import docgen
from perfmodel.cost.comm import collectives as C
from perfmodel.cost.estimate import estimate
from perfmodel.spec.hardware.system import SharedHost, System, load_hardware
from perfmodel.spec.plan.layout import Plan
from perfmodel.spec.plan.file import PlanFile

DOCS = Path(__file__).resolve().parents[1] / "docs"
PACKAGE = Path(docgen.__file__).resolve().parents[1]  # perfmodel/ (docgen lives in perfmodel/cli/)
PAGES = ("model.md", "hardware.md", "plans.md", "stacks.md", "forecast.md", "sweep.md")
NAME = re.compile(r"\bperfmodel(?:\.[A-Za-z_]\w*)+")


def _read(page: str) -> str:
    return (DOCS / page).read_text()


def _module_file(parts: list[str]) -> Path | None:
    """The source file of module `parts` inside the perfmodel package, found on disk without importing it."""
    path = PACKAGE.joinpath(*parts[1:])
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports_torch(tree: ast.Module) -> bool:
    """Whether a module imports torch when it is loaded (a top-level `import torch...` / `from torch...`)."""
    for node in tree.body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "torch" or n.startswith("torch.") for n in names):
            return True
    return False


def _defines(tree: ast.Module, attrs: list[str]) -> bool:
    """Whether `attrs` (a name, then attributes of the class it names) are defined at the top of `tree`."""
    body: list = tree.body
    for attr in attrs:
        hit = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
                hit = node
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
                hit = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attr:
                hit = node
        if hit is None:
            return False
        body = getattr(hit, "body", [])
    return True


def resolves(dotted: str) -> bool:
    """Whether `dotted` names a perfmodel module, or something defined in one (function, class, constant,
    method). The longest prefix that is a module file is the module; the rest is looked up by importlib +
    getattr, except in modules that import torch at load, whose source is read instead (importing torch
    takes seconds)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(parts[:cut])
        if path is None:
            continue
        tree = ast.parse(path.read_text())
        if _imports_torch(tree):
            return _defines(tree, parts[cut:])
        obj = importlib.import_module(".".join(parts[:cut]))
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("page", ["hardware.md", "plans.md"])
def test_generated_blocks_match_the_models(page):
    begin, make = docgen.BLOCKS[page]
    _, body, _ = docgen.split_block(_read(page), begin)
    assert body == make(), f"docs/{page} is stale: run python -m perfmodel.cli.docgen"


def test_docgen_is_idempotent(tmp_path):
    for page in docgen.BLOCKS:
        (tmp_path / page).write_text(_read(page))
    assert docgen.main(["--docs", str(tmp_path), "--check"]) == 0
    assert docgen.main(["--docs", str(tmp_path)]) == 0
    assert all((tmp_path / p).read_text() == _read(p) for p in docgen.BLOCKS)


def test_validator_notes_name_real_fields():
    schemas = {**docgen.hardware_schema()["$defs"], **docgen.plan_schema()["$defs"],
               "System": System.model_json_schema(), "PlanFile": PlanFile.model_json_schema()}
    for model, field in docgen.VALIDATOR_NOTES:
        assert field in schemas[model]["properties"], f"{model}.{field} is documented but not a field"


@pytest.mark.parametrize("schema, names", [(docgen.hardware_schema, docgen.HARDWARE_MODELS),
                                           (docgen.plan_schema, docgen.PLAN_MODELS)])
def test_every_documented_field_has_a_description(schema, names):
    schema = schema()
    for name in names:
        model = schema if schema.get("title") == name else schema["$defs"][name]
        missing = [f for f, p in model["properties"].items() if not p.get("description", "").strip()]
        assert not missing, f"{name} fields without Field(description=...): {missing}"


def test_name_check_catches_what_is_missing():
    assert resolves("perfmodel.cost.pipeline.schedules.pipeline_time") and resolves("perfmodel.spec.plan.layout.Plan.zero_shard")
    assert resolves("perfmodel.execute.parallel.data.apply_fsdp")  # read from source: imports torch
    assert not resolves("perfmodel.cost.pipeline.schedules.no_such_function")
    assert not resolves("perfmodel.execute.parallel.data.no_such_function")
    assert not resolves("perfmodel.no_such_module.f")


@pytest.mark.parametrize("page", PAGES)
def test_every_named_function_resolves(page):
    names = sorted(set(NAME.findall(_read(page))))
    assert len(names) > 10
    missing = [name for name in names if not resolves(name)]
    assert not missing, f"docs/{page} names what the code lacks: {missing}"


def _yaml_blocks(text: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", text, re.S)


def test_example_spec_loads_cites_and_predicts(tmp_path):
    blocks = _yaml_blocks(_read("hardware.md"))
    assert len(blocks) == 1
    path = tmp_path / "example.yaml"
    path.write_text(blocks[0])
    system = load_hardware(str(path))
    assert system.name == "nx1-pod"
    assert system.accelerator.peak_flops("bf16") == 400e12
    assert [t.name for t in system.tiers] == ["xlink", "roce"] and system.tiers[0].domain_size == 16
    # every number cites a source, as the catalogue requires
    data = yaml.safe_load(blocks[0])
    for obj in [data, data["accelerator"], data["efficiency"], *data["tiers"]]:
        numbers = {k for k, v in obj.items() if k != "sources" and (isinstance(v, (int, float, list)) or
                                                                    (isinstance(v, dict) and k != "by_kind"))}
        numbers -= {"accelerator", "efficiency", "tiers"}
        assert numbers <= set(obj.get("sources", {})), f"uncited: {sorted(numbers - set(obj.get('sources', {})))}"
    # the prediction the page quotes
    est = estimate("llama-3-8b", system, Plan(gpus=64, tp=4, pp=2, micro_batch=1, global_batch=256, seq_len=8192,
                                               sequence_parallel=True, zero=1, recompute="selective"))
    assert est.fits_in_memory
    assert f"step time                 {est.step_time_s:.3f} s" in _read("hardware.md")
    assert round(est.step_time_s, 3) == 11.751


def test_shared_host_table_lists_its_fields():
    table = docgen.model_table(docgen.hardware_schema(), "SharedHost")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [r.split("|")[1].strip() for r in rows] == [f"`{f}`" for f in SharedHost.model_fields]
    assert "| `ranks` | integer > 0 | required | ranks the host ran at once" in table
    assert "| `cores` | integer > 0 | required |" in table


def test_plan_table_states_valid_values():
    table = docgen.model_table(docgen.plan_schema(), "Plan")
    assert "| `zero` | {0, 1, 2, 3} | default 0 |" in table
    assert "| `schedule` | {1f1b, interleaved, gpipe} or null | default null |" in table
    assert "| `tp` | integer > 0 | default 1 | tensor-parallel size" in table


def test_worked_trace_numbers_are_the_estimates():
    """model.md's worked trace quotes the built-in example; the estimate must still give those numbers."""
    text = _read("model.md")
    from perfmodel.spec import example

    est = estimate(example.MODEL, example.HARDWARE, example.example_plan())
    qkv = next(op for op in est.ops if op.name == "qkv")
    attn = next(op for op in est.ops if op.name == "attention")
    dp = next(c for c in est.comms if c.name == "dp gradient reduction")
    tp = next(c for c in est.comms if c.name == "tp activations")
    ag = float(C.collective_time("all_gather", tp.bytes, C.group_phases(load_hardware(example.HARDWARE), 8, 1, 512)))
    quoted = {"**248.7 us**": qkv.fwd_s * 1e6, "**523.0 us**": qkv.bwd_s * 1e6, "**399.6 us**": attn.fwd_s * 1e6, "**402.5 us**": ag * 1e6,
              "**811.56 ms**": est.time_s.bubble * 1e3, "**189.44 ms**": dp.seconds_per_call * 1e3,
              "**31.73 ms**": dp.exposed_s * 1e3, "**42.6%**": est.mfu * 100}
    for label, value in quoted.items():
        assert label in text
        shown = label.strip("*").split()[0].rstrip("%")
        decimals = len(shown.split(".")[1])
        assert f"{value:.{decimals}f}" == shown, label


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_plans_page_shows_the_real_export(target):
    from perfmodel.export.nearest import export_plan
    from perfmodel.spec.plan.file import load_plan_file

    plan = "strategies/llama-3-70b_1024xh100.json"
    command = f"$ perfmodel export {plan} --to {target}\n"
    text = _read("plans.md")
    shown = text[text.index(command) + len(command):].split("```", 1)[0]
    assert shown == export_plan(load_plan_file(DOCS.parent / plan), target)


def test_shipped_plan_files_match_this_perfmodel():
    """Every plan in strategies/ is what `predict --plan` and `export` accept: its prediction equals the estimate
    now (a change to the cost model must re-create them, as strategies/README.md says)."""
    from perfmodel.cost.estimate import check_prediction
    from perfmodel.spec.plan.file import load_plan_file

    plans = sorted((DOCS.parent / "strategies").glob("*.json"))
    assert plans
    for path in plans:
        pf = load_plan_file(path)
        check_prediction(pf.model, pf.hardware, pf.plan, pf.prediction, str(path))


@pytest.mark.parametrize("engine", ["SGLang", "TensorRT-LLM"])
def test_serving_worked_examples_print_what_inference_md_quotes(engine, capsys):
    """inference.md's SGLang and TensorRT-LLM worked examples: the command in its first bash block, run, prints the
    simulated latency rows (mean, median, p90, p99) and the notes the page quotes, digit for digit."""
    import shlex

    from perfmodel.cli.main import main

    text = _read("inference.md")
    section = text[text.index(f"### Worked example: {engine}"):]
    section = section[:section.index("\n### ", 5)]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)
    command = next(body for lang, body in blocks if lang == "bash").replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[0] == "perfmodel"
    assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    quoted = [line for lang, body in blocks if lang == "" for line in body.splitlines()
              if line.lstrip().startswith(("TTFT ms", "TPOT ms", "end-to-end ms", "note: prefix cache"))]
    assert len(quoted) >= 3
    for line in quoted:
        assert line in out, line
