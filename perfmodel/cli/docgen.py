"""Generated parts of the documentation: the hardware-spec, plan-file and sweep-file schema tables in docs/.

    python -m perfmodel.cli.docgen           # rewrite the generated blocks of docs/hardware.md, plans.md, sweep.md
    python -m perfmodel.cli.docgen --check   # exit 1 if a block differs from what the models give now

Run from the checkout's root (or pass --docs): the package renders the tables, the caller says where docs/ is.

Each table is rendered from the pydantic models' JSON schema (`perfmodel.spec.hardware.system.hardware_json_schema`,
`PlanFile.model_json_schema()`), so the docs say what the code validates: type, range, default, description.
Descriptions come from each field's `Field(description=...)` (so hardware_specs/schema.json carries them too);
rules that only a validator enforces are added from `VALIDATOR_NOTES`. tests/test_docs.py checks that every key
there is still a field, and that the committed blocks equal what this module renders.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..types import MAX_COUNT

DOCS = Path("docs")  # the working directory's: an installed package has no docs/ of its own
END = "<!-- END GENERATED -->"
HARDWARE_BEGIN = "<!-- BEGIN GENERATED: hardware schema (python -m perfmodel.cli.docgen) -->"
PLAN_BEGIN = "<!-- BEGIN GENERATED: plan schema (python -m perfmodel.cli.docgen) -->"
HARDWARE_MODELS = ("System", "Accelerator", "NetworkTier", "KindFit", "Efficiency", "SharedHost", "HostLink", "HostCPU",
                   "HostCalls", "RunFit", "RunResidual", "Interval", "HostCosts", "HostProbe", "SustainProbe")
SWEEP_BEGIN = "<!-- BEGIN GENERATED: sweep schema (python -m perfmodel.cli.docgen) -->"
SWEEP_MODELS = ("Sweep", "Axis", "Sampling", "Workload", "Training", "Serving", "Constraints")
PLAN_MODELS = ("PlanFile", "Plan", "ModelConfig", "OpPlacement", "Prediction", "PlacementCost")

# Rules the models' validators enforce that a JSON schema cannot state: appended to the description.
VALIDATOR_NOTES = {
    ("System", "tiers"): "domain sizes nest: each a multiple of the one inside it; only the last may be null",
    ("System", "memory_overhead_gib"): "less than accelerator.hbm_capacity_gib",
    ("Accelerator", "peak_tflops"): "must list bf16 (the MFU reference)",
    ("NetworkTier", "torus_dims"): "required with topology torus and refused otherwise; product = domain_size",
    ("Efficiency", "matmul_max"): "each in (0, 1]; the System needs one for every GEMM dtype (bf16, fp16, fp8, "
                                  "fp4) its accelerator lists",
    ("HostCPU", "sources"): "must cite every per-call cost (calls.KIND_s)",
}


def hardware_schema() -> dict:
    """JSON schema of a hardware spec file (System at the root, the other models under $defs)."""
    from ..spec.hardware.system import hardware_json_schema

    return hardware_json_schema()


def plan_schema() -> dict:
    """JSON schema of a plan file (PlanFile at the root, the other models under $defs)."""
    from ..spec.plan.file import PlanFile

    return PlanFile.model_json_schema()


def sweep_schema() -> dict:
    """JSON schema of a sweep file (Sweep at the root; sweeps/schema.json)."""
    from ..sweep.schema import sweep_json_schema

    return sweep_json_schema()


def _range(p: dict) -> str:
    """' > 0', ' in (0, 1]' ... from JSON-schema bounds (pydantic writes gt/ge too for strict ints)."""
    lo = next(((p[k], k in ("minimum", "ge")) for k in ("exclusiveMinimum", "gt", "minimum", "ge") if k in p), None)
    hi = next(((p[k], k in ("maximum", "le")) for k in ("exclusiveMaximum", "lt", "maximum", "le") if k in p), None)
    if hi == (MAX_COUNT, True):  # the cap on every count (errors.MAX_COUNT), not worth a column entry each
        hi = None
    if lo and hi:
        return f" in {'[' if lo[1] else '('}{lo[0]:g}, {hi[0]:g}{']' if hi[1] else ')'}"
    if lo:
        return f" {'>=' if lo[1] else '>'} {lo[0]:g}"
    if hi:
        return f" {'<=' if hi[1] else '<'} {hi[0]:g}"
    return ""


def type_text(p: dict) -> str:
    """A JSON-schema property as a short type: 'integer > 0', 'list of integer > 0', 'NetworkTier', ..."""
    if "$ref" in p:
        return p["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in p:
        kinds = [type_text(q) for q in p["anyOf"] if q.get("type") != "null"]
        nullable = any(q.get("type") == "null" for q in p["anyOf"])
        return " or ".join(kinds) + (" or null" if nullable else "")
    if "enum" in p:
        return "{" + ", ".join(str(v) for v in p["enum"]) + "}"
    kind = p.get("type")
    if kind == "array":
        if "prefixItems" in p:
            return "[" + ", ".join(type_text(q) for q in p["prefixItems"]) + "]"
        out = "list of " + type_text(p.get("items", {}))
        return out + (f" (at least {p['minItems']})" if p.get("minItems") else "")
    if kind == "object":
        keys = p.get("propertyNames", {}).get("enum")
        key = "{" + ", ".join(keys) + "}" if keys else "string"
        return f"map {key} -> {type_text(p.get('additionalProperties', {}))}"
    return (kind or "any") + _range(p)


def _default(p: dict, required: bool) -> str:
    if required:
        return "required"
    if "default" in p:
        return "default " + json.dumps(p["default"])
    return "optional"


def _cell(text: str) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def model_table(schema: dict, name: str) -> str:
    """One model of `schema` (the root or a $defs entry) as a heading, its docstring and a field table."""
    model = schema if schema.get("title") == name else schema["$defs"][name]
    required = set(model.get("required", []))
    rows = ["| field | type | required / default | description |", "|---|---|---|---|"]
    for field, p in model["properties"].items():
        desc = p.get("description", "")
        if (name, field) in VALIDATOR_NOTES:
            desc = f"{desc}; {VALIDATOR_NOTES[name, field]}" if desc else VALIDATOR_NOTES[name, field]
        rows.append(f"| `{field}` | {_cell(type_text(p))} | {_cell(_default(p, field in required))} | "
                    f"{_cell(desc)} |")
    doc = model.get("description", "").strip()
    return "\n".join([f"### {name}", "", *([doc, ""] if doc else []), *rows])


def render(schema: dict, names: tuple[str, ...]) -> str:
    """Tables for `names`, in that order, separated by blank lines."""
    return "\n\n".join(model_table(schema, n) for n in names)


def hardware_schema_markdown() -> str:
    """The hardware spec schema: one table per model (System first, then what it nests)."""
    return render(hardware_schema(), HARDWARE_MODELS)


def plan_schema_markdown() -> str:
    """The plan-file schema: PlanFile, then the models it nests (the hardware models are in docs/hardware.md)."""
    return render(plan_schema(), PLAN_MODELS)


def sweep_schema_markdown() -> str:
    """The sweep file's schema: Sweep, then the models it nests."""
    return render(sweep_schema(), SWEEP_MODELS)


BLOCKS = {"hardware.md": (HARDWARE_BEGIN, hardware_schema_markdown),
          "plans.md": (PLAN_BEGIN, plan_schema_markdown),
          "sweep.md": (SWEEP_BEGIN, sweep_schema_markdown)}


def split_block(text: str, begin: str) -> tuple[str, str, str]:
    """(before, generated body, after) of the block between `begin` and the next END marker in `text`."""
    start = text.find(begin)
    end = text.find(END, start + len(begin)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise ValueError(f"markers not found: {begin!r} ... {END!r}")
    body_start = start + len(begin)
    return text[:body_start], text[body_start:end].strip("\n"), text[end:]


def with_block(text: str, begin: str, body: str) -> str:
    """`text` with the generated block after `begin` replaced by `body`."""
    before, _, after = split_block(text, begin)
    return f"{before}\n{body}\n{after}"


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or, with --check, compare) the generated blocks of docs/hardware.md and docs/plans.md."""
    ap = argparse.ArgumentParser(prog="python -m perfmodel.cli.docgen", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is out of date")
    ap.add_argument("--docs", type=Path, default=DOCS, help=f"docs directory (default {DOCS})")
    a = ap.parse_args(argv)
    stale = []
    for fname, (begin, make) in BLOCKS.items():
        path = a.docs / fname
        try:
            text = path.read_text()
            new = with_block(text, begin, make())
        except (OSError, ValueError) as err:
            print(f"error: {path}: {err}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(str(path))
            if not a.check:
                path.write_text(new)
    verb = "out of date" if a.check else "rewritten"
    print(f"{verb}: {', '.join(stale)}" if stale else "generated blocks up to date")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
