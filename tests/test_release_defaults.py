"""What a release's performance scripts set for every model (spec.stack.release.Defaults): the gradient dtype and a
dense model's TP overlap, filled where a plan (or a search job) leaves them unset, as read from Megatron-Bridge and
NeMo 2 at their tags (benchmarks/results/stacks/dense_release_defaults.md)."""

import pytest

import perfmodel as pm
from perfmodel.search.space import Job, with_release
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.spec.stack.release import load_line, pinned, release_defaults

LLAMA = dict(gpus=64, tp=4, pp=4, vpp=5, micro_batch=1, global_batch=128, seq_len=8192, sequence_parallel=True)


def dense(stack, precision="bf16", system="dgx-h100", **kw):
    return resolve(Plan(**LLAMA, stack=stack, precision=precision, **kw), load_model("llama-3-70b"),
                   load_hardware(system))


@pytest.mark.parametrize("stack,precision,system,grad,overlap", [
    ("megatron-core", "bf16", "dgx-h100", "fp32", False),  # the profile: Megatron-LM's own flags
    ("megatron-bridge@25.09", "bf16", "dgx-h100", "bf16", True),
    ("megatron-bridge@26.04.01", "fp8", "dgx-h100", "bf16", True),  # a patch release takes its release's defaults
    ("megatron-bridge@26.08", "fp4", "dgx-b200", "bf16", False),  # TP overlap off at NVFP4 (perf_recipes b200 L342)
    ("nemo2@25.02", "bf16", "dgx-h100", "fp32", True),  # bf16 reduction only on the fp8 path before 2.4.0
    ("nemo2@25.04", "fp8", "dgx-h100", "bf16", True),
    ("nemo2@25.07", "bf16", "dgx-h100", "bf16", True)])
def test_a_release_sets_a_dense_models_gradients_and_tp_overlap(stack, precision, system, grad, overlap):
    p = dense(stack, precision, system)
    assert (p.grad_dtype, p.tp_comm_overlap) == (grad, overlap)


def test_the_users_fields_win_and_a_moe_model_keeps_the_profiles_tp_overlap():
    p = dense("megatron-bridge@26.04", tp_comm_overlap=False, grad_dtype="fp32")
    assert (p.grad_dtype, p.tp_comm_overlap) == ("fp32", False)
    moe = resolve(Plan(gpus=8, tp=2, ep=4, micro_batch=1, global_batch=64, seq_len=4096, sequence_parallel=True,
                       stack="megatron-bridge@26.04"), load_model("qwen3-30b-a3b"), load_hardware("dgx-h100"))
    assert (moe.grad_dtype, moe.tp_comm_overlap) == ("bf16", False)
    assert release_defaults("megatron-core", False, "bf16") == {}


def test_the_release_prices_as_the_same_fields_given_by_hand():
    """The defaults are plan fields, nothing else: megatron-bridge@26.04 prices a dense plan exactly as
    megatron-core with bf16 gradients and TP overlap given, and faster than megatron-core without them."""
    h100 = load_hardware("dgx-h100")
    kw = dict(LLAMA, precision="bf16")
    bridge = pm.estimate("llama-3-70b", h100, Plan(**kw, stack="megatron-bridge@26.04"))
    by_hand = pm.estimate("llama-3-70b", h100, Plan(**kw, stack="megatron-core", grad_dtype="bf16",
                                                      tp_comm_overlap=True))
    plain = pm.estimate("llama-3-70b", h100, Plan(**kw, stack="megatron-core"))
    assert bridge.step_time_s == pytest.approx(by_hand.step_time_s, rel=1e-12)
    assert bridge.step_time_s < plain.step_time_s
    assert bridge.time_s.tp_comm < plain.time_s.tp_comm  # the overlapped all-gathers / reduce-scatters


def test_a_search_job_takes_the_same_defaults():
    job, _ = with_release(Job(gpus=64, global_batch=128, seq_len=8192,
                              stack="megatron-bridge@26.08"), load_model("llama-3-70b"), load_hardware("dgx-h100"))
    assert (job.grad_dtype, job.tp_comm_overlap) == ("bf16", True)


def test_every_release_cites_its_defaults_and_pinned_names_the_newest():
    for name in ("megatron-bridge", "nemo2"):
        for r in load_line(name).releases:
            assert r.defaults is not None and r.defaults.source, f"{name}@{r.version}"
    assert pinned("nemo2") == "nemo2@25.07" and pinned("megatron-bridge@26.04") == "megatron-bridge@26.04"
    assert pinned("megatron-core") == "megatron-core"
