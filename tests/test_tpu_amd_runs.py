"""The TPU and AMD runs (tpu_amd_runs_dev.csv) as Cases (benchmarks.evals.published.tpu_amd_runs), on seven of its rows
copied to tests/fixtures/tpu_amd_runs_sample.csv: the mapping of rows worked out by hand from their notes, the
refusals, and benchmarks/evals/tpu_amd_runs.py's tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfmodel.errors import InputError
from benchmarks.evals.published import tpu_amd_runs
from perfmodel.calibrate.runs.table import Case
from benchmarks.evals.published.tpu_amd_runs import load_tpu_amd_cases, to_tpu_amd_case
from perfmodel.spec.hardware.system import load_hardware

SAMPLE = Path(__file__).parent / "fixtures" / "tpu_amd_runs_sample.csv"


@pytest.fixture(scope="module")
def cases():
    return {c.row_id: c for c in load_tpu_amd_cases(SAMPLE)}


def test_one_case_per_row_in_order(cases):
    assert list(cases) == ["T047", "T058", "T059", "T079", "T101", "T112", "T117"]
    assert all(isinstance(c, Case) for c in cases.values())


def test_maxtext_v5p_2023_table_row(cases):
    """T079: 1x v5p-128 = 64 chips, ici_tensor 4, ici_fsdp -1 (16), per_device_batch_size 8, seq 2048, remat
    'minimal'; the 2023 synthetic 32B (head_dim 256, ReLU MLP, tied, vocab 32768: N = 32.55B); 328 TFLOP/s per chip
    counted as 6 N tokens + 6 H L hd S^2 per sequence = 3252.4 TFLOP per chip per step -> 9.92 s."""
    c = cases["T079"]
    m, p = c.model, c.plan
    assert (c.system.name, c.accelerator, c.group, c.trust) == ("tpu-v5p", "TPU v5p", "MaxText_v5p_table_2023", "A")
    assert (m.n_layers, m.hidden, m.n_heads, m.head_dim, m.ffn_hidden, m.vocab) == (32, 10240, 32, 256, 32768, 32768)
    assert (m.mlp, m.tie_embeddings, m.norm, m.position) == ("gelu", True, "rmsnorm", "rope")
    assert m.n_params() / 1e9 == pytest.approx(32.55, abs=0.01)
    assert (p.gpus, p.tp, p.pp, p.dp, p.cp, p.zero, p.sequence_parallel) == (64, 4, 1, 16, 1, 3, True)
    assert (p.micro_batch, p.global_batch, p.seq_len, p.num_microbatches) == (32, 512, 2048, 1)  # 8 per chip x tp 4
    assert (p.recompute, p.recompute_saved, p.precision, p.stack, p.grad_dtype) == (
        "names", ["qkv", "out_proj", "mlp_in"], "bf16", "maxtext", "fp32")  # MaxText's minimal: every projection
    assert c.reason == "" and "minimal" in c.note
    assert c.measured_s == pytest.approx(3252.4 / 328, rel=1e-3)


def test_maxtext_v5e_2023_table_row(cases):
    """T058: 1x v5e-256, ici_tensor 16 x ici_fsdp 16, pdbs 1, remat full, the 128B (64 layers, 64 heads of 256,
    mlp 65536); 110 TFLOP/s per chip over 1613.8 TFLOP per chip per step -> 14.67 s."""
    c = cases["T058"]
    m, p = c.model, c.plan
    assert (c.system.name, m.n_layers, m.hidden, m.n_heads, m.ffn_hidden) == ("tpu-v5e", 64, 10240, 64, 65536)
    # MaxText's full: jax.checkpoint saving nothing but the layer input (names, nothing saved), not Megatron's full
    assert (p.gpus, p.tp, p.dp, p.zero, p.micro_batch, p.global_batch, p.recompute) == (
        256, 16, 16, 3, 16, 256, "names")
    assert p.recompute_saved == []
    assert c.measured_s == pytest.approx(1613.8 / 110, rel=1e-3)
    assert c.note == "remat full as recompute names [] (jax.checkpoint saving nothing)"
    # T059: two v5e-256 slices over the data-centre network (the spec's DCN tier), fsdp 256 x dcn data 2 priced as
    # ZeRO-3 over all 512 chips; 117 TFLOP/s per chip over 1239.4 TFLOP per chip per step
    t = cases["T059"]
    assert t.reason == "" and t.plan.gpus == 512 and t.plan.zero == 3
    assert t.measured_s == pytest.approx(1239.4 / 117, rel=1e-3)


def test_maxtext_tiering_row_from_tokens_per_s(cases):
    """T047: Llama 2 70B (the preset), 512 v5p chips, ici_fsdp -1, pdbs 4, seq 4096, save_dot_except_mlpwi, 692
    tokens/s per chip -> 4 x 4096 / 692 = 23.68 s."""
    c = cases["T047"]
    p = c.plan
    assert c.model.name == "llama-2-70b"
    assert (p.gpus, p.tp, p.dp, p.zero, p.micro_batch, p.global_batch, p.seq_len) == (512, 1, 512, 3, 4, 2048, 4096)
    assert (p.recompute, p.recompute_saved) == ("names", ["qkv", "out_proj"])  # mlpwo's output: never needed
    assert "save_dot_except_mlpwi" in c.note
    assert c.measured_s == pytest.approx(4 * 4096 / 692)


def test_mlperf_amd_llama31_8b_row(cases):
    """T117: MLPerf v5.1 AMD MI355X, Llama 3.1 8B pretraining: 8 GPUs, TP=PP=CP=1, MBS 2, GBS 32 (grad-accum 2),
    FP8 hybrid, Megatron distributed optimizer, no recompute; 32 / 30.6861 samples/s = 1.0428 s."""
    c = cases["T117"]
    assert c.measured_s == pytest.approx(32 / 30.6861, rel=1e-4)
    try:
        load_hardware("mi355x-8")
    except InputError:  # the spec is not in the catalogue yet
        assert c.reason == "no catalogue system mi355x-8" and c.plan is None
        return
    p = c.plan
    assert (c.reason, c.model.name, c.system.name) == ("", "llama-3.1-8b", "mi355x-8")
    assert (p.gpus, p.tp, p.pp, p.dp, p.cp, p.zero, p.micro_batch, p.global_batch, p.num_microbatches) == (
        8, 1, 1, 8, 1, 1, 2, 32, 2)
    # "NeMo 2.5.0rc0 (patched)/Megatron-core": NeMo 2, its newest release line entry (spec.stack.frameworks)
    assert (p.seq_len, p.recompute, p.precision, p.stack) == (8192, "none", "fp8", "nemo2@25.07")


def test_block_times_are_no_step_times(cases):
    """MLPerf GPT-3 on TPU (int8 AQT, now priced) publishes block times that include an eval pass: no step time."""
    assert cases["T101"].reason == "only MLPerf block times (training steps plus an eval pass) published"
    assert cases["T101"].plan is None


def test_lora_rows_map_to_a_frozen_fp8_base(cases):
    """MLPerf's Llama 2 70B LoRA on MI300X (T112): rank 16 on the attention projections over an fp8 base, 21 of
    80 layers recomputed by the block method, as its notes and config say."""
    c = cases["T112"]
    p = c.plan
    assert (c.reason, c.model.name, p.lora.rank, p.lora.modules, p.lora.base_weights) == (
        "", "llama-2-70b", 16, "attention", "fp8")
    assert (p.recompute, p.recompute_method, p.recompute_num_layers, p.dp, p.cp) == ("full", "block", 21, 8, 1)


def test_missing_system_keeps_the_row(monkeypatch):
    """A system not in the catalogue is the row's reason; its measured time stays."""
    def absent(name):
        raise InputError(f"no system {name}")

    monkeypatch.setattr(tpu_amd_runs, "load_hardware", absent)
    df = pd.read_csv(SAMPLE)
    c = to_tpu_amd_case(df[df["row_id"] == "T117"].iloc[0])
    assert (c.reason, c.plan) == ("no catalogue system mi355x-8", None)
    assert c.measured_s == pytest.approx(1.0428, abs=1e-4)


def test_benchmark_main_prints_the_tables(capsys, tmp_path):
    """benchmarks/evals/tpu_amd_runs.py on the sample: the per-row table, both summaries, the not-expressed reasons and
    --csv; MAPE and the 100%-for-unexpressed MAPE agree with the written rows."""
    from benchmarks.evals import tpu_amd_runs as bench

    out = tmp_path / "rows.csv"
    assert bench.main(["--data", str(SAMPLE), "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "by accelerator" in text and "by source group" in text
    rows = pd.read_csv(out)
    assert list(rows["row_id"]) == ["T047", "T058", "T059", "T079", "T101", "T112", "T117"]
    ok = rows.dropna(subset=["predicted_s"])
    assert {"T047", "T058", "T079"} <= set(ok["row_id"])
    mape = 100 * ok["error"].abs().mean()
    with_missing = 100 * (ok["error"].abs().sum() + len(rows) - len(ok)) / len(rows)
    lines = [line.split() for line in text.splitlines() if line.startswith("ALL ")]
    all_lines = [cells for cells in lines if len(cells) == 7]  # the two summaries' (rows ... MAPE with missing)
    assert len(all_lines) == 2
    # the three transfer tables (by release, by chip family, by family and precision): rows, MAPE, signed median
    transfer = [cells for cells in lines if len(cells) == 5]
    assert len(transfer) == 3 and all(int(c[1]) == len(ok) for c in transfer)
    assert all(float(c[2]) == pytest.approx(mape, abs=0.06) for c in transfer)
    assert all(float(c[3]) == pytest.approx(100 * ok["error"].median(), abs=0.06) for c in transfer)
    for cells in all_lines:
        assert (int(cells[1]), int(cells[2])) == (7, len(ok))
        assert float(cells[4]) == pytest.approx(mape, abs=0.06)
        assert float(cells[6]) == pytest.approx(with_missing, abs=0.06)
    v5p = next(line.split() for line in text.splitlines() if line.startswith("TPU v5p"))
    assert v5p[2:4] == ["3", "2"]  # T047, T079 expressed; T101 (block times only) not
    assert f"expressed rows said not to fit: {int((ok['verdict'] == 'does not fit').sum())} of {len(ok)}" in text
    assert f"rows not expressed: {7 - len(ok)} of 7" in text
    assert "  1  only MLPerf block times (training steps plus an eval pass) published  [T101]" in text


def test_maxtext_stack_hides_tensor_parallel_traffic_behind_the_matmuls():
    """The maxtext profile (XLA's overlapped collectives): the same TP traffic as megatron-core's on a TPU v5p plan
    with tp 4, mostly hidden behind the GEMMs it feeds; fp32 gradients (weight_dtype float32) and no compute cores
    held by a collective (ICI DMA)."""
    import perfmodel as pm
    from perfmodel.spec.stack.profile import load_stack

    stack = load_stack("maxtext")
    assert stack.tp_comm_overlap and stack.grad_dtype == "fp32" and stack.host is None
    assert stack.overlap_share(load_hardware("tpu-v5p").accelerator) == 0.0
    plan = dict(gpus=256, tp=4, pp=1, micro_batch=1, global_batch=256, seq_len=4096, sequence_parallel=True, zero=3)
    on = pm.estimate("llama-3-70b", "tpu-v5p", {**plan, "stack": "maxtext"})
    off = pm.estimate("llama-3-70b", "tpu-v5p", {**plan, "stack": "maxtext", "tp_comm_overlap": False})
    tp = lambda e: next(c for c in e.comms if c.name == "tp activations")  # noqa: E731
    assert tp(on).total_s == pytest.approx(tp(off).total_s, rel=1e-9)  # the same traffic
    assert off.time_s.tp_comm > 0.75 * tp(off).total_s  # most of it exposed without the overlap
    assert on.time_s.tp_comm < 0.25 * tp(on).total_s and on.step_time_s < off.step_time_s


def _t048(**changes) -> pd.Series:
    """T048 of tpu_amd_runs_dev.csv (MaxText's tiering table: Llama 3.1 405B on v6e, 123 tokens/s per chip,
    config llama3_1_405b_8192_fsdp_dcn), the columns the mapping reads, with `changes`."""
    row = dict(row_id="T048", source_group="MaxText_tiering_doc", model="Llama-3.1-405B", n_layers=126, hidden=16384,
               ffn_hidden=53248, heads=128, kv_heads=8, vocab=128256, seq_len=8192, accelerator="TPU v6e Trillium",
               n_chips=256, tp=4, pp=1, dp=1, fsdp=None, cp=1, ep=1, micro_batch=1, global_batch=None,
               recompute="custom, decoder_layer_input/query/key/value/out_proj=offload", precision="bf16",
               framework="MaxText@5e6a7caff904 (config llama3_1_405b_8192_fsdp_dcn)", step_time_s=None,
               tokens_per_s_per_chip=123, tflops_per_chip=None, mfu_pct=38.55, source="", evidence="",
               notes="fsdp left empty: config gives ici_fsdp=64 x dcn_fsdp=2 (=128). CAVEAT: tiering table says "
                     "'256 Chips' but the linked config has ici_fsdp=64 x ici_tensor=4 (=256 per slice) AND "
                     "dcn_fsdp_parallelism=2, i.e. 2 slices / 512 chips",
               n_experts=None, top_k=None, trust="C", derived_fields="")
    return pd.Series({**row, **changes})


def test_a_maxtext_config_runs_on_the_chips_its_mesh_covers():
    """T048's config states ici_fsdp 64 x ici_tensor 4 per slice and dcn_fsdp 2: MaxText runs it only on 2 slices
    of 256 (max_utils.fill_unspecified_mesh_axes asserts the products), so 512 chips, fsdp 128, global batch
    1 x 512; the tokens per chip per step (8192) and so the measured step (8192 / 123 s) do not depend on it."""
    c = to_tpu_amd_case(_t048())
    p = c.plan
    assert (p.gpus, p.tp, p.dp, p.zero, p.micro_batch, p.global_batch) == (512, 4, 128, 3, 4, 512)
    assert (p.weight_dtype, p.moment_dtype, p.grad_dtype) == ("fp32", "fp32", "fp32")  # base.yml's float32
    assert c.note.startswith("n_chips 256 -> 512: the config's mesh")
    assert c.measured_s == pytest.approx(8192 / 123)
    # a row whose mesh and n_chips agree keeps its count; a stated fsdp column wins over the notes
    same = to_tpu_amd_case(_t048(n_chips=512))
    assert same.plan.gpus == 512 and "the config's mesh" not in same.note
    column = to_tpu_amd_case(_t048(fsdp=64))
    assert column.plan.gpus == 256 and column.plan.dp == 64


def test_weight_dtype_bf16_in_the_notes_is_bf16_state():
    """MaxText weight_dtype bfloat16: the parameters, their gradients and Adam's mu (inherits weight_dtype) and nu
    (always weight_dtype) in bf16: 2 + 2 + 4 B per parameter."""
    base = _t048(n_chips=512)
    for text in ("weight_dtype bf16", "weight_dtype=bfloat16", "weight_dtype: bfloat16"):
        p = to_tpu_amd_case(_t048(n_chips=512, notes=base["notes"] + "; " + text)).plan
        assert (p.weight_dtype, p.moment_dtype, p.grad_dtype) == ("bf16", "bf16", "bf16"), text
