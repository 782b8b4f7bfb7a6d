"""Prediction intervals built from other groups' residuals, per stack and per regime (perfmodel.calibrate.runs.intervals),
and how an estimate quotes them (Interval.around, cost.estimate.report_plan). By hand; the development set's
held-out claim is in test_stacks.py (test_profile_intervals_are_the_benchmarks_residuals)."""

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.calibrate.runs import intervals as iv
from perfmodel.spec.stack.profile import Band, Interval, load_stack, regimes_of


def test_weighted_bounds_by_hand():
    e = np.array([-0.2, -0.1, 0.0, 0.1, 0.2])
    # equal weights: midpoints at 0.1, 0.3, 0.5, 0.7, 0.9 -> the 0.1 and 0.9 quantiles are the end residuals
    assert iv.weighted_bounds(e, np.ones(5), 0.1) == pytest.approx((-0.2, 0.2))
    # 0.2 lies between the first two midpoints: halfway from -0.2 to -0.1
    assert iv.weighted_bounds(e, np.ones(5), 0.2) == pytest.approx((-0.15, 0.15))
    # all above zero: the lower bound stays at the prediction (an interval holds its own centre)
    assert iv.weighted_bounds(e + 1, np.ones(5), 0.1) == pytest.approx((0.0, 1.2))
    # a group of 3 weighs as one run of a group of 1: [g, g, g, h] -> weights 1/3 x 3 and 1
    assert list(iv.group_weights(np.array(["g", "g", "g", "h"]))) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])


def frame():
    """Six groups of megatron-core runs (two pipelined, wider) and one group of torchtitan runs."""
    resid, groups, stacks, regimes = [], [], [], []
    for g, spread, pipelined in (("a", 0.05, False), ("b", 0.05, False), ("c", 0.3, True), ("d", 0.3, True),
                                 ("e", 0.05, False), ("f", 0.05, False)):
        for x in (-1, 0, 1):
            resid.append(spread * x)
            groups.append(g)
            stacks.append("megatron-core")
            regimes.append(("pp_or_cp",) if pipelined else ())
    resid += [0.1, 0.12]
    groups += ["t", "t"]
    stacks += ["torchtitan", "torchtitan"]
    regimes += [(), ()]
    return np.array(resid), np.array(groups), np.array(stacks), regimes


def test_build_takes_a_stacks_own_rows_from_three_groups_and_widens_by_regime():
    resid, groups, stacks, regimes = frame()
    bands = iv.build(resid, groups, stacks, regimes, 0.1, "test")
    mc, tt = bands["megatron-core"], bands["torchtitan"]
    # megatron-core: its own 18 rows (6 groups of 3 at weight 1/3: midpoints (i + 0.5) / 18); the 0.1 quantile lies
    # 0.3 of the way from the second run (-0.3, at 0.083) to the third (-0.05, at 0.139): -0.225
    assert (mc.low, mc.high) == pytest.approx((-0.225, 0.225), abs=1e-3)
    assert mc.rows == 18 and "over its own rows" in mc.source
    # torchtitan has one group: all 20 rows
    pooled = iv.weighted_bounds(resid, iv.group_weights(groups), 0.1)
    assert (tt.low, tt.high) == pytest.approx(pooled, abs=1e-3) and tt.rows == 20 and "all stacks rows" in tt.source
    # pp_or_cp: only two groups (c, d) -> no band of its own (MIN_GROUPS = 3)
    assert mc.regimes == {}
    regimes = [("pp_or_cp",) if g in "bcd" else () for g in groups]  # now three groups, c and d wide
    mc = iv.build(resid, groups, stacks, regimes, 0.1, "test")["megatron-core"]
    band = mc.regimes["pp_or_cp"]  # 9 runs, two of each tail at -0.3 / +0.3: the 0.1 quantile is -0.3
    assert (band.low, band.high, band.rows, band.groups) == (-0.3, 0.3, 9, 3)
    assert mc.around(("pp_or_cp",))[:2] == (-0.3, 0.3) and mc.around(())[:2] == (mc.low, mc.high)


def test_held_out_coverage_by_hand():
    resid, groups, stacks, regimes = frame()
    held = iv.held_out(resid, groups, stacks, regimes, 0.1)
    assert set(held) == {"a", "b", "c", "d", "e", "f", "t"}
    # a's runs (-0.05, 0, 0.05) against the other five groups' megatron-core bounds (-0.3 / +0.3): all in
    assert held["a"] == 1.0
    # c's +-0.3 runs against the bounds of a, b, d, e, f (one wide group of five: -0.05 / +0.05): its centre alone
    lo, hi, _ = iv.build(resid[groups != "c"], groups[groups != "c"], stacks[groups != "c"],
                         [r for r, g in zip(regimes, groups) if g != "c"], 0.1, "")["megatron-core"].around(())
    assert (lo, hi) == pytest.approx((-0.05, 0.05)) and held["c"] == pytest.approx(1 / 3)
    q, cover = iv.choose_level(resid, groups, stacks, regimes)
    assert q in iv.LEVELS and cover == pytest.approx(np.mean(list(iv.held_out(resid, groups, stacks, regimes,
                                                                                q).values())))


def test_an_estimate_in_a_regime_quotes_the_union_and_says_why():
    band = Interval(low=-0.05, high=0.1, rows=10, source="s",
                    regimes={"pp_or_cp": Band(low=-0.02, high=0.3, rows=5, groups=3),
                             "large": Band(low=-0.2, high=0.05, rows=5, groups=3)})
    assert band.around(()) == (-0.05, 0.1, [])
    assert band.around(("pp_or_cp",)) == (-0.05, 0.3, ["pp_or_cp"])
    assert band.around(("pp_or_cp", "large")) == (-0.2, 0.3, ["pp_or_cp", "large"])
    # regimes of plans: pp or cp > 1, fp8/fp4, more than 1024 devices
    plan = pm.Plan(gpus=2048, tp=8, pp=4, micro_batch=1, global_batch=512, seq_len=4096, precision="fp8")
    assert regimes_of(plan) == ("pp_or_cp", "low_precision", "large")
    assert regimes_of(pm.Plan(gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=4096)) == ()
    # the shipped megatron-core profile widens pipelined plans where the dev set's pipelined runs spread wider
    mc = load_stack("megatron-core").interval
    e = pm.estimate("llama-3-8b", "dgx-h100", pm.Plan(gpus=16, tp=2, pp=2, micro_batch=1, global_batch=64,
                                                      seq_len=4096))
    lo, hi, wider, far = mc.bounds(("pp_or_cp",), "hopper", "bf16", 16)
    assert wider and e.step_time_s_high == pytest.approx(e.step_time_s * (1 + hi))
    # megatron-core's own rows are all A100 runs: an H100 plan is an extrapolation, and says so
    assert far == ["generation"] and "wider each way for a hopper part, a generation none of its runs used (ampere)" \
        in e.interval_source
    assert e.step_time_s_low == pytest.approx(e.step_time_s * (1 + lo)) and "wider for pp > 1 or cp > 1 (49 runs)" in \
        e.interval_source
    # the table's headline shows the whole of it (it is cut at the source's first colon)
    from perfmodel.cli.report import _band

    assert "inside), wider for pp > 1 or cp > 1 (49 runs), " in _band(e) and _band(e).endswith("(ampere))")


def test_an_interval_widens_outside_its_runs_in_quadrature():
    """Interval.bounds: a plan on a generation, precision or scale none of the runs had widens both bounds by
    those ways' widths in quadrature; inside the domain it is `around` alone."""
    from perfmodel.spec.stack.profile import Domain

    band = Interval(low=-0.1, high=0.2, rows=10, source="t",
                    domain=Domain(generations=["ampere", "hopper"], precisions=["16-bit"], max_devices=1024),
                    extrapolation={"generation": 0.03, "precision": 0.04, "devices": 0.12})
    assert band.bounds((), "hopper", "bf16", 512) == (-0.1, 0.2, [], [])
    assert band.bounds((), "hopper", "fp16", 1024)[:2] == (-0.1, 0.2)  # fp16 and bf16 are one class
    low, high, _, far = band.bounds((), "blackwell", "fp8", 512)
    assert far == ["generation", "precision"] and (low, high) == pytest.approx((-0.15, 0.25))  # 0.05 = |(3, 4)|
    low, high, _, far = band.bounds((), "hopper", "bf16", 2048)
    assert far == ["devices"] and (low, high) == pytest.approx((-0.22, 0.32))
    assert Interval(low=-0.1, high=0.2, rows=1, source="t").bounds((), "x", "fp4", 10**6)[3] == []  # no domain


def test_extrapolation_widths_by_hand():
    """Two generations of one group each: every 'ampere' run is 0.1 off, every 'hopper' run inside the narrow
    interval the other builds. Held out, ampere needs 0.1 - the hopper interval's upper bound; hopper needs nothing:
    80% coverage over the two folds (weighted equally) needs ampere's whole need. Precision and devices have no
    fold (one value each): they take the widest measured width."""
    resid = np.array([0.1, 0.1, 0.1, 0.0, 0.01, -0.01])
    groups = np.array(["a", "a", "a", "h", "h", "h"])
    stacks = np.array(["megatron-core"] * 6)
    dims = [("ampere", "bf16", 8)] * 3 + [("hopper", "bf16", 8)] * 3
    w = iv.extrapolation_widths(resid, groups, stacks, [()] * 6, dims, 0.1)
    hopper_high = iv.weighted_bounds(resid[3:], np.ones(3), 0.1)[1]  # 0.01: the end residual
    assert w["generation"] == pytest.approx(round(0.1 - hopper_high, 3), abs=iv.WIDTH_STEP)
    assert w["precision"] == w["devices"] == w["generation"]
    bands = iv.build(resid, groups, stacks, [()] * 6, 0.1, "t", dims=dims, widths=w)
    d = bands["megatron-core"].domain
    assert (d.generations, d.precisions, d.max_devices) == (["ampere", "hopper"], ["16-bit"], 8)


def test_a_release_the_runs_never_ran_widens_the_interval():
    """Interval.outside's release way: a plan whose stack (a release pinned, name@version) none of the interval's
    runs ran widens both bounds by the release width; a domain that records no stacks tells nothing."""
    from perfmodel.spec.stack.profile import Domain

    d = Domain(generations=["hopper"], precisions=["16-bit"], max_devices=1024, stacks=["megatron-core"])
    band = Interval(low=-0.05, high=0.1, rows=10, source="t", domain=d,
                    extrapolation={"generation": 0.2, "precision": 0.1, "devices": 0.1, "release": 0.03})
    assert band.bounds((), "hopper", "bf16", 64, "megatron-core") == (-0.05, 0.1, [], [])
    low, high, _, far = band.bounds((), "hopper", "bf16", 64, "megatron-bridge@26.04")
    assert far == ["release"] and (low, high) == pytest.approx((-0.08, 0.13))
    # with a new precision too: the two widths in quadrature, sqrt(0.1^2 + 0.03^2)
    low, high, _, far = band.bounds((), "hopper", "fp8", 64, "megatron-bridge@26.04")
    assert far == ["precision", "release"] and high == pytest.approx(0.1 + (0.1 ** 2 + 0.03 ** 2) ** 0.5)
    old = band.model_copy(update={"domain": d.model_copy(update={"stacks": []})})
    assert old.bounds((), "hopper", "bf16", 64, "megatron-bridge@26.04")[3] == []
    # a way of width 0 widens nothing and goes untold (the runs held out that way were inside already)
    flat = band.model_copy(update={"extrapolation": {**band.extrapolation, "release": 0.0}})
    assert flat.bounds((), "hopper", "bf16", 64, "megatron-bridge@26.04") == (-0.05, 0.1, [], [])


def test_release_folds_hold_out_each_release():
    dims = [("hopper", "bf16", 8, "megatron-core"), ("hopper", "bf16", 8, "nemo"), ("hopper", "bf16", 8, "nemo"),
            ("hopper", "bf16", 8, "")]
    folds = iv.extrapolation_folds(dims)["release"]
    assert [list(m) for m in folds] == [[True, False, False, False], [False, True, True, False]]
    assert iv.domain_of(dims).stacks == ["megatron-core", "nemo"]  # the unnamed run names none


def test_an_estimate_on_an_unseen_release_says_so():
    """The shipped dense interval of megatron-core comes from Megatron-LM's own rows: a dense plan on a
    Megatron-Bridge release lies outside its runs' stacks and the interval says which and by how much."""
    from perfmodel.spec.plan.layout import Plan

    kw = dict(gpus=64, tp=4, pp=4, vpp=5, micro_batch=1, global_batch=128, seq_len=8192, sequence_parallel=True)
    a100 = pm.load_hardware("dgx-a100-80gb")  # the generation of megatron-core's own rows: only the release differs
    band = load_stack("megatron-core").interval
    assert "megatron-core" in band.domain.stacks and "megatron-bridge@26.04" not in band.domain.stacks
    e = pm.estimate("llama-3-70b", a100, Plan(**kw, stack="megatron-bridge@26.04"))
    assert "megatron-bridge@26.04, a stack or release none of its runs ran" in e.interval_source
    ref = pm.estimate("llama-3-70b", a100, Plan(**kw, stack="megatron-core"))
    assert "stack release" not in ref.interval_source
    w = band.extrapolation["release"]
    assert e.step_time_s_high / e.step_time_s - ref.step_time_s_high / ref.step_time_s == pytest.approx(w, abs=1e-9)
