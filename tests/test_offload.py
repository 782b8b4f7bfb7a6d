"""Offloaded activations (Plan.recompute_offloaded; JAX save_and_offload_only_these_names, MaxText's 'offload'
names): what the device and the host hold, what the copies cost and when they show, the verdict, the exports and
the refusals. Values worked out by hand for Llama 2 7B (hidden 4096, 32 layers, q = k = v = 4096 wide)."""

from __future__ import annotations

import pytest

from perfmodel import Plan, estimate
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import layer_activation_bytes, layer_offloaded_bytes
from perfmodel.cost.memory.offload import offload_comm, offload_seconds
from perfmodel.errors import InputError
from perfmodel.export.checks.spread import maxtext_plan_file
from perfmodel.export.maxtext.mesh import remat_keys
from perfmodel.export.nearest import export_plan
from perfmodel.export.targets import export, nearest_updates
from perfmodel.published.tpu_amd_runs import custom_remat
from perfmodel.spec.plan.layout import resolve

H, T, LAYERS = 4096, 4096, 32  # Llama 2 7B's hidden; one sequence of 4096 tokens; its layers
SAVED = ["qkv", "out_proj"]  # MaxText's save_dot_except_mlp


def plan(**kw) -> Plan:
    base = dict(gpus=8, micro_batch=1, global_batch=8, seq_len=T, zero=3, stack="maxtext", recompute="names",
                recompute_saved=SAVED)
    return Plan(**{**base, **kw})


def layer(llama2_7b, system, **kw):
    lay = Layouts.from_plan(resolve(plan(**kw), llama2_7b, system))
    return float(layer_activation_bytes(llama2_7b, lay)[0]), float(layer_offloaded_bytes(llama2_7b, lay)[0])


@pytest.mark.parametrize("off, host_per_token", [
    ([], 0),
    (["layer_input"], 2 * H),  # the layer input, bf16
    (["layer_input", "qkv"], 2 * H + 2 * 3 * H),  # + q, k, v
    (["layer_input", "qkv", "out_proj"], 2 * H + 2 * 3 * H + 2 * H),  # + out_proj's output: everything kept
])
def test_offloaded_tensors_leave_the_device_for_the_host(llama2_7b, dgx_h100, off, host_per_token):
    device, host = layer(llama2_7b, dgx_h100, recompute_offloaded=off)
    kept = T * (2 * H + 2 * 3 * H + 2 * H)  # save_dot_except_mlp keeps the input, q k v and out_proj's output
    assert host == T * host_per_token
    assert device == kept - host


def test_the_step_holds_every_waiting_layer_on_the_host_and_one_more_in_flight(llama2_7b, dgx_h100):
    off = ["layer_input", "qkv"]
    on_host = T * (2 * H + 6 * H)  # 128 MiB per layer
    kept, offl = (estimate(llama2_7b, dgx_h100, plan(recompute_offloaded=x)).memory_bytes for x in (None, off))
    assert offl.host == pytest.approx(LAYERS * on_host)  # one micro-batch in flight (pp = 1)
    # every layer's wait on the host; the layer whose backward runs holds its tensors again (its working set, 0.47
    # GiB + its gathered tensors 0.34), but its phase is not the peak: the head's is (its saved tensors 0.55 GiB + the
    # head gathered with the next tensor 0.33; cost.memory.peak), so the device holds all 32 layers' less
    assert kept.activations - offl.activations == pytest.approx(LAYERS * on_host)
    assert offl.transient - kept.transient == pytest.approx(on_host)  # the next layer's copy in flight
    assert kept.host == 0.0


def test_a_copy_takes_bytes_over_the_host_link_and_shows_past_the_layer_compute(llama2_7b, dgx_h100):
    link = dgx_h100.host.bandwidth_gbps * 1e9 * dgx_h100.host.efficiency  # 64 GB/s x 0.8 (PCIe Gen5 x16)
    assert link == pytest.approx(51.2e9)
    assert float(offload_seconds(dgx_h100, 51.2e9)) == pytest.approx(1.0)
    lay = Layouts.from_plan(resolve(plan(recompute_offloaded=["layer_input", "qkv"]), llama2_7b, dgx_h100))
    t = T * 8 * H / link  # 128 MiB: 2.62 ms each way
    c = offload_comm(llama2_7b, dgx_h100, lay, fwd=[1e-3], bwd=[5e-3])
    assert float(c.seconds[0]) == pytest.approx(t) and c.calls == 2
    assert float(c.fwd[0]) == pytest.approx(t - 1e-3)  # longer than the forward: the rest shows
    assert float(c.bwd[0]) == 0.0  # hidden behind the backward


def test_the_estimate_charges_the_exposed_copies_to_offload_comm(llama2_7b, tpu_v6e):
    e = estimate(llama2_7b, tpu_v6e, plan(gpus=8, micro_batch=4, global_batch=64,
                                      recompute_offloaded=["layer_input", "qkv", "out_proj"]))
    row = next(c for c in e.comms if c.name == "host offload copies")
    per_layer = 4 * T * (2 * H + 6 * H + 2 * H)  # 640 MiB per micro-batch of 4 sequences
    assert row.bytes == pytest.approx(per_layer)
    assert row.seconds_per_call == pytest.approx(per_layer / (32e9 * 0.8))  # estimate: 32 GB/s x 0.8
    assert row.calls == 2 * LAYERS * 2  # to the host and back, per layer, 2 micro-batches
    assert e.time_s.offload_comm == pytest.approx(row.exposed_s) and e.time_s.offload_comm > 0
    parts = e.time_s.model_dump()
    assert sum(v for k, v in parts.items() if k != "total") == pytest.approx(e.step_time_s)


def test_more_than_the_host_holds_does_not_fit(llama2_7b, dgx_h100):
    small = dgx_h100.model_copy(update={"host": dgx_h100.host.model_copy(update={"memory_gib": 1.0})})
    p = plan(recompute_offloaded=["layer_input", "qkv"])  # 4 GiB on the host
    assert estimate(llama2_7b, dgx_h100, p).memory_verdict == "fits"
    assert estimate(llama2_7b, small, p).memory_verdict == "does not fit"


def test_bad_offload_input(llama2_7b, dgx_h100, tpu_v5p, predict_cli):
    with pytest.raises(InputError, match=r"recompute_offloaded: 'mlp_in' is not kept under recompute_saved = "
                                         r"\['qkv', 'out_proj'\] .* valid: layer_input, qkv, out_proj, or add"):
        resolve(plan(recompute_offloaded=["mlp_in"]), llama2_7b, dgx_h100)
    with pytest.raises(InputError, match=r"with recompute = full: .* valid: recompute = names"):
        resolve(plan(recompute="full", recompute_saved=None, recompute_offloaded=["layer_input"]), llama2_7b,
                dgx_h100)
    no_host = tpu_v5p.model_copy(update={"host": None})  # a spec without the host block
    with pytest.raises(InputError, match="on tpu-v5p, whose spec gives no host link"):
        resolve(plan(recompute_offloaded=["layer_input"]), llama2_7b, no_host)
    args = ("--model", "llama-2-7b", "--hardware", "dgx-h100", "--gpus", 8, "--tp", 1, "--pp", 1, "--micro-batch", 1,
            "--global-batch", 8, "--seq-len", 4096, "--recompute", "names", "--recompute-saved", "qkv")
    ok = predict_cli(*args, "--recompute-offloaded", "qkv,layer_input")
    assert ok.returncode == 0 and "recompute=names[qkv] offloaded=layer_input,qkv" in ok.stdout, ok.stderr
    bad = predict_cli(*args, "--recompute-offloaded", "decoder_layer_input")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "'decoder_layer_input' is not a kept tensor; valid: names separated by commas, of layer_input, qkv, " \
           "kv, attention, out_proj, mlp_in" in bad.stderr


def test_maxtext_writes_offload_names_and_the_torch_targets_keep_them_on_the_device():
    named = remat_keys(plan(recompute_saved=["qkv"], recompute_offloaded=["qkv"]))
    assert named == {"remat_policy": "qkv_proj_offloaded"}
    assert remat_keys(plan(recompute_saved=["qkv", "out_proj", "mlp_in"],
                           recompute_offloaded=["qkv", "out_proj", "mlp_in"])) == {"remat_policy": "minimal_offloaded"}
    custom = remat_keys(plan(recompute_offloaded=["layer_input", "qkv"]))
    assert custom["remat_policy"] == "custom" and custom["decoder_layer_input"] == custom["query_proj"] == "offload"
    assert (custom["out_proj"], custom["context"]) == ("device", "remat")
    assert remat_keys(plan(recompute_offloaded=["qkv"]))["decoder_layer_input"] == "device"
    pf = maxtext_plan_file("v6e-names-custom")  # MaxText's own config check accepts it (test_framework_checks)
    text = export(pf, "maxtext")
    assert 'decoder_layer_input: "offload"' in text and 'mlpwi_0: "offload"' in text and 'context: "device"' in text
    up, why = nearest_updates(pf, "megatron", "core_r0.16.1")
    assert up["recompute_offloaded"] is None and any("no named tensors offloaded" in w for w in why)
    assert nearest_updates(pf, "torchtitan", "0.3.0")[0]["recompute_offloaded"] is None
    assert "offloaded ['layer_input', 'mlp_in']" in export_plan(pf, "deepspeed")  # nearest: the optimizer state too


def test_maxtext_custom_rows_read_as_names_with_offload():
    assert custom_remat("custom, decoder_layer_input/query/key/value/out_proj=offload") == (
        dict(recompute="names", recompute_saved=["qkv", "out_proj"],
             recompute_offloaded=["layer_input", "qkv", "out_proj"]),
        "remat custom as recompute names ['qkv', 'out_proj'], offloaded to the host ['layer_input', 'qkv', "
        "'out_proj']")
    fields, _ = custom_remat("custom, context=device, mlpwo=offload, mlpwi_0/mlpwi_1=offload")
    assert (fields["recompute_saved"], fields["recompute_offloaded"]) == (["attention", "mlp_in"], ["mlp_in"])
    assert custom_remat("custom, moe_mlpwi_0=offload")[0] is None


def test_search_prices_the_names_layouts_with_the_jobs_tensors(llama2_7b, tpu_v6e):
    """A search's names layouts keep and offload the job's tensors (Plan.recompute_saved, recompute_offloaded),
    each priced as predict prices its plan, and its best plan carries them."""
    from perfmodel.search.ranking import search
    from perfmodel.search.space import Space

    res = search(llama2_7b, tpu_v6e, 8, 64, T, space=Space(tp=[1], pp=[1], cp=[1], zero=[3], recompute=["names"]),
                 stack="maxtext", recompute_saved=SAVED, recompute_offloaded=["layer_input", "qkv"], loss_chunks=2)
    best = res.plan(0)
    assert (best.recompute_saved, best.recompute_offloaded, best.loss_chunks) == (SAVED, ["layer_input", "qkv"], 2)
    e = estimate(llama2_7b, tpu_v6e, best)
    assert res.table["step_time_s"].iloc[0] == pytest.approx(e.step_time_s)
    copies = next(c for c in e.comms if c.name == "host offload copies")
    assert copies.bytes == best.micro_batch * T * (2 * H + 6 * H)  # the layer input and q, k, v of each sequence


def test_the_host_check_reads_the_stage_that_offloads_most(dgx_h100):
    """Under 1F1B the first stage holds pp micro-batches in flight and the last one: its host memory decides."""
    from perfmodel import load_model

    e = estimate(load_model("llama-3-8b"), dgx_h100, plan(gpus=8, pp=4, micro_batch=1, global_batch=32,
                                                          recompute_offloaded=["layer_input", "qkv"]))
    hosts = [r.memory_bytes.host for r in e.memory_ranks]
    per_layer = T * (2 * H + 2 * (4096 + 2 * 1024))  # llama-3-8b: the input and q, k, v (8 kv heads of 128)
    assert hosts == pytest.approx([8 * 4 * per_layer, 8 * 3 * per_layer, 8 * 2 * per_layer, 8 * 1 * per_layer])
    small = dgx_h100.model_copy(update={"host": dgx_h100.host.model_copy(update={"memory_gib": hosts[1] / 2**30})})
    assert estimate(load_model("llama-3-8b"), small, e.plan).memory_verdict == "does not fit"


@pytest.mark.parametrize("name,gbps,gib", [
    ("tpu-v4", 16, 400e9 / 4 / 2**30),  # Austin et al. 2025: 16 GB/s each way; MLPerf v2.0: 400 GB per 4 chips
    ("tpu-v5e", 16, 192e9 / 4 / 2**30),  # ~1.5e10 B/s per v5 chip; ct5lp-hightpu-4t: 192 GB for 4
    ("tpu-v5p", 16, 448e9 / 4 / 2**30),  # ct5p-hightpu-4t: 448 GB for 4
    ("tpu-v6e", 32, 720e9 / 4 / 2**30),  # Trillium 32 GB/s; ct6e-standard-4t: 720 GB for 4
    ("tpu-v7", 16, 960e9 / 8 / 2**30),  # a chip's 32 GB/s and 960 GB per 4-chip VM over its 2 devices each
])
def test_every_tpu_system_has_its_host_link(name, gbps, gib):
    from perfmodel.spec.hardware.system import load_hardware

    host = load_hardware(name).host
    assert host is not None and host.bandwidth_gbps == gbps and host.memory_gib == pytest.approx(gib, abs=0.05)
