"""The host that launches the kernels (spec.host.cpu): the catalogue, what a system names, counts x per-call costs
(cost.host.launch_queue), the launch queue's longest path, and what bad host input says."""

import math
import sys
from pathlib import Path

import pytest
import yaml

from perfmodel.cost.host.launch_queue import call_seconds, queued, step_seconds
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import list_systems, load_hardware
from perfmodel.spec.host.cpu import CALL_KINDS, HostCPU, list_hosts, load_host

ROOT = Path(__file__).parents[1]


def test_the_catalogue_holds_what_its_script_derives():
    """hardware_specs/hosts/*.yaml are benchmarks/host_catalogue.py's output (edit the script, not the files): every
    per-call cost of every host, and the derivations by hand for two of them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import host_catalogue

    want = host_catalogue.hosts()
    assert set(want) == set(list_hosts())
    for name, h in want.items():
        have = load_host(name)
        for k in CALL_KINDS:
            assert have.calls.cost(k) == pytest.approx(h["calls"][f"{k}_s"], rel=1e-9), (name, k)
    spr = load_host("xeon-8480c").calls
    assert spr.eager_op_s == 6.8e-6 and spr.module_call_s == 13.5e-6  # dgxc-benchmarking, TE #2053
    # each lent host's slowness against the 8480C: the geometric mean of its two ratios on the shared probes; a kind
    # only they measured: the geometric mean over the three machines of each one's value over its slowness
    slow = [math.sqrt(e / 6.8 * lin / 13.5) for e, lin in ((16.07, 41.55), (10.77, 21.85), (15.31, 27.52))]
    node = (18.78 / slow[0] * 13.99 / slow[1] * 16.79 / slow[2]) ** (1 / 3)
    assert spr.autograd_node_s == pytest.approx(node * 1e-6, rel=1e-9)
    assert spr.kernel_launch_s == pytest.approx(3.0 / (13.0 / 6.8) * 1e-6, rel=1e-9)  # tritonbench on Grace, carried
    # the DGX A100's host: the DGX H100's x 1.46 (Megatron-LM's CI), an upper bound
    a100 = load_host("epyc-7742").calls
    assert all(a100.cost(k) == pytest.approx(1.46 * spr.cost(k), rel=1e-9) for k in CALL_KINDS)


def test_every_gpu_system_names_a_host_whose_every_cost_is_cited():
    for name in list_systems():
        s = load_hardware(name)
        assert s.host_cpu is not None, name
        assert "host_cpu" in s.sources, name
        for k in CALL_KINDS:
            assert s.host_cpu.calls.cost(k) > 0 and s.host_cpu.sources[f"calls.{k}_s"], (name, k)
    assert load_hardware("dgx-a100-80gb").host_cpu.name == "epyc-7742"
    assert load_hardware("dgx-b200").host_cpu.cpu == "Intel Xeon Platinum 8570"
    assert load_hardware("gb200-nvl72").host_cpu.name == "grace"


def test_hardware_show_prints_the_host_and_each_costs_source(capsys):
    from perfmodel.cli.main import main

    assert main(["hardware", "show", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert "host xeon-8480c: 2x Intel Xeon Platinum 8480C, 56 cores each" in out
    assert "eager_op          6.80  measured: NVIDIA/dgxc-benchmarking" in out
    assert main(["hardware", "hosts"]) == 0
    assert "cloud-vm-spr16" in capsys.readouterr().out


def test_a_host_without_a_source_per_cost_is_refused():
    data = yaml.safe_load((ROOT / "hardware_specs" / "hosts" / "xeon-8480c.yaml").read_text())
    del data["sources"]["calls.view_op_s"]
    with pytest.raises(InputError, match="sources lacks calls.view_op_s"):
        HostCPU.parse(data, where="x")


def test_an_unknown_host_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    from perfmodel.cli.main import main

    out = tmp_path / "plan.json"
    assert main(["predict", "--host", "xeon-9999", "--save-plan", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --host xeon-9999: unknown host 'xeon-9999'; did you mean:") and "\n" not in err
    assert not out.exists()
    bad = tmp_path / "system.yaml"
    spec = yaml.safe_load((ROOT / "hardware_specs" / "systems" / "dgx-h100.yaml").read_text())
    bad.write_text(yaml.safe_dump({**spec, "host_cpu": "nope"}))
    with pytest.raises(InputError, match=r"system.yaml: host_cpu: unknown host 'nope'"):
        load_hardware(str(bad))


def test_call_seconds_is_counts_times_costs_by_hand():
    h = load_host("xeon-8480c").calls
    got = call_seconds({"eager_op": 3, "module_call": 2, "autograd_node": 0.5}, h)
    assert got == pytest.approx(3 * 6.8e-6 + 2 * 13.5e-6 + 0.5 * h.autograd_node_s, rel=1e-12)
    assert call_seconds({}, h) == 0.0


def test_the_launch_queue_takes_the_longest_path_by_hand():
    """One stretch of a single stream: the device alone, the host alone, or the host up to a launch and the device
    from there (max-plus). Forward host-heavy (H_f 4 > D_f 3), backward device-heavy (D_b 5 > H_b 2)."""
    h_f, d_f, h_b, d_b = 4.0, 3.0, 2.0, 5.0
    # one micro-batch: max(D 8, H 6, H_f + D_b 9) + tail 0.5 = 9.5
    assert step_seconds(8.0, 8.0, 0.5, 6.0, 1.0, False, False, (h_f, d_f, h_b, d_b)) == 9.5
    # three: max(24, 18, 4 + (24 - 3) = 25, (18 - 2) + 5 = 21) + 0.5
    assert step_seconds(24.0, 24.0, 0.5, 18.0, 1.0, False, False, (h_f, d_f, h_b, d_b)) == 25.5
    # a sync before the update: the backward drains, then the host's 1 s loop, then the device's 0.5 s
    assert step_seconds(8.0, 8.0, 0.5, 6.0, 1.0, False, False, (h_f, d_f, h_b, d_b), True) == 9.0 + 1.0 + 0.5
    # a pipeline chunk after a synchronisation: the device waits the schedule's and the first operator's calls
    assert queued(3.0, 5.0, 2.0, 2.0, True, False, 0.5, 0.25)[()] == pytest.approx(3.5 + 5.25)
    assert queued(3.0, 5.0, 4.0, 2.0, True, False, 0.5, 0.25)[()] == pytest.approx(4.0 + 5.25)


def test_the_host_prices_a_small_step_as_host_bound_on_a_slow_host_not_on_a_fast_one():
    """The same stack's calls on two hosts: GPT-2 124M at micro-batch 1 under nanoGPT's eager loop on one A100
    waits on its host where the host is a slow cloud VM; the host's seconds scale with its per-call costs."""
    from perfmodel.cost.estimate import evaluate_plan

    plan = dict(gpus=1, micro_batch=1, global_batch=1, seq_len=1024, stack="nanogpt")
    a100 = load_hardware("dgx-a100-80gb")
    vm = a100.with_host("cloud-vm-spr16")
    fast, slow = (evaluate_plan("gpt2-124m", s, plan)[1] for s in (a100, vm))
    assert slow.host_s > 1.5 * fast.host_s and slow.host_bound
    assert slow.host.host.startswith("cloud-vm-spr16") and fast.host.host.startswith("epyc-7742")
    # counts x costs: a host twice as slow on every kind takes twice the seconds, and the device waits on it
    h = a100.host_cpu
    twice = a100.with_host(h.model_copy(update={"calls": h.calls.scaled(2.0)}))
    doubled = evaluate_plan("gpt2-124m", twice, plan)[1]
    assert doubled.host_s == pytest.approx(2 * fast.host_s, rel=1e-9)
    assert doubled.host.layer_forward_s == pytest.approx(2 * fast.host.layer_forward_s, rel=1e-9)


def test_no_stack_profile_carries_host_seconds():
    """A stack says what its code calls (counts by kind); only a host says what a call costs."""
    from perfmodel.spec.stack.profile import STACKS, HostProfile, PassCalls, Stack, load_stack

    assert not any(name.endswith("_s") for name in HostProfile.model_fields)
    assert "step_overhead_s" not in Stack.model_fields
    for name in STACKS:
        h = load_stack(name).host
        if h is None:
            continue
        for p in (*h.ops.values(), h.layer, h.model):
            assert isinstance(p, PassCalls)
            assert set(p.forward) | set(p.backward) <= set(CALL_KINDS), name


def test_a_measured_host_cites_the_command_and_fills_what_it_could_not_probe():
    """calibrate.host.measured: every probed kind cites the command; a fused module without Transformer
    Engine is the host's nn.Linear call x TE #2053's ratio, and a kind the run could not probe is the DGX H100 host's
    at this host's eager-op ratio, and says so."""
    from perfmodel.calibrate.host.measured import TE_OVER_LINEAR, measured_host

    kinds = [k for k in CALL_KINDS if k not in ("fused_module", "zero3_hook")]
    result = {"calls_s": {k: (i + 1) * 1e-6 for i, k in enumerate(kinds)}, "failed": {"zero3_hook": "no NCCL"},
              "host": {"cpu": "Test CPU"}, "date": "2026-11-27"}
    h = measured_host(result, "mine", "perfmodel calibrate --device cuda --host-only --output x.yaml")
    assert h.calls.fused_module_s == pytest.approx(h.calls.module_call_s * TE_OVER_LINEAR)
    # eager_op measured at 1 us against the DGX H100 host's 6.8: that host's zero3 hook (460 us) x 1/6.8
    ratio = h.calls.eager_op_s / load_host("xeon-8480c").calls.eager_op_s
    assert ratio == pytest.approx(1 / 6.8)
    assert h.calls.zero3_hook_s == pytest.approx(load_host("xeon-8480c").calls.zero3_hook_s / 6.8)
    assert "no NCCL" in h.sources["calls.zero3_hook_s"] and "x 0.15" in h.sources["calls.zero3_hook_s"]
    assert "--host-only" in h.sources["calls.eager_op_s"] and h.speed == pytest.approx(6.8e-6 / 1e-6)


def test_host_only_calibration_needs_cuda(tmp_path, capsys):
    from perfmodel.cli.main import main

    assert main(["calibrate", "--device", "cpu", "--host-only", "--output", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --host-only measures a GPU's host; device = 'cpu'; valid: --device cuda")
    assert not list(tmp_path.iterdir())


def test_the_in_context_factors_are_the_twins_fit():
    """cost.host.launch_queue.IN_CONTEXT is what benchmarks/host_twins.py fits on the committed twin measurements:
    per pass, the geometric mean over the five twins of measured / priced host seconds."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import host_twins

    from perfmodel.cost.host.launch_queue import IN_CONTEXT

    fitted = host_twins.fit(host_twins.ratios())
    assert IN_CONTEXT == pytest.approx(fitted, abs=0.006)
    assert IN_CONTEXT["forward"] > IN_CONTEXT["backward"] > 1  # the model code's Python over the engine's


def test_a_pipeline_that_syncs_before_the_update_adds_the_update_after_its_flush():
    """step_seconds by hand, pipelined: the last backward's receive, then max(tail, host tail); after a sync before
    the update (sync_before_optimizer) the host's update loop and the device's update follow one another."""
    assert step_seconds(10.0, 8.0, 2.0, 5.0, 3.0, True, False, None, False)[()] == 10.0 + 3.0
    assert step_seconds(10.0, 8.0, 2.0, 5.0, 3.0, True, False, None, True)[()] == 10.0 + 2.0 + 3.0


def test_synchronisations_by_hand():
    """cost.host.launch_queue.synchronisations: v chunk steps per direction where pp > 1, each exposing ramp_f / ramp_b;
    a syncing MoE dispatch exposes moe_sync_s per MoE layer in the forward; the schedule's own calls per step."""
    import numpy as np

    from perfmodel.cost.host.launch_queue import HostRates, synchronisations

    r = HostRates(moe_sync_s=1e-5, ramp_f=2e-5, ramp_b=3e-5, pipeline_step_s=4e-6)
    synced, ramp_f, ramp_b, calls = synchronisations(r, np.array([1, 2]), np.array([1, 2]), np.array([4.0, 4.0]))
    assert synced.tolist() == [True, True]
    assert ramp_f == pytest.approx([4 * 1e-5, 2 * 2e-5 + 4 * 1e-5])
    assert ramp_b == pytest.approx([0.0, 2 * 3e-5]) and calls == pytest.approx([0.0, 2 * 4e-6])
    quiet = HostRates(ramp_f=2e-5, ramp_b=3e-5)  # a dispatch that does not sync
    synced, ramp_f, _, _ = synchronisations(quiet, np.array([1, 2]), np.array([1, 1]), np.array([4.0, 4.0]))
    assert synced.tolist() == [False, True] and ramp_f == pytest.approx([0.0, 2e-5])


def test_megatrons_alltoall_dispatch_syncs_on_the_host_its_allgather_does_not():
    """Megatron-Core's alltoall token dispatcher copies the per-expert counts to the host in each MoE layer's
    forward (moe_sync_dispatchers): the calls after it are priced; the allgather dispatcher makes no such sync."""
    from perfmodel.cost.host.launch_queue import IN_CONTEXT, call_seconds, host_rates, in_context
    from perfmodel.cost.layouts import Layouts
    from perfmodel.spec.model.catalogue import load_model
    from perfmodel.spec.plan.layout import Plan
    from perfmodel.spec.stack.profile import load_stack

    model, system, stack = load_model("mixtral-8x7b"), load_hardware("dgx-h100"), load_stack("megatron-core")
    rates = {}
    for d in ("alltoall", "allgather"):
        plan = Plan(gpus=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=8, seq_len=4096, stack="megatron-core",
                    moe_dispatcher=d)
        rates[d] = host_rates(system, stack, Layouts.from_plan(plan), model)
    want = call_seconds(stack.host.moe_sync, in_context(system.host_cpu.calls, IN_CONTEXT["forward"]))
    assert want > 0 and rates["alltoall"].moe_sync_s == pytest.approx(want) and rates["allgather"].moe_sync_s == 0.0


def test_block_recompute_launches_the_recomputed_share_of_the_layers_again():
    """Megatron's block method recomputes recompute_num_layers of each chunk's layers: the backward's host seconds
    carry that share of a layer's forward calls (here 6 of 12: half), full uniform recompute all of it."""
    from perfmodel.cost.estimate import evaluate_plan

    base = dict(gpus=1, micro_batch=1, global_batch=1, seq_len=1024, stack="megatron-core")
    b = {name: evaluate_plan("gpt2-124m", "dgx-h100", {**base, **extra})[1].host for name, extra in (
        ("none", {}), ("full", {"recompute": "full"}),
        ("block", {"recompute": "full", "recompute_method": "block", "recompute_num_layers": 6}))}
    forward = b["none"].layer_forward_s
    assert b["full"].layer_backward_s == pytest.approx(b["none"].layer_backward_s + forward, rel=1e-9)
    assert b["block"].layer_backward_s == pytest.approx(b["none"].layer_backward_s + 0.5 * forward, rel=1e-9)


def test_a_cpu_spec_reports_its_host_as_the_ranks_own():
    """A CPU spec's measured per-launch costs: the host summary counts a layer's launches and says they add to
    the step (the device is the host)."""
    from perfmodel.cli.report import host_lines
    from perfmodel.cost.estimate import evaluate_plan

    spec = ROOT / "benchmarks" / "results" / "validation" / "cpu-vm" / "calibrated.yaml"
    step, e = evaluate_plan("gpt2-124m", str(spec), dict(gpus=2, micro_batch=1, global_batch=2, seq_len=128,
                                                         stack="plain-torch"))
    assert e.host.serial and e.host.layer_forward_s == pytest.approx(
        e.host.layer_forward_calls["kernel_launch"] * step.host_rates.kernel_s)
    assert "its launches add to the step" in host_lines(e)[0]
