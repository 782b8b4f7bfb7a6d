"""Plan.weight_dtype / moment_dtype: the stored parameter and Adam's moments as plan settings, priced in
one place (cost.memory.states.state_bytes, adam_step_bytes). The stacks' own defaults must price as they did before the
fields existed; a plan that sets them prices what it states."""

from pathlib import Path

import numpy as np
import pytest

from perfmodel import estimate
from perfmodel.cli.main import main
from perfmodel.cost.memory.states import adam_step_bytes, state_bytes
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.spec.plan.file import load_plan_file
from perfmodel.spec.stack.profile import STACKS, load_stack

ROOT = Path(__file__).resolve().parents[1]
STACKS_AND_LINES = [*STACKS, "nemo-automodel@25.10"]  # the release line that trains bf16 state (Stack.bf16_state)


def before(stack, zero):
    """(weights, optimizer) bytes per parameter as cost.memory.states priced them before the dtype fields (commit 108d79f):
    bf16 weights + fp32 master, m, v; FSDP's sharded parameter at ZeRO-3 or an XLA stack's parameter as the fp32
    master (4 + 8); bf16 weights and moments with no master on a bf16_state stack (2 + 4)."""
    s = load_stack(stack)
    if s.bf16_state:
        return 2.0, 4.0
    if (zero >= 3 and s.fsdp_master_weights) or s.fp32_parameters:
        return 4.0, 8.0
    return 2.0, 12.0


def plan(stack="megatron-core", zero=1, **kw):
    return resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=1024, zero=zero, stack=stack, **kw),
                   load_model("llama-3-8b"), load_hardware("dgx-h100"))


@pytest.mark.parametrize("stack", STACKS_AND_LINES)
def test_every_stack_prices_its_defaults_as_before(stack):
    for zero in (0, 1, 2, 3):
        p = plan(stack, zero)
        own = "bf16" if load_stack(stack).bf16_state else "fp32"
        assert (p.weight_dtype, p.moment_dtype) == (own, own)
        st = state_bytes(1.0, p)
        w, o = before(stack, zero)
        shard = 8
        assert float(st["weights"]) == w / (shard if zero >= 3 else 1)
        assert float(st["optimizer"]) == o / (shard if zero >= 1 else 1)
        g = 4.0 if p.grad_dtype == "fp32" else 2.0  # the step's bytes as before: 26 + 2g, bf16 state 12 + 2g
        assert adam_step_bytes(g, p.weight_dtype, p.moment_dtype) == (12.0 if own == "bf16" else 26.0) + 2 * g


def test_adam_step_bytes_of_each_dtype_pair():
    # read g + w + 2m, write w + 2m (+ the bf16 copy of an fp32 master), read g again for the norm
    g = 4.0
    assert adam_step_bytes(g, "fp32", "fp32") == g + 4 + 8 + 4 + 8 + 2 + g
    assert adam_step_bytes(g, "fp32", "bf16") == g + 4 + 4 + 4 + 4 + 2 + g
    assert adam_step_bytes(g, "bf16", "fp32") == g + 2 + 8 + 2 + 8 + g
    assert adam_step_bytes(g, "bf16", "bf16") == g + 2 + 4 + 2 + 4 + g


@pytest.mark.parametrize("stack,zero,weight,moment,expect", [
    ("megatron-core", 1, "fp32", "bf16", (2.0, 4 + 4)),  # --use-precision-aware-optimizer --exp-avg*-dtype bf16
    ("megatron-core", 1, "bf16", "fp32", (2.0, 8.0)),
    ("megatron-core", 1, "bf16", "bf16", (2.0, 4.0)),
    ("torchtitan", 3, "fp32", "bf16", (4.0, 4.0)),  # the fp32 sharded parameter is the master
    ("torchtitan", 1, "fp32", "bf16", (2.0, 4 + 4)),  # below ZeRO-3 a master beside bf16 weights
    ("maxtext", 1, "bf16", "bf16", (2.0, 4.0)),  # MaxText weight_dtype bfloat16 (mu and nu follow it)
    ("maxtext", 1, "fp32", "bf16", (4.0, 4.0)),
    ("nemo-automodel@25.10", 3, "fp32", "fp32", (4.0, 8.0)),  # a bf16_state stack told to keep fp32 state
])
def test_set_dtypes_price_what_they_state(stack, zero, weight, moment, expect):
    p = plan(stack, zero, weight_dtype=weight, moment_dtype=moment)
    st = state_bytes(8.0, p)
    w, o = expect
    if stack.startswith("nemo-automodel"):  # no fsdp_master_weights there: a bf16 working copy and a master
        w, o = 2.0, 12.0
    assert float(st["weights"]) == 8.0 * w / (8 if zero >= 3 else 1)
    assert float(st["optimizer"]) == 8.0 * o / 8


def test_llama_3_70b_zero3_bf16_weights_by_hand():
    """Llama-3-70B (70,553,706,496 parameters: Dubey et al. 2024's shape, untied embedding), ZeRO-3 over 64 ranks,
    tp = pp = 1: each device holds P/64 of every state. torchtitan's default: 4 B fp32 sharded parameter + 8 B of
    fp32 moments; weight_dtype bf16: 2 B, no master; + moment_dtype bf16: 2 + 2 B of moments."""
    model = load_model("llama-3-70b")
    P = 70_553_706_496
    assert model.n_params() == P
    base = dict(gpus=64, micro_batch=1, global_batch=64, seq_len=8192, zero=3, recompute="full", stack="torchtitan")
    cases = {(None, None): (4, 8), ("bf16", None): (2, 8), ("bf16", "bf16"): (2, 4), ("fp32", "bf16"): (4, 4)}
    for (wd, md), (w, o) in cases.items():
        est = estimate(model, "dgx-h100", Plan(**base, weight_dtype=wd, moment_dtype=md))
        mb = est.memory_bytes
        assert mb.weights == pytest.approx(w * P / 64, rel=1e-12)
        assert mb.optimizer == pytest.approx(o * P / 64, rel=1e-12)
    # bf16 / bf16: 6 B per parameter over 64 ranks = 6.61 GB, against the default's 13.23 GB
    assert 6 * P / 64 / 1e9 == pytest.approx(6.614, abs=1e-3)


def test_the_optimizer_step_streams_the_dtypes_bytes():
    model = load_model("llama-3-8b")
    base = dict(gpus=8, micro_batch=1, global_batch=8, seq_len=1024, zero=1, stack="megatron-core", grad_dtype="fp32")
    t32 = estimate(model, "dgx-h100", Plan(**base)).time_s.optimizer
    t16 = estimate(model, "dgx-h100", Plan(**base, weight_dtype="bf16", moment_dtype="bf16")).time_s.optimizer
    # same parameters, same bandwidth: the Adam step's bytes over the updated 1/8 (adam_step_bytes, 20 / 34) with
    # Megatron-LM's own passes (megatron-core's step_passes: the master's re-read where it is fp32, and the whole
    # gradient buffer's zero, NaN-check norm and 1/dp prescale), up to the launch terms
    from perfmodel.cost.memory.states import grad_buffer_bytes, master_copy_bytes
    from perfmodel.spec.stack.profile import load_stack

    buffer = grad_buffer_bytes(4, load_stack("megatron-core").step_passes, True)
    per_param = lambda w: (adam_step_bytes(4, w, w) + master_copy_bytes(w)) / 8 + buffer  # noqa: E731
    assert t16 / t32 == pytest.approx(per_param("bf16") / per_param("fp32"), rel=0.02)


def test_old_plan_files_load_with_the_stacks_dtypes():
    pf = load_plan_file(ROOT / "strategies" / "llama-3-70b_1024xh100.json")  # written before the fields
    assert (pf.plan.weight_dtype, pf.plan.moment_dtype) == ("fp32", "fp32")


def test_a_bad_dtype_is_refused_in_one_line(capsys):
    with pytest.raises(Exception) as e:
        Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=1024, weight_dtype="fp16")
    assert "weight_dtype" in str(e.value)
    with pytest.raises(SystemExit) as ex:
        main(["predict", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--micro-batch", "1",
              "--global-batch", "8", "--seq-len", "1024", "--weight-dtype", "fp8"])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert "--weight-dtype" in err and "'fp8'" in err and "fp32" in err and len(err.strip().splitlines()) == 1


def test_flags_reach_the_plan(capsys):
    args = ["predict", "--model", "llama-3-70b", "--hardware", "dgx-h100", "--gpus", "64", "--tp", "1", "--pp", "1",
            "--micro-batch", "1",
            "--global-batch", "64", "--seq-len", "8192", "--zero", "3", "--recompute", "full", "--stack", "torchtitan",
            "--format", "json"]
    assert main(args) == 0
    base = capsys.readouterr().out
    assert main([*args, "--weight-dtype", "bf16", "--moment-dtype", "bf16"]) == 0
    bf16 = capsys.readouterr().out
    import json
    w0, w1 = (json.loads(o)["memory_bytes"] for o in (base, bf16))
    assert w1["weights"] == pytest.approx(w0["weights"] / 2) and w1["optimizer"] == pytest.approx(w0["optimizer"] / 2)
    assert not np.isclose(w0["weights"], w1["weights"])


def with_dtypes(pf, **fields):
    """The plan file with its plan's state dtypes (and other fields) set, checked again."""
    from perfmodel.spec.plan.file import check

    return check(pf.model_copy(update={"plan": pf.plan.model_copy(update=fields)}))


def test_exports_write_the_dtypes_or_name_the_change():
    import json

    from perfmodel.export.checks.spread import maxtext_plan_file
    from perfmodel.export.nearest import export_plan, nearest
    from test_export import EXAMPLE, megatron_args, plan_file, titan_changed

    pf = plan_file(**EXAMPLE)  # llama-3-70b on 512 H100s, ZeRO-1
    bf16m = with_dtypes(pf, moment_dtype="bf16")
    args = megatron_args(export_plan(bf16m, "megatron", "core_r0.16"))
    assert [a for a in args if "dtype" in a or "precision-aware" in a] == [
        "--use-precision-aware-optimizer", "--main-params-dtype fp32", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"]
    runs, why = nearest(bf16m, "megatron", "core_r0.12")  # bf16 moments are core_r0.13+
    assert runs.plan.moment_dtype == "fp32" and why[0].startswith("moment_dtype bf16 -> fp32: core_r0.12's")
    runs, why = nearest(with_dtypes(pf, weight_dtype="bf16"), "megatron", "core_r0.16")  # no bf16-only master
    assert runs.plan.weight_dtype == "fp32" and why[0].startswith("weight_dtype bf16 -> fp32")

    both = with_dtypes(pf, weight_dtype="bf16", moment_dtype="bf16", grad_dtype="bf16", stack="deepspeed")
    cfg = json.loads(export_plan(both, "deepspeed", "0.19.8"))
    assert cfg["bf16"] == {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
    changed = [c.split(":")[0] for c in titan_changed(export_plan(both, "torchtitan", "0.2.2"))]
    assert {"grad_dtype bf16 -> fp32", "weight_dtype bf16 -> fp32", "moment_dtype bf16 -> fp32"} <= set(changed)

    tpu = maxtext_plan_file("v5p-fsdp-tp4")
    k = {ln.split(": ")[0]: ln.split(": ")[1] for ln in export_plan(tpu, "maxtext").splitlines()
         if ln and not ln.startswith("#")}
    assert (k["weight_dtype"], k["mu_dtype"]) == ('"float32"', '"float32"')
    k = {ln.split(": ")[0]: ln.split(": ")[1] for ln in export_plan(
        with_dtypes(tpu, weight_dtype="bf16", moment_dtype="bf16", grad_dtype="bf16"), "maxtext").splitlines()
         if ln and not ln.startswith("#")}
    assert (k["weight_dtype"], k["mu_dtype"]) == ('"bfloat16"', '"bfloat16"')
    runs, why = nearest(with_dtypes(tpu, moment_dtype="bf16"), "maxtext")  # nu follows weight_dtype (fp32)
    assert runs.plan.moment_dtype == "fp32" and any(w.startswith("moment_dtype bf16 -> fp32") for w in why)
