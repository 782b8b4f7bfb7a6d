"""fp8 recipes (spec.plan.fp8_recipes, Plan.fp8_recipe): the scale bytes each keeps, where each runs, the CLI's mxfp8."""

import pytest

from perfmodel.cli.main import main
from perfmodel.cost.compute.kernels import narrow_bytes, saved_input_bytes
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import narrow_cache_bytes
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve

QWEN = dict(gpus=8, ep=8, micro_batch=2, global_batch=64, seq_len=4096, precision="fp8")


def plan_on(system="gb300-nvl72", **kw):
    return resolve(Plan(**{**QWEN, **kw}), load_model("qwen3-30b-a3b"), load_hardware(system))


def test_scale_bytes_per_element_by_recipe():
    # MXFP8: one E8M0 byte per 32 values (OCP MX v1.0); blockwise: an fp32 per 1x128 activation block and per
    # 128x128 weight block (DeepSeek-V3 Sec. 3.3.1); tensorwise: one scale per tensor, nothing per element
    assert narrow_bytes("fp8", "mxfp8") == 1 + 1 / 32 and narrow_bytes("fp8", "mxfp8", weights=True) == 1 + 1 / 32
    assert narrow_bytes("fp8", "blockwise") == 1 + 4 / 128 and narrow_bytes("fp8", "blockwise", True) == 1 + 4 / 16384
    assert narrow_bytes("fp8", "tensorwise") == narrow_bytes("fp8") == 1.0
    assert narrow_bytes("fp4") == 0.5 + 1 / 16  # NVFP4 keeps its own


def test_a_plan_keeps_its_recipes_scales():
    mx, tw = plan_on(fp8_recipe="mxfp8"), plan_on()
    assert (mx.fp8_recipe, tw.fp8_recipe) == ("mxfp8", "tensorwise")  # Transformer Engine's default
    lay_mx, lay_tw = Layouts.from_plan(mx), Layouts.from_plan(tw)
    assert saved_input_bytes(lay_mx) == pytest.approx(1 + 1 / 32) and saved_input_bytes(lay_tw) == 1.0
    # Transformer Engine's two cached copies of each weight (rowwise and columnwise), with their scales
    assert narrow_cache_bytes(1e9, lay_mx) == pytest.approx(2e9 * (1 + 1 / 32))
    assert narrow_cache_bytes(1e9, lay_tw) == pytest.approx(2e9)
    assert plan_on(precision="bf16").fp8_recipe is None


def test_recipes_are_refused_where_they_cannot_run():
    with pytest.raises(InputError, match=r"fp8_recipe = mxfp8 on H100-SXM5-80GB \(hopper\).*valid here: tensorwise, "
                                         "blockwise"):
        plan_on("dgx-h100", fp8_recipe="mxfp8")
    assert plan_on("dgx-h100", fp8_recipe="blockwise").fp8_recipe == "blockwise"
    with pytest.raises(InputError, match="fp8_recipe = blockwise with precision = bf16"):
        plan_on(precision="bf16", fp8_recipe="blockwise")


def test_cli_precision_mxfp8_is_fp8_with_the_mxfp8_recipe(capsys):
    flags = ["predict", "--model", "qwen3-30b-a3b", "--hardware", "gb300-nvl72", "--gpus", "8", "--tp", "1", "--pp", "1",
             "--ep", "8", "--micro-batch", "2", "--global-batch", "64", "--seq-len", "4096"]
    assert main([*flags, "--precision", "mxfp8"]) == 0
    assert "precision=fp8 (mxfp8)" in capsys.readouterr().out
    assert main([*flags, "--precision", "mxfp8", "--fp8-recipe", "blockwise"]) == 2
    err = capsys.readouterr().err
    assert "--precision mxfp8 with --fp8-recipe blockwise" in err and "\n" not in err.strip()
    assert main([*flags[:4], "dgx-h100", *flags[5:], "--precision", "mxfp8"]) == 2
    assert "valid here: tensorwise, blockwise" in capsys.readouterr().err
