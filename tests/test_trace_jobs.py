"""`calibrate --from-trace` on traces as users have them: recorded without shapes (torch.profiler's default),
in fp32, on a GPU the catalogue lacks. The GEMM kernels found by name agree with an independent sum over the trace's
raw events, the job's efficiency with FLOPs counted by hand, the calibrated spec reproduces the traced GEMM seconds,
and what a trace lacks is named in one line (exit 2)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from perfmodel.calibrate.trace.from_trace import calibrate_from_trace
from perfmodel.calibrate.trace.gemm import kernel_dtype, plan_gemm_work, traced_gemm
from perfmodel.calibrate.trace.job import JobSource
from perfmodel.calibrate.trace.reader import load_traces
from perfmodel.cli.main import main

HERE = Path(__file__).parent
F = HERE / "fixtures" / "traces"
ROOT = HERE.parent / "benchmarks" / "results"
H200 = ROOT / "traces" / "gpu-single-h200" / "gpt2-355m-mb8" / "rank-0.pt.trace.json.gz"
PLAN = ROOT / "validation" / "gpu-single-h200-traced" / "plans" / "gpt2-355m-mb8.json"
H200_PEAK = 989.4e12  # hardware_specs/accelerators/h200-sxm-141gb.yaml, dense bf16
SHAPE_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def raw(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def write_trace(data: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path


@pytest.fixture(scope="module")
def no_shapes(tmp_path_factory) -> Path:
    """The lent H200's GPT-2 355M trace as record_shapes=False would have written it: no input shapes or types."""
    data = raw(H200)
    for e in data["traceEvents"]:
        for k in SHAPE_KEYS:
            (e.get("args") or {}).pop(k, None)
    return write_trace(data, tmp_path_factory.mktemp("noshape") / "rank-0.json.gz")


# an independent reading of the raw events: a GEMM kernel by name words, launched (its runtime call's start) inside
# a ProfilerStep, by an operator that is not a convolution (cuDNN runs convolutions as sgemm kernels too)
GEMM_WORDS = re.compile(r"gemm|gemv|nvjet|cijk_|cublas|^bmm_", re.I)
NOT_GEMM = re.compile(r"nccl|flash|fmha|attention|convolution|implicit_gemm|fprop|dgrad|wgrad", re.I)


def independent_gemm_seconds(path: Path) -> float:
    ev = [e for e in raw(path)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: (e["ts"], e.get("tid")) for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e["name"]}
    ops: dict = {}  # thread -> its operators' names, starts, ends and durations, in the trace's order
    for e in ev:
        if e.get("cat") == "cpu_op":
            ops.setdefault(e.get("tid"), []).append((e["name"], e["ts"], e["ts"] + e["dur"], e["dur"]))
    ops = {tid: ([o[0] for o in rows], *(np.array([o[i] for o in rows]) for i in (1, 2, 3)))
           for tid, rows in ops.items()}
    total = 0.0
    for k in ev:
        if k.get("cat") != "kernel" or not GEMM_WORDS.search(k["name"]) or NOT_GEMM.search(k["name"]):
            continue
        at, tid = launch[k["args"]["correlation"]]
        if not any(a <= at < b for a, b in steps):
            continue
        # the owner: the shortest operator of the launching thread running at the launch (the first of equals)
        names, t0, t1, dur = ops.get(tid, ([], np.empty(0), np.empty(0), np.empty(0)))
        running = np.flatnonzero((t0 <= at) & (at < t1))
        owner = names[running[np.argmin(dur[running])]] if running.size else None
        if owner is None or "conv" not in owner:
            total += k["dur"]
    return total * 1e-6 / len(steps)


@pytest.mark.parametrize("name", ["v100", "h200"])
def test_gemm_seconds_by_kernel_name_equal_an_independent_sum(name, no_shapes):
    """The V100's fp32 DDP trace (its cuDNN convolutions' volta_sgemm kernels left out) and the H200's bf16 nvjet and
    CUTLASS kernels: GEMM seconds per step as calibrate.trace.gemm finds them = the raw events' own sum."""
    path = F / "hta" / "v100_rank-0.json.gz" if name == "v100" else no_shapes
    per_rank, _ = traced_gemm(load_traces([path]), dense=True, precision="bf16")
    found = per_rank[0]
    assert set(found) == ({"fp32"} if name == "v100" else {"bf16"})  # sgemm / splitK; bf16 tags, nvjet untagged
    assert sum(found.values()) == pytest.approx(independent_gemm_seconds(path), rel=1e-9)


def test_job_efficiency_without_shapes_is_the_plans_flops_over_seconds_at_peak(no_shapes):
    """GPT-2 355M, micro-batch 8 x 1024 tokens, no recompute: 6 x 8192 tokens x (24 layers x 1024 x (3072 + 1024 + 4096
    + 4096) + 1024 x 50257 head) weights = 17.37 TFLOP per step, also the sum of 2 m n k over the original trace's
    mm / addmm operators; efficiency = that / (GEMM seconds x 989.4 TF/s); the calibrated spec's estimate of the
    plan's GEMMs takes the traced seconds."""
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.spec.plan.file import load_plan_file

    by_hand = 6 * 8192 * (24 * 1024 * (3072 + 1024 + 4096 + 4096) + 1024 * 50257)
    ev = [e for e in raw(H200)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]
    mms = [e for e in ev if e.get("name") in ("aten::mm", "aten::addmm") and any(a <= e["ts"] < b for a, b in steps)]
    shaped = 0.0
    tid, t0, t1 = (np.array(v) for v in zip(*[(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in mms]))
    for i, e in enumerate(mms):  # the innermost: an addmm that dispatched to an mm holds it
        inner = (tid == e["tid"]) & (t0[i] <= t0) & (t1 <= t1[i])
        inner[i] = False  # another operator than itself
        if not inner.any():
            (m, k), (_, n) = [d for d in e["args"]["Input Dims"] if len(d) == 2][-2:]  # addmm: bias, x, W^T
            shaped += 2.0 * m * n * k
    assert shaped / len(steps) == pytest.approx(by_hand, rel=1e-12)

    system, summary, _ = calibrate_from_trace([no_shapes], job=JobSource(plan_path=PLAN), strict=False)
    job = summary.job_gemm
    seconds = independent_gemm_seconds(no_shapes)
    assert job.flops == pytest.approx(by_hand, rel=1e-12) and job.seconds["bf16"] == pytest.approx(seconds, rel=1e-9)
    assert job.efficiency == pytest.approx(by_hand / (seconds * H200_PEAK), rel=1e-9)
    assert 0.3 < job.efficiency < 0.6  # 43%: the LM head's 50257 runs alignment-1 kernels
    pf = load_plan_file(PLAN)
    est = evaluate_plan(pf.model, system, pf.plan)[1]
    assert est.time_s.gemm == pytest.approx(seconds, rel=1e-4) == job.estimate_s
    assert system.efficiency.matmul_max["bf16"] == pytest.approx(0.7988, abs=2e-3)
    assert "fitted to the traced job" in system.efficiency.sources["matmul_max"]
    assert any(m.what == "GEMM tile and rate by shape" for m in summary.not_calibrated)
    # the memory-bound kernels (the fused AdamW's left out) against the plan's memory-bound operators, likewise
    assert est.time_s.memory_bound == pytest.approx(job.memory_s, rel=1e-3)  # memory_bandwidth kept to 4 digits
    assert "fitted to the traced job" in system.efficiency.sources["memory_bandwidth"]
    assert not any(m.what == "memory-bound bandwidth" for m in summary.not_calibrated)


def test_with_shapes_the_job_check_agrees_with_the_shape_fit():
    """The same trace with its shapes: matmul_max and the tile come from the GEMMs at their shapes, and that spec
    prices the plan's GEMMs within 5% of the seconds the kernels took (the job's own check)."""
    system, summary, _ = calibrate_from_trace([H200.parent], job=JobSource(plan_path=PLAN), strict=False)
    job = summary.job_gemm
    assert "fitted to the traced job" not in system.efficiency.sources["matmul_max"]
    assert job.estimate_s == pytest.approx(sum(job.seconds.values()), rel=0.05)


def test_a_framework_config_gives_the_same_job(no_shapes, tmp_path, capsys):
    """--config: a Megatron-LM launch script of the traced job (GPT-2 355M: 24 layers of 1024, 16 heads, sequence
    1024, micro-batch 8, vocabulary 50257), the device count from the trace's one rank: the plan file's FLOPs but for
    Megatron's padded vocabulary, and a spec that prices that plan's GEMMs at the traced seconds."""
    script = tmp_path / "pretrain_gpt.sh"
    script.write_text("torchrun pretrain_gpt.py --num-layers 24 --hidden-size 1024 --num-attention-heads 16 "
                      "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 8 --global-batch-size 8 "
                      "--bf16 --vocab-size 50257 --make-vocab-size-divisible-by 1\n")
    system, summary, _ = calibrate_from_trace([no_shapes], strict=False, job=JobSource(
        config=[script], framework="megatron"))
    plan_system, plan_summary, _ = calibrate_from_trace([no_shapes], job=JobSource(plan_path=PLAN), strict=False)
    # the megatron stack pads the vocabulary to a multiple of 128 (50304: 47 rows more in the head's 3 GEMMs)
    assert summary.job_gemm.flops - plan_summary.job_gemm.flops == pytest.approx(6 * 8192 * 1024 * 47, rel=1e-9)
    # whichever plan names the job, the spec prices its GEMMs at the traced seconds; Megatron's padded head runs
    # aligned kernels where the traced one ran alignment-1 ones, so its matmul_max carries the head's slowness
    assert summary.job_gemm.estimate_s == pytest.approx(sum(summary.job_gemm.seconds.values()), rel=1e-3)  # 4 digits
    assert system.efficiency.matmul_max["bf16"] < plan_system.efficiency.matmul_max["bf16"]
    out = tmp_path / "spec.yaml"
    assert main(["calibrate", "--from-trace", str(no_shapes), "--config", str(script), "--from", "megatron",
                 "--output", str(out)]) == 0 and out.exists()
    assert "job GEMMs (--config pretrain_gpt.sh)" in capsys.readouterr().out
    # the job on 2 devices (a batch of 16) is not the one traced on 1: refused in one line
    script.write_text(script.read_text().replace("--global-batch-size 8", "--global-batch-size 16"))
    assert main(["calibrate", "--from-trace", str(no_shapes), "--config", str(script), "--from", "megatron",
                 "--gpus", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "gpus = 2" in err and "1 ranks" in err


def test_without_shapes_or_plan_it_names_the_one_thing_it_lacks(tmp_path, capsys):
    """AlexNet on an A100 (no shapes, no collective, no device copy) and the V100 DDP trace (a GPU the catalogue
    lacks): asked for a spec, one line naming the flags that would give it, exit 2; asked for the summary, the same
    reason heads not_calibrated. The A100 all-reduce trace without shapes still writes a spec of what it measured."""
    valid = ("valid: --plan PLAN.json or --config FILE --from FRAMEWORK of the job it traced, or a trace recorded "
             "with record_shapes=True")
    for trace, words in (("a100_alexnet.json.gz", "hold no GEMM with recorded shapes"),
                         ("v100_rank-0.json.gz", "no catalogue system has the GPU 'Tesla V100-SXM2-32GB'")):
        path = str(F / "hta" / trace)
        assert main(["calibrate", "--from-trace", path, "--output", str(tmp_path / "s.yaml")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err and "--plan PLAN.json or --config FILE --from FRAMEWORK" in err
        assert not (tmp_path / "s.yaml").exists()
        assert main(["calibrate", "--from-trace", path, "--format", "json"]) == 0
        first = json.loads(capsys.readouterr().out)["not_calibrated"][0]
        assert first["what"] == "a calibrated spec" and words in first["why"]
    assert valid in calibrate_from_trace([F / "hta" / "a100_alexnet.json.gz"], require=False)[1].not_calibrated[0].why
    system, summary, _ = calibrate_from_trace([F / "hta" / "nccl_data.json.gz"])
    assert system.name == "dgx-a100-40gb-trace" and system.tiers[0].sources["latency_us"].startswith("per-step")
    gemm = next(m for m in summary.not_calibrated if m.what == "GEMM rates")
    assert valid in gemm.why


def test_device_copies_measure_the_memory_bandwidth_without_shapes():
    """nccl_data's A100 (no shapes): memory_bandwidth = the median of its device-to-device copies' rates (2 x bytes
    over seconds, Kineto's own bytes) over the A100 40GB's 1555 GB/s, counted here from the raw events."""
    import numpy as np

    path = F / "hta" / "nccl_data.json.gz"
    ev = [e for e in raw(path)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}
    rates = [2 * e["args"]["bytes"] / (e["dur"] * 1e-6) for e in ev if e.get("cat") == "gpu_memcpy"
             and "DtoD" in e["name"] and e["args"]["bytes"] >= 1 << 20
             and any(a <= launch.get(e["args"]["correlation"], e["ts"]) < b for a, b in steps)]
    system, _, _ = calibrate_from_trace([path])
    assert system.efficiency.memory_bandwidth == pytest.approx(float(np.median(rates)) / 1.555e12, rel=1e-3)


def test_a_gpu_the_catalogue_lacks_is_calibrated_as_its_trace_measured_it(tmp_path):
    """The H200 trace as if from an H800 (in no catalogue system): the base is built from its deviceProperties (132
    SMs, its memory), bf16 peak = the best rate a GEMM reached at its recorded shape, bandwidth = the best streaming
    one; without shapes, the plan gives the rate but nothing the bandwidth: refused, naming --hardware SPEC.yaml."""
    data = raw(H200)
    data["deviceProperties"][0]["name"] = "NVIDIA H800"
    path = write_trace(data, tmp_path / "h800.json.gz")
    system, summary, fit = calibrate_from_trace([path], strict=False)
    acc = system.accelerator
    assert acc.name == "NVIDIA H800 (trace)" and acc.compute_units == 132 and system.name == "nvidia-h800-trace"
    assert acc.hbm_capacity_gib == pytest.approx(data["deviceProperties"][0]["totalGlobalMem"] / 2**30, rel=1e-3)
    best = max(g.tflops for key, g in summary.gemm.items() if all(int(d) % 8 == 0 for d in key.split()[0].split("x")))
    assert best * 0.9 < acc.peak_tflops["bf16"] < best * 1.2
    assert "NVIDIA H800 is in no catalogue system" in summary.assumed[0]
    for e in data["traceEvents"]:
        for k in SHAPE_KEYS:
            (e.get("args") or {}).pop(k, None)
    bare = write_trace(data, tmp_path / "h800-noshape.json.gz")
    with pytest.raises(Exception, match="measures no memory bandwidth.*--hardware SPEC.yaml"):
        calibrate_from_trace([bare], job=JobSource(plan_path=PLAN), strict=False)


def test_hardware_naming_another_gpu_is_said_and_the_traces_own_device_calibrated(no_shapes, capsys):
    assert main(["calibrate", "--from-trace", str(no_shapes), "--plan", str(PLAN), "--hardware", "dgx-h100",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "--hardware dgx-h100 is H100-SXM5-80GB, not the NVIDIA H200 the trace ran on" in out["assumed"][0]
    assert "base system dgx-h200" in out["assumed"][1]


def test_an_fp32_trace_at_its_shapes_calibrates_tf32_and_fp32():
    """HTA's two sampled ranks (no deviceProperties: --hardware says the A100): CUTLASS's SM80 tensorop_s1688 kernels
    ran TF32, ampere_sgemm fp32; each gets its own matmul_max, the plan precisions keep the catalogue's."""
    system, summary, fit = calibrate_from_trace([F / "hta" / "sampled_rank-0.json.gz",
                                                 F / "hta" / "sampled_rank-1.json.gz"], hardware="dgx-a100-40gb")
    mm = system.efficiency.matmul_max
    assert {"tf32", "fp32"} <= set(mm) and mm["bf16"] == 0.869  # the catalogue's A100 bf16
    assert {r.kind for r in fit.residuals if r.quantity == "gemm"} == {"tf32", "fp32"}
    assert "records no deviceProperties" in summary.assumed[0]


@pytest.mark.parametrize("name, dtype", [
    ("volta_sgemm_128x64_nn", "fp32"), ("ampere_sgemm_32x32_sliced1x4_tn", "fp32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(...)", "tf32"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "tf32"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(...)", "bf16"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "bf16"), ("volta_h884gemm_64x64_nn", "fp16"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", "fp16"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN", "fp32"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT32x32x64_MI16x16x1", "bf16"),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3", "fp8"), ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", None),
    ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>", None)])
def test_kernel_names_state_their_dtype(name, dtype):
    assert kernel_dtype(name) == dtype


def test_pipeline_stages_split_the_plans_gemm_flops():
    """plan_gemm_work on pp = 2: the stages' FLOPs (12 layers each, the head on the last) sum to pp = 1's."""
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.plan.layout import resolve
    from perfmodel.spec.plan.file import load_plan_file

    pf, system = load_plan_file(PLAN), load_hardware("dgx-h200")
    one = plan_gemm_work(pf.model, system, resolve(pf.plan, pf.model, system))
    two = plan_gemm_work(pf.model, system, resolve(pf.plan.model_copy(update={"pp": 2, "gpus": 2}), pf.model, system))
    assert len(one) == 1 and len(two) == 2 and two[0][0] + two[1][0] == pytest.approx(one[0][0], rel=1e-12)
    assert two[1][0] - two[0][0] == pytest.approx(6 * 8192 * 1024 * 50257, rel=1e-12)  # the head's


def test_a_json_trace_cut_mid_way_is_refused_in_one_line(tmp_path, capsys):
    text = gzip.decompress((F / "hta" / "mi250_rocm.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) // 2])
    short = tmp_path / "short.json.gz"
    short.write_bytes((F / "tracelens" / "mi210_gpu_only_trace.json.gz").read_bytes()[:5000])
    for path, words in ((cut, "is not JSON"), (short, "truncated or damaged gzip")):
        assert main(["calibrate", "--from-trace", str(path), "--plan", str(PLAN), "--output",
                     str(tmp_path / "s.yaml")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err and str(path) in err
