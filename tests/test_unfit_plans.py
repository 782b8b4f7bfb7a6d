"""Never refuse what runs: a plan the user describes (predict's flags, their framework's config) is written
as a plan file whatever the memory model says, with the verdict, by how much and which part decides it; `--strict`
refuses it in one line, exit 2, nothing written."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.spec.stack.profile import load_stack

GiB = 2**30
# Llama 3.1 405B on 8 H100s at tp 8: 16 B/param of weights, gradients and Adam state over 8 devices alone is ~760 GiB
# per device, far past the 80 GiB H100.
NOFIT = ["predict", "--model", "llama-3.1-405b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "8", "--pp", "1",
         "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096"]
MEGATRON_FP8 = Path(__file__).parent / "fixtures" / "configs" / "megatron" / "train_llama3_8b_h100_fp8.sh"


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_predict_save_plan_writes_a_plan_that_does_not_fit(tmp_path):
    plan = tmp_path / "p.json"
    rc, _, err = run(NOFIT + ["--save-plan", str(plan), "--format", "json"])
    assert rc == 0 and plan.exists()
    written = json.loads(plan.read_text())
    assert written["prediction"]["fits_in_memory"] is False
    line = [ln for ln in err.splitlines() if "does not fit" in ln]
    assert len(line) == 1 and "written although" in line[0] and "short by" in line[0]
    # the part that decides it is the largest of the five, by the estimate's own breakdown
    rc, out, _ = run(NOFIT + ["--format", "json"])
    mem = json.loads(out)["memory_bytes"]
    parts = {k: mem[k] for k in ("weights", "gradients", "optimizer", "activations", "transient")}
    big = max(parts, key=parts.get)
    assert f"{big} ({parts[big] / GiB:.1f} GiB) the largest part" in line[0]
    # short by: the band's lower end of reserved, reserved * (1 + low), less what the allocator can reserve
    e = json.loads(out)
    low = load_stack(e["plan"]["stack"]).memory_band["reserved"].low
    room = e["memory_room_bytes"]
    assert room == pytest.approx(e["memory_capacity_bytes"] - mem["runtime"])
    short = (mem["reserved"] * (1 + low) - room) / GiB
    assert f"short by {short:.1f} GiB beyond the band" in line[0]


def test_strict_refuses_in_one_line_and_writes_nothing(tmp_path):
    plan = tmp_path / "p.json"
    rc, _, err = run(NOFIT + ["--save-plan", str(plan), "--strict"])
    assert rc == 2 and not plan.exists()
    assert len(err.splitlines()) == 1 and err.startswith("error: --save-plan") and "--strict" in err


def test_strict_writes_a_plan_that_fits(tmp_path):
    plan = tmp_path / "p.json"
    rc, _, err = run(["predict", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "8",
                      "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096",
                      "--save-plan", str(plan), "--strict"])
    assert rc == 0 and plan.exists() and "does not fit" not in err


def test_import_output_writes_a_published_config_the_memory_model_refuses(tmp_path):
    """Megatron-LM's own Llama 3 8B FP8 example on 8 H100s (it runs as published); the memory model says it does not
    fit: -o writes it with the verdict, --strict refuses."""
    plan = tmp_path / "llama3.json"
    argv = ["import", str(MEGATRON_FP8), "--from", "megatron", "--hardware", "dgx-h100", "-o", str(plan)]
    rc, out, err = run(argv)
    assert rc == 0 and plan.exists()
    written = json.loads(plan.read_text())
    assert written["plan"]["tp"] == 1 and written["plan"]["gpus"] == 8  # the script's TP 1 on its 8 GPUs per node
    if written["prediction"]["fits_in_memory"]:  # the memory model came to agree with the run: nothing to say
        assert "does not fit" not in err
        return
    assert "written although the memory model says it does not fit" in err
    plan.unlink()
    rc, _, err = run(argv + ["--strict"])
    assert rc == 2 and not plan.exists() and len(err.splitlines()) == 1
