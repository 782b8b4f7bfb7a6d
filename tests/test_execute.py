"""The executor trains every layout as one process would: losses over the first steps equal a single-process
run of the same seed (tolerance LOSS_TOL), on CPU with gloo, 1 to 8 processes, a tiny model.

Plans of one process count share a torchrun launch (module-scoped fixtures) because each launch costs seconds.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # CI installs torch (README test command); the core install does not

from perfmodel.cli.main import main  # noqa: E402
from perfmodel.errors import InputError  # noqa: E402
from perfmodel.execute.run_plans import run_plans  # noqa: E402
from perfmodel.spec.hardware.system import load_hardware  # noqa: E402
from perfmodel.execute.launch.torchrun import RunFailed  # noqa: E402
from perfmodel.spec.measurement import load_measurement, measurement_path  # noqa: E402
from perfmodel.spec.model.config import ModelConfig  # noqa: E402
from perfmodel.spec.plan.layout import Plan, resolve, split_of  # noqa: E402
from perfmodel.spec.plan.file import (
    PLACEMENT_AXES,
    PlanFile,
    Prediction,
    megatron_placements,
    mesh_of,
    write_plan_file,
)

HERE = Path(__file__).parent
CPU = load_hardware(HERE / "fixtures" / "cpu-test.yaml")
STEPS = 3
# Correct layouts agree with one process to ~1e-7 here (fp32, different reduction orders); a data-parallel
# gradient that is not averaged, or one averaged twice, moves the loss by >= 3e-4 after one step.
LOSS_TOL = 2e-5

LLAMA = ModelConfig(name="tiny-llama", n_layers=4, hidden=64, n_heads=4, n_kv_heads=2, ffn_hidden=128, vocab=512,
                    max_seq_len=64, mlp="swiglu", norm="rmsnorm", position="rope")
GPT = ModelConfig(name="tiny-gpt", n_layers=4, hidden=64, n_heads=4, ffn_hidden=256, vocab=512, max_seq_len=64,
                  mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all")
BATCH = dict(seq_len=32, global_batch=8)
LORA = dict(rank=4, modules="all")  # adapters on qkv, wo, [w1; w3] and w2 of every layer


def plan_file(model: ModelConfig, placements=None, **kw) -> PlanFile:
    kw = {"micro_batch": 2, **BATCH, **kw}
    plan = resolve(Plan(**kw), model, CPU)
    pred = Prediction(step_time_s=0.1, tokens_per_s=1.0, mfu=0.1, memory_bytes=1.0, memory_capacity_bytes=2.0,
                      fits_in_memory=True)
    return PlanFile(version=1, model=model, hardware=CPU, plan=plan, mesh=mesh_of(plan),
                    stage_layers=split_of(plan, model.n_layers),
                    placements=placements or [], prediction=pred, created_by="tests/test_execute.py")


def reference_losses(model: ModelConfig, **kw) -> list[float]:
    """The same model, seed and data on one process (in this process: no torchrun, no process group); `kw`: more
    plan fields (lora)."""
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer

    pf = plan_file(model, gpus=1, micro_batch=8, **kw)
    trainer = Trainer(pf, torch.device("cpu"), seed=0)
    batches = Batches(model.vocab, pf.plan.global_batch, pf.plan.seq_len, seed=0)
    return [trainer.step(batches.step(i)) for i in range(STEPS)]


def tp_variant(model: ModelConfig, plan_kw: dict, change) -> list:
    """Megatron's placements with the tp entries of some ops rewritten by change(op) -> (input, weight, output,
    split dim) or None (keep)."""
    plan = resolve(Plan(micro_batch=2, **BATCH, **plan_kw), model, CPU)
    tp = PLACEMENT_AXES.index("tp")
    out = []
    for pl in megatron_placements(model, plan):
        new = change(pl.op)
        if new is not None:
            inp, weight, output, dim = new
            split = {d: [a for a in axes if a != "tp"] for d, axes in pl.split.items()}
            split = {d: a for d, a in split.items() if a}
            if dim:
                split.setdefault(dim, []).append("tp")
            words = {"input": list(pl.input), "output": list(pl.output),
                     "weight": list(pl.weight) if pl.weight else None}
            words["input"][tp], words["output"][tp] = inp, output
            if words["weight"] is not None:
                words["weight"][tp] = weight
            pl = pl.model_copy(update={**words, "split": split, "style": None})
        out.append(pl)
    return out


def batch_over_tp(op):
    """Every op splits the batch over tp (data parallelism on the tp axis, no stock ParallelStyle)."""
    if op == "loss":
        return "Shard(0)", None, "Partial()", "batch"
    return "Shard(0)", "Replicate()", "Shard(0)", "batch"


def replicated_mlp(op):
    """Megatron attention, but the MLP computed whole on every tp rank (weights replicated)."""
    if op in ("mlp_in", "activation", "mlp_out"):
        return "Replicate()", "Replicate()", "Replicate()", None
    if op == "norm2":
        return "Replicate()", "Replicate()", "Replicate()", None
    return None


def write_all(tmp: Path, cases: dict[str, PlanFile]) -> list[Path]:
    paths = []
    for name, pf in cases.items():
        paths.append(write_plan_file(pf, tmp / f"{name}.json"))
    return paths


TWO = {
    "ddp_accumulate": lambda: plan_file(LLAMA, gpus=2, micro_batch=1),  # 4 micro-batches per rank
    "zero1": lambda: plan_file(LLAMA, gpus=2, zero=1),
    "tp_sp": lambda: plan_file(LLAMA, gpus=2, tp=2, sequence_parallel=True),
    "tp_no_sp_gpt_tied": lambda: plan_file(GPT, gpus=2, tp=2),
    "pp_gpipe": lambda: plan_file(LLAMA, gpus=2, pp=2, schedule="gpipe"),
    "pp_1f1b_gpt_tied": lambda: plan_file(GPT, gpus=2, pp=2, micro_batch=1),
    # Megatron-LM's accounting: 4 layers + embedding + loss = 6 slots over 2 x 3 chunks, chunks [0, 1, 1, 1, 1, 0]
    # (the first holds the embedding alone, the last the head and loss alone)
    "pp_account_embedding_loss": lambda: plan_file(LLAMA, gpus=2, pp=2, vpp=3, account_for_embedding=True,
                                                   account_for_loss=True),
    "cp": lambda: plan_file(LLAMA, gpus=2, cp=2),
    "cp_gpt": lambda: plan_file(GPT, gpus=2, cp=2, recompute="selective"),
    "recompute_full_tp": lambda: plan_file(LLAMA, gpus=2, tp=2, sequence_parallel=True, recompute="full"),
    "tp_batch_split": lambda: plan_file(LLAMA, tp_variant(LLAMA, dict(gpus=2, tp=2), batch_over_tp), gpus=2, tp=2),
    "tp_replicated_mlp": lambda: plan_file(LLAMA, tp_variant(LLAMA, dict(gpus=2, tp=2, sequence_parallel=True),
                                                             replicated_mlp), gpus=2, tp=2, sequence_parallel=True),
    "lora_ddp": lambda: plan_file(LLAMA, gpus=2, lora=LORA),  # adapters on a frozen base (execute.lora)
    "lora_fsdp_pp": lambda: plan_file(LLAMA, gpus=2, pp=2, zero=3, lora=LORA),
}
FOUR = {
    "fsdp": lambda: plan_file(LLAMA, gpus=4, zero=3, micro_batch=1),
    "hsdp": lambda: plan_file(LLAMA, gpus=4, zero=3, dp_replicate=2, micro_batch=1),  # 2 replicas of FSDP over 2
    "zero2_tp": lambda: plan_file(LLAMA, gpus=4, tp=2, sequence_parallel=True, zero=2),
    "pp_interleaved_dp": lambda: plan_file(LLAMA, gpus=4, pp=2, vpp=2),
    "pp_tp_gpt_tied": lambda: plan_file(GPT, gpus=4, pp=2, tp=2, sequence_parallel=True, micro_batch=1),
    "pp_fsdp": lambda: plan_file(LLAMA, gpus=4, pp=2, zero=3),
    "pp_zero1": lambda: plan_file(LLAMA, gpus=4, pp=2, zero=1),  # ZeroRedundancyOptimizer beside a schedule
    "zero1_tp": lambda: plan_file(LLAMA, gpus=4, tp=2, zero=1),
}


@pytest.fixture(scope="module")
def references():
    return {"tiny-llama": reference_losses(LLAMA), "tiny-gpt": reference_losses(GPT),
            "tiny-llama lora": reference_losses(LLAMA, lora=LORA)}


def _run(tmp_path_factory, cases, nproc):
    tmp = tmp_path_factory.mktemp(f"execute{nproc}")
    pfs = {name: make() for name, make in cases.items()}
    paths = write_all(tmp, pfs)
    ms = run_plans(paths, nproc, device="cpu", steps=STEPS, warmup=1, timeout_s=600)
    return {name: m for name, m in zip(cases, ms)}, tmp


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return _run(tmp_path_factory, TWO, 2)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return _run(tmp_path_factory, FOUR, 4)


def _check(m, references):
    ref = references[m.model.name + (" lora" if m.plan.lora is not None else "")]
    assert len(m.losses) == STEPS
    assert max(abs(a - b) for a, b in zip(m.losses, ref)) < LOSS_TOL, (m.plan_file, m.losses, ref)


@pytest.mark.parametrize("name", list(TWO))
def test_two_process_layouts_match_one_process(two, references, name):
    _check(two[0][name], references)


@pytest.mark.parametrize("name", list(FOUR))
def test_four_process_layouts_match_one_process(four, references, name):
    _check(four[0][name], references)


def test_three_d_layout_on_eight_processes_matches(tmp_path_factory, references):
    """pp 2 x dp 2 x tp 2 (FSDP over dp, TP with SP, 1F1B)."""
    ms, _ = _run(tmp_path_factory, {"3d": lambda: plan_file(LLAMA, gpus=8, pp=2, tp=2, sequence_parallel=True,
                                                            zero=3, micro_batch=1)}, 8)
    _check(ms["3d"], references)


def test_losses_move_and_depend_on_the_seed(references):
    """The equality above is not vacuous: training changes the loss step to step."""
    ref = references["tiny-llama"]
    assert len(set(round(v, 6) for v in ref)) == STEPS


def test_measurement_records_what_ran(two):
    ms, tmp = two
    m = ms["tp_sp"]
    assert m.nproc == 2 and m.backend == "gloo" and m.device_type == "cpu" and m.dtype == "fp32"
    assert m.torch_version == torch.__version__
    assert len(m.ranks) == 2 and all(len(r.step_times_s) == STEPS for r in m.ranks)
    # the job's step time is the slowest rank's, median over the steps after warm-up
    per_step = [max(r.step_times_s[i] for r in m.ranks) for i in range(STEPS)]
    assert m.step_time_s == pytest.approx(statistics.median(per_step[1:]))
    assert m.peak_memory_bytes > 0
    assert measurement_path(tmp / "tp_sp.json").exists()
    assert ms["cp"].notes == []


# tiny-llama's parameters by hand: per layer q 64x64, k and v 64x32 (2 kv heads of 16), o 64x64 = 12288;
# SwiGLU 3 x 64x128 = 24576; two RMSNorms 2 x 64. Embedding and output 512x64 each (untied), final norm 64.
LLAMA_LINEAR = 4 * (12288 + 24576)
LLAMA_REPLICATED = 4 * 128 + 64
LLAMA_VOCAB = 2 * 512 * 64
FP32_ADAM_BYTES = 4 + 4 + 8  # fp32 weight, gradient, two Adam moments


@pytest.mark.parametrize("name, params", [
    ("ddp_accumulate", LLAMA_LINEAR + LLAMA_REPLICATED + LLAMA_VOCAB),  # 213,568: every rank holds the model
    ("tp_sp", (LLAMA_LINEAR + LLAMA_VOCAB) // 2 + LLAMA_REPLICATED),  # 107,072: linears and vocab split in two
])
def test_peak_memory_holds_the_training_state(two, name, params):
    """Every rank's measured peak holds at least its weights, gradients and Adam moments (all live at the
    optimizer step), and not more than twice that: this batch's activations and DDP's gradient buckets are
    smaller than the state. A measure that loses small tensors (a heap that keeps freed 16 KiB blocks resident
    reads ~0.1 MiB here) or counts library pages (tens of MiB) fails."""
    state = params * FP32_ADAM_BYTES
    for r in two[0][name].ranks:
        assert state <= r.peak_memory_bytes <= 2 * state, (r.rank, r.peak_memory_bytes, state)


def test_zero1_with_tp_says_how_it_ran(four):
    assert any("zero 1 ran as FSDP2 without resharding" in n for n in four[0]["zero1_tp"].notes)
    assert four[0]["zero2_tp"].notes == []


def test_a_rank_that_dies_stops_the_run_quickly_and_leaves_no_measurement(tmp_path, monkeypatch):
    path = write_plan_file(plan_file(LLAMA, gpus=2), tmp_path / "dies.json")
    monkeypatch.setenv("PERFMODEL_TEST_FAULT", "kill:1:step1")  # rank 1 kills itself (SIGKILL) at step 1
    start = time.monotonic()
    with pytest.raises(RunFailed) as err:
        run_plans([path], 2, device="cpu", steps=4, warmup=1, timeout_s=120)
    elapsed = time.monotonic() - start
    assert "rank 1 was killed by SIGKILL during step 1 of dies.json" in str(err.value), str(err.value)
    assert elapsed < 60
    assert not measurement_path(path).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dies")]  # no temporary left either


def test_a_run_past_its_limit_is_stopped(tmp_path):
    path = write_plan_file(plan_file(LLAMA, gpus=2), tmp_path / "slow.json")
    start = time.monotonic()
    with pytest.raises(RunFailed, match="limit of 3 s"):
        run_plans([path], 2, device="cpu", steps=2, warmup=1, timeout_s=3)
    assert time.monotonic() - start < 20
    assert not measurement_path(path).exists()


# -- refused before launch --------------------------------------------------------------------------------
def test_refuses_a_process_count_that_differs_from_the_plan(tmp_path):
    path = write_plan_file(plan_file(LLAMA, gpus=2), tmp_path / "p.json")
    with pytest.raises(InputError, match=r"plan.gpus = 2 processes needed, but --nproc 4 .* valid: --nproc 2"):
        run_plans([path], 4, device="cpu")


def test_refuses_a_plan_for_another_device_type(tmp_path):
    from perfmodel.search.plan_writer import plan_file as search_plan_file

    hw = load_hardware("dgx-h100")
    plan = resolve(Plan(gpus=2, micro_batch=2, **BATCH), LLAMA, hw)
    path = write_plan_file(search_plan_file(LLAMA, hw, plan, "test", False), tmp_path / "gpu.json")
    with pytest.raises(InputError, match=r"is for H100-SXM5-80GB \(cuda\) but this run is on cpu"):
        run_plans([path], 2, device="cpu")


def test_refuses_uneven_interleaved_chunks(tmp_path):
    six = LLAMA.model_copy(update={"n_layers": 6})
    path = write_plan_file(plan_file(six, gpus=2, pp=2, vpp=2, stage_layers=[3, 3]), tmp_path / "uneven.json")
    with pytest.raises(InputError, match=r"stage_layers = \[3, 3\] do not split into vpp = 2"):
        run_plans([path], 2, device="cpu")


def test_cli_answers_bad_input_with_one_line_and_exit_2(tmp_path, capsys):
    path = write_plan_file(plan_file(LLAMA, gpus=2), tmp_path / "p.json")
    assert main(["execute", str(path), "--nproc", "3", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--nproc 2" in err
    assert main(["execute", str(path), str(path), "--nproc", "2", "--output", str(tmp_path / "m.json")]) == 2
    assert "--output names one file" in capsys.readouterr().err
    assert main(["execute", str(path), "--nproc", "2", "--device", "tpu"]) == 2
    assert "valid: auto, cpu, cuda" in capsys.readouterr().err
    assert main(["execute", str(path), "--nproc", "2", "--steps", "2", "--warmup", "2", "--device", "cpu"]) == 2
    assert not measurement_path(path).exists()
    assert main(["execute", str(tmp_path / "missing.json"), "--nproc", "2"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["execute", str(path), "--nproc", "2", "--device", "cpu", "--plot", str(tmp_path / "x.svg")]) == 2
    assert "ending in .png" in capsys.readouterr().err and not measurement_path(path).exists()
    assert not os.path.exists(tmp_path / "execute.log")


def test_cli_execute_plot_draws_the_measured_steps(tmp_path, capsys):
    path = write_plan_file(plan_file(LLAMA, gpus=1), tmp_path / "one.json")
    png = tmp_path / "steps.png"
    assert main(["execute", str(path), "--nproc", "1", "--device", "cpu", "--steps", "3", "--warmup", "1",
                 "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {png}" in printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "perfmodel-runs" / "one.measured.json"  # the default: a folder .gitignore covers, beside
    assert f"wrote {out}" in printed and not measurement_path(path).exists()
    m = load_measurement(out)
    assert len(m.step_times()) == 3 and m.plan_file == "../one.json"


def test_plan_fields_the_executor_does_not_run_are_noted():
    from perfmodel.execute.worker import plan_departures

    plan = resolve(Plan(gpus=2, micro_batch=2, attention="unfused", grad_dtype="bf16", overlap_dp_comm=False,
                        **BATCH), LLAMA, load_hardware("dgx-h100"))
    notes = plan_departures(plan, "ddp")
    assert [n.split("(")[-1] for n in notes] == ["attention=unfused)", "grad_dtype=bf16)", "overlap_dp_comm=false)"]
    assert plan_departures(plan, "allreduce")[-1].startswith("gradients")  # nothing overlapped, as planned
    default = resolve(Plan(gpus=2, micro_batch=2, **BATCH), LLAMA, load_hardware("dgx-h100"))
    assert plan_departures(default, "ddp") == [] and plan_departures(default, "fsdp") == []
    assert plan_departures(default, "allreduce")[0].endswith("(overlap_dp_comm=true)")


def test_lora_trains_the_adapters_alone(references):
    """r (n + k) parameters an adapted linear (spec.plan.finetune.adapter_params), the rest frozen; B starts at zero,
    so the first step's loss is the base model's."""
    from perfmodel.execute.train import Trainer

    trainer = Trainer(plan_file(LLAMA, gpus=1, micro_batch=8, lora=LORA), torch.device("cpu"))
    h, q, kv, f, r = 64, 64, 32, 128, 4  # tiny-llama: 4 heads of 16, 2 kv heads, SwiGLU 128
    per_layer = r * (h + q + 2 * kv) + r * (q + h) + r * (h + 2 * f) + r * (f + h)  # qkv, wo, [w1; w3], w2
    assert sum(p.numel() for p in trainer.params) == LLAMA.n_layers * per_layer == 13312
    assert all(("_lora." in n) == p.requires_grad for m in trainer.raw for n, p in m.named_parameters())
    lora, full = references["tiny-llama lora"], references["tiny-llama"]
    assert lora[0] == pytest.approx(full[0], abs=1e-6) and abs(lora[-1] - full[-1]) > 1e-4


def test_refuses_lora_it_cannot_build(tmp_path):
    from perfmodel.execute.run_plans import check_runnable

    pf = plan_file(LLAMA, gpus=2, tp=2, lora=LORA)
    with pytest.raises(InputError, match="p.json: lora = rank 4 on all with tp > 1: the executor's adapters are not "
                                         "split over tensor parallelism; valid: tp 1"):
        check_runnable(pf, "p.json", 2, 1, "cpu")
