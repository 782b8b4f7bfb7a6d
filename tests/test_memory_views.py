"""The executor's memory views (execute/memory_probe.py) and validate's like-with-like comparison.

CUDA cannot run here: its path runs against a stand-in torch.cuda (monkeypatched functions, a fake NVML). The
CPU path runs for real: one tiny plan in one torchrun launch (a memory phase, then the timed one). validate runs with a
stand-in executor on plan files for a CUDA system, so every view is compared without a GPU.
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import pytest

from perfmodel import load_hardware
from perfmodel.spec.hardware.system import System
from perfmodel.spec.measurement import MEMORY_FIELDS, Measurement, RankRecord, load_measurement, write_measurement
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.spec.plan.file import load_plan_file, write_plan_file
from perfmodel.search.plan_writer import plan_file
from perfmodel.validate.sweeps import TINY_GPT2
from perfmodel.validate.runner import validate
from perfmodel.validate.metrics import COLUMNS, compare, summarize

GiB, MiB = 2**30, 2**20
HERE = Path(__file__).parent
CPU = load_hardware(HERE / "fixtures" / "cpu-test.yaml")
LLAMA = ModelConfig(name="tiny-llama", n_layers=4, hidden=64, n_heads=4, n_kv_heads=2, ffn_hidden=128, vocab=512,
                    max_seq_len=64, mlp="swiglu", norm="rmsnorm", position="rope")
LLAMA_PARAMS = 4 * (12288 + 24576) + 4 * 128 + 64 + 2 * 512 * 64  # tests/test_execute.py: 213,568


def measurement(system: System, plan: Plan, ranks: list[dict], device_type="cuda", methods=None, path="x.json",
                model: ModelConfig = TINY_GPT2) -> Measurement:
    """A measurement of `plan` whose ranks have the memory fields `ranks` (each rank 0.5 s steps)."""
    plan = resolve(plan, model, system)
    return Measurement(
        plan_file=path, model=model, hardware=system, plan=plan,
        mesh={"pp": plan.pp, "dp": plan.dp, "cp": plan.cp, "tp": plan.tp}, stage_layers=[model.n_layers],
        device_type=device_type, backend="nccl", torch_version="2.13.0", nproc=len(ranks), steps=3, warmup=1,
        dtype="bf16 autocast", memory_method="test", memory_methods=methods or {},
        ranks=[RankRecord(rank=i, device="test", step_times_s=[0.5] * 3, **r) for i, r in enumerate(ranks)],
        losses=[9.0, 8.9, 8.8], wall_s=1.0)


# ---------------------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------------------
def test_old_measurement_files_load_with_the_new_views_empty(tmp_path):
    m = measurement(CPU, Plan(gpus=1, micro_batch=2, global_batch=8, seq_len=32), [{"peak_memory_bytes": 5e6}],
                    model=LLAMA)
    data = json.loads(m.model_dump_json())
    for r in data["ranks"]:
        for field in MEMORY_FIELDS:
            if field != "peak_memory_bytes":
                del r[field]
    del data["memory_methods"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load_measurement(tmp_path / "old.json")
    assert old.peak_memory_bytes == 5e6 and old.memory_methods == {}
    assert old.memory_view("allocated") == 5e6
    assert all(old.memory_view(v) is None for v in ("reserved", "device", "between_steps"))


def test_memory_view_is_the_most_loaded_rank_of_those_that_measured_it():
    m = measurement(CPU, Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=32), [
        {"peak_memory_bytes": 3e6, "peak_reserved_bytes": 4e6, "device_bytes": None, "between_steps_bytes": 1e6},
        {"peak_memory_bytes": 2e6, "peak_reserved_bytes": 5e6, "device_bytes": 7e6, "between_steps_bytes": 2e6}],
        model=LLAMA)
    assert (m.memory_view("allocated"), m.memory_view("reserved"), m.memory_view("device"),
            m.memory_view("between_steps")) == (3e6, 5e6, 7e6, 2e6)


# ---------------------------------------------------------------------------------------------------------
# CUDA path against a stand-in torch.cuda
# ---------------------------------------------------------------------------------------------------------
class FakeCuda:
    """What PeakMemory reads of torch.cuda: allocated / reserved now and at their peaks, NVML's used bytes."""

    def __init__(self):
        self.allocated = self.reserved = self.max_allocated = self.max_reserved = 0
        self.used, self.calls = 100 * MiB, []

    def set(self, allocated, reserved=None):
        self.allocated, self.reserved = allocated, max(reserved or allocated, self.reserved)
        self.max_allocated = max(self.max_allocated, allocated)
        self.max_reserved = max(self.max_reserved, self.reserved)
        self.used = 100 * MiB + self.reserved  # context + the allocator's segments

    def install(self, monkeypatch, torch, nvml=True):
        cuda = torch.cuda

        def reset(device):
            self.calls.append(("reset", device))
            self.max_allocated, self.max_reserved = self.allocated, self.reserved

        def used(device):
            if nvml is not True:
                raise ModuleNotFoundError("pynvml does not seem to be installed")
            return self.used

        monkeypatch.setattr(cuda, "synchronize", lambda device=None: self.calls.append(("sync", device)))
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", reset)
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: self.max_allocated)
        monkeypatch.setattr(cuda, "max_memory_reserved", lambda device=None: self.max_reserved)
        monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: self.allocated)
        if nvml == "pynvml":  # an older torch without device_memory_used: pynvml by the device's UUID
            monkeypatch.delattr(cuda, "device_memory_used", raising=False)
            fake = types.ModuleType("pynvml")
            fake.nvmlInit = lambda: None
            fake.nvmlDeviceGetHandleByUUID = lambda uuid: ("handle", uuid)
            fake.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=self.used, handle=handle)
            monkeypatch.setitem(sys.modules, "pynvml", fake)
            monkeypatch.setattr(cuda, "get_device_properties", lambda device: types.SimpleNamespace(uuid="abc-1"))
        elif nvml is False:  # neither
            monkeypatch.setattr(cuda, "device_memory_used", used)
            monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
        else:
            monkeypatch.setattr(cuda, "device_memory_used", used)


def _steps(fake, mem):
    """Set-up at 50 MiB (outside the window), then 3 steps: states 40 MiB between steps, peaks 90/130/110 MiB
    (the second with 160 MiB reserved)."""
    fake.set(50 * MiB, 60 * MiB)
    mem.start()
    for peak, reserved in ((90, None), (130, 160), (110, None)):
        fake.set(peak * MiB, reserved and reserved * MiB)
        fake.set(40 * MiB)
        mem.after_step()
    mem.stop()
    return mem.record()


@pytest.mark.parametrize("nvml", [True, "pynvml"])
def test_cuda_records_allocated_reserved_device_and_between_steps(monkeypatch, nvml):
    torch = pytest.importorskip("torch")
    from perfmodel.execute.memory_probe import METHODS, PeakMemory

    fake = FakeCuda()
    fake.install(monkeypatch, torch, nvml)
    dev = torch.device("cuda", 0)
    mem = PeakMemory(dev)
    mem.baseline()
    rec = _steps(fake, mem)
    assert ("reset", dev) in fake.calls
    assert rec == {"peak_memory_bytes": 130 * MiB, "peak_reserved_bytes": 160 * MiB,
                   "device_bytes": 100 * MiB + 160 * MiB, "between_steps_bytes": 40 * MiB}
    assert mem.peak() == 130 * MiB
    RankRecord(rank=0, device="fake", step_times_s=[1.0], **rec)  # the fields fit the schema
    how = "torch.cuda.device_memory_used" if nvml is True else "pynvml.nvmlDeviceGetMemoryInfo"
    assert mem.methods["device_bytes"] == METHODS["cuda"]["device_bytes"].format(nvml=how)
    assert set(mem.methods) == set(MEMORY_FIELDS)


def test_cuda_without_nvml_leaves_device_memory_unmeasured_and_says_why(monkeypatch):
    torch = pytest.importorskip("torch")
    from perfmodel.execute.memory_probe import PeakMemory

    fake = FakeCuda()
    fake.install(monkeypatch, torch, nvml=False)
    mem = PeakMemory(torch.device("cuda", 0))
    rec = _steps(fake, mem)
    assert rec["device_bytes"] is None and rec["peak_reserved_bytes"] == 160 * MiB
    assert mem.methods["device_bytes"].startswith("not measured: NVML could not be read")
    assert "pynvml" in mem.methods["device_bytes"]


def test_worker_writes_every_view_and_its_method(tmp_path, monkeypatch):
    """worker.write on a CUDA device: per rank the largest of each field over the rounds (None where no round
    measured it), the methods in the file; execute prints reserved and device beside the peak."""
    torch = pytest.importorskip("torch")
    from perfmodel.execute import worker
    from perfmodel.execute.memory_probe import METHODS

    system = load_hardware("dgx-h100")
    pf = plan_file(TINY_GPT2, system, Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=128))
    path = write_plan_file(pf, tmp_path / "p.json")
    out = tmp_path / "p.measured.json"

    def rec(rank, alloc, reserved, device):
        return {"rank": rank, "device": "fake H100", "step_times_s": [0.1, 0.1, 0.1], "peak_memory_bytes": alloc,
                "peak_reserved_bytes": reserved, "device_bytes": device, "between_steps_bytes": alloc / 4}

    methods = dict(METHODS["cuda"], device_bytes="not measured: NVML could not be read (test)")
    first = {"notes": [], "wall": 1.0, "checkpoint": None, "memory_methods": methods}
    runs = [([rec(0, 100.0, 120.0, None), rec(1, 110.0, 130.0, None)], [9.0, 8.9, 8.8], first),
            ([rec(0, 105.0, 118.0, 300.0), rec(1, 90.0, 140.0, None)], [9.0, 8.9, 8.8], first)]
    lines = []
    monkeypatch.setattr(worker, "_line", lines.append)
    worker.write({"steps": 3, "warmup": 1, "measures": "both"}, {"plan": str(path), "output": str(out)},
                 torch.device("cuda", 0), runs)
    m = load_measurement(out)
    assert [(r.peak_memory_bytes, r.peak_reserved_bytes, r.device_bytes, r.between_steps_bytes)
            for r in m.ranks] == [(105.0, 120.0, 300.0, 26.25), (110.0, 140.0, None, 27.5)]
    assert m.memory_methods == methods and m.memory_method == METHODS["cuda"]["peak_memory_bytes"]
    assert m.dtype == "bf16 autocast" and len(m.ranks[0].step_times_s) == 6
    assert any("reserved 0.0 MiB, device 0.0 MiB" in line for line in lines)


# ---------------------------------------------------------------------------------------------------------
# validate: like with like (stand-in executor, plan files for a CUDA system: no GPU needed)
# ---------------------------------------------------------------------------------------------------------
def test_validate_compares_each_view_with_its_prediction(tmp_path, monkeypatch):
    system = load_hardware("dgx-h100")
    plans = {"dp1": Plan(gpus=1, micro_batch=2, global_batch=8, seq_len=128),
             "dp1-full": Plan(gpus=1, micro_batch=2, global_batch=8, seq_len=128, recompute="full")}
    paths = [write_plan_file(plan_file(TINY_GPT2, system, p), tmp_path / f"{n}.json") for n, p in plans.items()]
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.spec.stack.profile import EXECUTOR_STACK

    est = {n: evaluate_plan(TINY_GPT2, system, resolve(p, TINY_GPT2, system).model_copy(
        update={"stack": EXECUTOR_STACK}))[1].memory_bytes for n, p in plans.items()}
    assert all(e.runtime > 0 and e.reserved > e.allocated for e in est.values())  # the views differ on CUDA

    def run_plans(paths, nproc, *, device, steps, warmup, rounds, log_dir, timeout_s, echo, trace_dir=None):
        assert device == "cuda"
        out = []
        for p in paths:
            pf, e = load_plan_file(p), est[Path(p).stem]
            # dp1: every view measured 10% above its prediction; dp1-full: no NVML, device not measured
            device_bytes = 1.1 * e.device if Path(p).stem == "dp1" else None
            m = measurement(pf.hardware, pf.plan, [{
                "peak_memory_bytes": 1.1 * e.allocated, "peak_reserved_bytes": 1.1 * e.reserved,
                "device_bytes": device_bytes, "between_steps_bytes": 1.1 * e.between_steps}], path=str(p),
                methods={"peak_reserved_bytes": "max_memory_reserved (test)", "device_bytes": "NVML (test)"})
            write_measurement(m, tmp_path / f"{Path(p).stem}.measured.json")
            out.append(m)
        return out

    monkeypatch.setattr("perfmodel.execute.run_plans.run_plans", run_plans)
    res = validate(paths, out_dir=tmp_path / "out", echo=lambda line: None)
    df = res.table
    assert list(df.columns) == COLUMNS
    # allocated against allocated: no memory_overhead subtracted, no allocator slack added
    assert df["predicted_memory_gib"].tolist() == pytest.approx([est[n].allocated / GiB for n in plans])
    assert df["memory_error_pct"].tolist() == pytest.approx([100 / 1.1 - 100] * 2)
    for view in ("reserved", "between_steps"):
        assert df[f"predicted_{view}_gib"].tolist() == pytest.approx([getattr(est[n], view) / GiB for n in plans])
        assert df[f"{view}_error_pct"].tolist() == pytest.approx([100 / 1.1 - 100] * 2)
    assert df["device_error_pct"][0] == pytest.approx(100 / 1.1 - 100) and math.isnan(df["device_error_pct"][1])
    assert math.isnan(df["measured_device_gib"][1]) and df["predicted_device_gib"][1] == pytest.approx(
        est["dp1-full"].device / GiB)
    text = res.text()
    for head in ("res pred", "res meas", "res err", "dev err", "between err"):
        assert head in text
    assert "peak memory: MAPE 9.1% (allocated)   reserved 9.1%   device 9.1%   between steps 9.1%" in text
    assert any(n.startswith("memory compared view by view") for n in res.notes)
    assert "reserved memory: max_memory_reserved (test)" in res.notes
    assert not any("memory_overhead" in n for n in res.notes)
    csv = (tmp_path / "out" / "validation.csv").read_text().splitlines()
    assert csv[0].split(",") == COLUMNS


def test_without_the_other_views_the_table_shows_allocated_only():
    m = measurement(CPU, Plan(gpus=1, micro_batch=2, global_batch=8, seq_len=32), [{"peak_memory_bytes": GiB}],
                    device_type="cpu", model=LLAMA)
    row = compare("a", "DP", 0.5, 0.9 * GiB, m, {"reserved": 0.9 * GiB, "device": 1.2 * GiB})
    assert row.predicted_reserved_gib == pytest.approx(0.9) and row.measured_reserved_gib is None
    res = summarize([row], sweep=None, device="cpu", nproc=1, hardware="cpu-test", hardware_source="test",
                    measurements=[m])
    assert res.view_mape_pct() == {}
    assert "res pred" not in res.text() and math.isnan(res.table["reserved_error_pct"][0])
    with pytest.raises(ValueError, match="valid: reserved, device, between_steps"):
        compare("a", "DP", 0.5, GiB, m, {"total": GiB})


# ---------------------------------------------------------------------------------------------------------
# CPU path for real: one tiny data-parallel plan on 2 processes
# ---------------------------------------------------------------------------------------------------------
def test_cpu_run_records_between_steps_and_no_reserved_or_device(tmp_path):
    pytest.importorskip("torch")
    from perfmodel.execute.run_plans import run_plans
    from perfmodel.spec.plan.file import PlanFile, Prediction, mesh_of
    from perfmodel.spec.plan.layout import split_of

    plan = resolve(Plan(gpus=2, micro_batch=2, global_batch=8, seq_len=32), LLAMA, CPU)
    pf = PlanFile(version=1, model=LLAMA, hardware=CPU, plan=plan, mesh=mesh_of(plan),
                  stage_layers=split_of(plan, LLAMA.n_layers), placements=[],
                  prediction=Prediction(step_time_s=0.1, tokens_per_s=1.0, mfu=0.1, memory_bytes=1.0,
                                        memory_capacity_bytes=2.0, fits_in_memory=True),
                  created_by="tests/test_memory_views.py")
    path = write_plan_file(pf, tmp_path / "dp2.json")
    (m,) = run_plans([path], 2, device="cpu", steps=2, warmup=1, timeout_s=300)
    states = LLAMA_PARAMS * 12  # fp32 weights and two Adam moments stay between steps (gradients set to None)
    for r in m.ranks:
        assert r.peak_reserved_bytes is None and r.device_bytes is None
        assert states <= r.between_steps_bytes <= r.peak_memory_bytes, (r.rank, r.between_steps_bytes, states)
        assert r.between_steps_bytes <= 2 * states  # (+ DDP's gradient buckets, 4 B per parameter)
    assert set(m.memory_methods) == set(MEMORY_FIELDS)
    assert m.memory_methods["peak_reserved_bytes"].startswith("not measured")
    assert "VmRSS" in m.memory_methods["between_steps_bytes"] and "untimed phase" in m.memory_methods[
        "between_steps_bytes"]
