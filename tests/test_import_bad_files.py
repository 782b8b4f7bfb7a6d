"""Real files that are not configs are refused as such, through the CLI: one `error:` line naming the file and what
is wrong, exit 2, nothing written (a template with placeholders, a recipe file with a syntax
error, a truncated trace)."""

from __future__ import annotations

import contextlib
import gzip
import io
from pathlib import Path

import pytest

from perfmodel.cli.main import main

FIX = Path(__file__).parent / "fixtures"
TEMPLATE = FIX / "configs" / "deepspeed" / "offload_pp_TEMPLATE.json"  # Megatron-DeepSpeed's sed template, verbatim
SCRIPT = FIX / "corpus" / "deepspeed" / "megatron-deepspeed" / "run-175b.sh"
TRACE = FIX / "traces" / "hta" / "nccl_data.json.gz"


def refused(argv: list[str], tmp_path: Path, *words: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    lines = err.getvalue().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err.getvalue()
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in err.getvalue() + out.getvalue()
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "out.yaml").exists()


def test_a_template_with_placeholders(tmp_path):
    refused(["import", str(TEMPLATE), str(SCRIPT), "--from", "deepspeed", "--hardware", "dgx-h100", "-o",
             str(tmp_path / "out.json")], tmp_path, "a template, not a config", "CONFIG_BATCH_SIZE (line 2)")


@pytest.mark.parametrize("framework", ["bridge", "torchtitan", "maxtext"])
def test_a_recipe_module_with_a_syntax_error(framework, tmp_path):
    """A Python recipe cut mid-statement, as a bad copy leaves it: 'not Python' with the line."""
    recipe = tmp_path / "recipe.py"
    recipe.write_text("def llama3_8b():\n    cfg = Config(\n        tensor_parallel_degree=8,\n")
    refused(["import", str(recipe), "--from", framework, "-o", str(tmp_path / "out.json")], tmp_path,
            "recipe.py", "not Python (line")


@pytest.mark.parametrize("cut", ["json", "gzip"])
def test_a_truncated_trace(cut, tmp_path):
    """A trace the profiler stopped writing: the JSON cut in half, or the gzip cut short."""
    raw = gzip.decompress(TRACE.read_bytes())
    path = tmp_path / ("cut.json" if cut == "json" else "cut.json.gz")
    path.write_bytes(raw[: len(raw) // 2] if cut == "json" else TRACE.read_bytes()[:300])
    words = ("is not JSON",) if cut == "json" else ("truncated or damaged gzip",)
    refused(["calibrate", "--from-trace", str(path), "--output", str(tmp_path / "out.yaml")], tmp_path,
            str(path), *words)
