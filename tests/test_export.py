"""`perfmodel.export`: plan files translated into Megatron-LM arguments, a torchtitan TOML and a DeepSpeed JSON.

Each test builds a plan file in memory, exports it and checks computed content: the degrees, batch arithmetic and
split of layers, and that every plan setting a framework cannot express is listed as not expressed.
"""

from __future__ import annotations

import json
import re

import pytest

from perfmodel.errors import InputError
from perfmodel.export.targets import TARGETS, export
from perfmodel.export.nearest import export_plan
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, default_stage_layers, resolve
from perfmodel.spec.plan.file import (
    OpPlacement,
    PlanFile,
    Prediction,
    check,
    load_plan_file,
    mesh_of,
    write_plan_file,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML checks need tomllib (3.11+)
    tomllib = None

PREDICTION = Prediction(step_time_s=12.5, tokens_per_s=671088.64, mfu=0.41, memory_bytes=60e9,
                        memory_capacity_bytes=80e9, fits_in_memory=True)
# The headline example: llama-3-70b on 512 H100s, tp=8 pp=4 vpp=2 dp=16, SP, ZeRO-1, selective recompute.
EXAMPLE = {"gpus": 512, "tp": 8, "pp": 4, "vpp": 2, "sequence_parallel": True, "zero": 1,
           "recompute": "selective", "global_batch": 1024, "micro_batch": 1, "seq_len": 8192}


def plan_file(model="llama-3-70b", hardware="dgx-h100", stage_layers=None, placements=(), **plan) -> PlanFile:
    m, h = load_model(model), load_hardware(hardware)
    p = resolve(Plan(**plan, stage_layers=stage_layers), m, h)
    layers = stage_layers or default_stage_layers(m.n_layers, p.pp)
    # placements may list only the operators a test is about: build the schema object without the plan-file
    # coverage check (export translates what it is given; tests/test_search_cli.py covers the checks)
    make = check if not placements else (lambda pf: pf)
    return make(PlanFile(version=1, model=m, hardware=h, plan=p, mesh=mesh_of(p), stage_layers=layers,
                          placements=list(placements), prediction=PREDICTION, created_by="tests"))


def megatron_args(text: str) -> list[str]:
    """The pretrain_gpt.py arguments: the continued lines after 'pretrain_gpt.py \\' up to '"$@"'."""
    lines = text.splitlines()
    start = lines.index("    pretrain_gpt.py \\") + 1
    end = lines.index('    "$@"')
    body = lines[start:end]
    assert all(line.startswith("    --") and line.endswith(" \\") for line in body), body
    return [line.strip().removesuffix(" \\") for line in body]


def megatron_not_expressed(text: str) -> list[str]:
    return [line.removeprefix("#   - ") for line in text.splitlines() if line.startswith("#   - ")]


def titan(pf: PlanFile, version: str = "0.2.2") -> str:
    """What `perfmodel export --to torchtitan --version` writes (a TOML for 0.2.2): the plan changed to the nearest
    one the version runs (titan_changed), re-predicted, and what the config still leaves out (titan_not_expressed)."""
    return export_plan(pf, "torchtitan", version)


def titan_changed(text: str) -> list[str]:
    """The plan changes a torchtitan export lists, each 'field old -> new: why'."""
    return [line.split("(then re-predicted): ", 1)[1] for line in text.splitlines()
            if line.startswith("# Plan changed for torchtitan")]


def titan_not_expressed(text: str) -> list[str]:
    return megatron_not_expressed(text)


def toml(text: str) -> dict:
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11+")
    return tomllib.loads(text)


def ds_config(pf: PlanFile) -> dict:
    return json.loads(export_plan(pf, "deepspeed"))


def flag(args: list[str], name: str) -> str | None:
    """Value of `--name value` (or '' for a bare switch; None when absent)."""
    hits = [a for a in args if a == name or a.startswith(name + " ")]
    assert len(hits) <= 1, hits
    return hits[0].removeprefix(name).strip() if hits else None


# ---------------------------------------------------------------------------------------------------------
# The target names
# ---------------------------------------------------------------------------------------------------------
def test_targets_and_unknown_target():
    assert TARGETS == ("megatron", "torchtitan", "deepspeed", "maxtext")
    pf = plan_file(**EXAMPLE)
    with pytest.raises(InputError) as err:
        export(pf, "x")
    assert str(err.value) == "--to = 'x' is not a known target; valid: megatron, torchtitan, deepspeed, maxtext"
    with pytest.raises(InputError):
        export(pf, "Megatron-LM")


# MaxText's pipeline runs GPipe's order, in which EXAMPLE's 64 micro-batches do not fit (tests/test_export_maxtext.py)
GPU_TARGETS = [t for t in TARGETS if t != "maxtext"]


def test_export_of_a_file_written_and_loaded(tmp_path):
    path = write_plan_file(plan_file(**EXAMPLE), tmp_path / "plan.json")
    for to in GPU_TARGETS:
        assert export_plan(load_plan_file(path), to) == export_plan(plan_file(**EXAMPLE), to)


# ---------------------------------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------------------------------
def test_megatron_example_arguments():
    text = export(plan_file(**EXAMPLE), "megatron")
    args = megatron_args(text)
    assert len(args) == len({a.split()[0] for a in args}), "an argument given twice"
    expect = {"--num-layers": "80", "--hidden-size": "8192", "--ffn-hidden-size": "28672",
              "--num-attention-heads": "64", "--group-query-attention": "", "--num-query-groups": "8",
              "--seq-length": "8192", "--max-position-embeddings": "8192", "--position-embedding-type": "rope",
              "--swiglu": "", "--normalization": "RMSNorm", "--untie-embeddings-and-output-weights": "",
              "--disable-bias-linear": "", "--attention-dropout": "0.0", "--hidden-dropout": "0.0",
              "--tensor-model-parallel-size": "8", "--pipeline-model-parallel-size": "4",
              "--num-layers-per-virtual-pipeline-stage": "10",  # 80 layers / (pp 4 x vpp 2)
              "--sequence-parallel": "", "--micro-batch-size": "1", "--global-batch-size": "1024",
              "--recompute-granularity": "selective", "--use-distributed-optimizer": "", "--bf16": "",
              "--attention-backend": "flash", "--accumulate-allreduce-grads-in-fp32": "",
              "--overlap-grad-reduce": "", "--overlap-param-gather": "",
              # 128256 = 2^8 * 501: 32 x tp 8 = 256 divides it, so Megatron adds no padding rows
              "--make-vocab-size-divisible-by": "32"}
    for name, value in expect.items():
        assert flag(args, name) == value, name
    for absent in ("--kv-channels", "--context-parallel-size", "--fp8-format", "--recompute-method", "--fp16",
                   "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--add-qkv-bias"):
        assert flag(args, absent) is None, absent
    # 512 GPUs at 8 per DGX node: 64 nodes
    assert "torchrun --nproc-per-node 8 --nnodes 64 " in text
    assert "64 micro-batches per step" in text  # 1024 / (1 x 16)
    assert megatron_not_expressed(text) == []
    assert "# Not expressed in Megatron-LM: nothing" in text


def test_megatron_model_shape_flags():
    gpt = megatron_args(export(plan_file("gpt3-175b", gpus=64, tp=8, pp=8, micro_batch=1, global_batch=64,
                                         seq_len=2048), "megatron"))
    assert flag(gpt, "--position-embedding-type") == "learned_absolute"
    assert flag(gpt, "--max-position-embeddings") == "2048"
    assert flag(gpt, "--normalization") == "LayerNorm"
    assert flag(gpt, "--attention-dropout") == flag(gpt, "--hidden-dropout") == "0.1"
    for absent in ("--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                   "--group-query-attention", "--sequence-parallel"):
        assert flag(gpt, absent) is None, absent
    # llama-3-8b with rope: max positions cover a sequence longer than the trained length
    long = megatron_args(export(plan_file("llama-3-8b", gpus=8, tp=8, micro_batch=1, global_batch=8,
                                          seq_len=16384), "megatron"))
    assert flag(long, "--max-position-embeddings") == "16384"


def test_megatron_recompute_full_and_precisions():
    args = megatron_args(export(plan_file("llama-3-8b", gpus=16, tp=2, micro_batch=2, global_batch=64, seq_len=4096,
                                          recompute="full", precision="fp8"), "megatron"))
    assert flag(args, "--recompute-granularity") == "full"
    assert flag(args, "--recompute-method") == "uniform"
    assert flag(args, "--recompute-num-layers") == "1"
    assert flag(args, "--fp8-format") == "hybrid" and flag(args, "--bf16") == ""
    assert flag(args, "--use-distributed-optimizer") is None  # zero = 0
    assert flag(args, "--overlap-param-gather") is None and flag(args, "--overlap-grad-reduce") == ""
    fp16 = megatron_args(export(plan_file("llama-3-8b", gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=4096,
                                          precision="fp16", attention="unfused", overlap_dp_comm=False), "megatron"))
    assert flag(fp16, "--fp16") == "" and flag(fp16, "--bf16") is None
    assert flag(fp16, "--attention-backend") == "unfused"
    assert flag(fp16, "--overlap-grad-reduce") is None


def test_megatron_context_parallel():
    text = export(plan_file(gpus=128, tp=8, pp=4, cp=2, micro_batch=1, global_batch=64, seq_len=8192,
                            sequence_parallel=True), "megatron")
    args = megatron_args(text)
    assert flag(args, "--context-parallel-size") == "2"
    assert "64 micro-batches" not in text and "= 32 micro-batches per step" in text  # dp = 128 / 64 = 2


@pytest.mark.parametrize("layers, expect", [
    ([17, 21, 21, 21], {"--decoder-first-pipeline-num-layers": "17"}),
    ([21, 21, 21, 17], {"--decoder-last-pipeline-num-layers": "17"}),
    ([18, 21, 21, 20], {"--decoder-first-pipeline-num-layers": "18", "--decoder-last-pipeline-num-layers": "20"}),
])
def test_megatron_uneven_first_last_stage(layers, expect):
    text = export(plan_file(gpus=512, tp=8, pp=4, zero=1, micro_batch=1, global_batch=1024, seq_len=8192,
                            stage_layers=layers), "megatron")
    args = megatron_args(text)
    for name in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"):
        assert flag(args, name) == expect.get(name), name
    assert megatron_not_expressed(text) == []


def test_megatron_uneven_middle_stages_as_a_layout():
    pf = plan_file(gpus=512, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192, sequence_parallel=True,
                   recompute="full", stage_layers=[20, 19, 21, 20])
    text = export(pf, "megatron", "core_r0.16")
    assert "--decoder-first-pipeline-num-layers" not in text
    # one entry per stage: the embedding before the first's 20 layers, the loss after the last's
    want = "|".join(["E" + "t" * 20, "t" * 19, "t" * 21, "t" * 20 + "L"])
    assert flag(megatron_args(text), "--pipeline-model-parallel-layout") == want
    assert megatron_not_expressed(text) == []
    # core_r0.12 has no layout: the nearest split it writes, first and last 20 and the middle even (80 = 20 + 2 x 20
    # + 20), re-predicted
    with pytest.raises(InputError, match="cannot run it as planned"):
        export(pf, "megatron", "core_r0.12")
    text = export_plan(pf, "megatron", "core_r0.12")
    assert "# Plan changed to the nearest one core_r0.12 runs: stage_layers [20, 19, 21, 20] -> first stage 20, " \
           "last 20" in text
    assert "re-predicted for the plan exported: step" in text


def test_megatron_uneven_chunks_with_vpp_as_a_layout():
    pf = plan_file(gpus=512, tp=8, pp=4, vpp=2, micro_batch=1, global_batch=1024, seq_len=8192,
                   sequence_parallel=True, recompute="full", stage_layers=[19, 21, 21, 19])
    args = megatron_args(export(pf, "megatron"))
    assert flag(args, "--num-layers-per-virtual-pipeline-stage") is None
    # stage 0's 19 layers become chunks 10 and 9; model order c*pp + r: [10, 11, 11, 10, 9, 10, 10, 9]
    chunks = [10, 11, 11, 10, 9, 10, 10, 9]
    want = "|".join(("E" if i == 0 else "") + "t" * n + ("L" if i == 7 else "") for i, n in enumerate(chunks))
    assert flag(args, "--pipeline-model-parallel-layout") == want
    text = export_plan(pf, "megatron", "core_r0.12")
    assert "vpp 2 -> 1: the chunks [10, 11, 11, 10, 9, 10, 10, 9] differ in size" in text
    # without interleaving the stage split itself is still carried: first and last stage 19, middle 21
    args = megatron_args(text)
    assert flag(args, "--decoder-first-pipeline-num-layers") == flag(args, "--decoder-last-pipeline-num-layers") == "19"


@pytest.mark.parametrize("settings, change", [
    ({"schedule": "gpipe"}, "schedule gpipe -> 1f1b: Megatron-LM has no GPipe schedule"),
    ({"zero": 2}, "zero 2 -> 1 (distributed optimizer)"),
    ({"grad_dtype": "bf16"}, "grad_dtype bf16 -> fp32:"),
    ({"recompute": "per-op"}, "recompute per-op -> selective [core_attn]"),
])
def test_megatron_changes_what_it_cannot_run(settings, change):
    pf = plan_file("llama-3-8b", gpus=64, tp=4, pp=2, micro_batch=1, global_batch=128, seq_len=4096, **settings)
    with pytest.raises(InputError, match="cannot run it as planned"):
        export(pf, "megatron")
    text = export_plan(pf, "megatron")
    changes = [ln for ln in text.splitlines() if ln.startswith("# Plan changed")]
    assert len(changes) == 2 and change in changes[0] and "re-predicted" in changes[1], changes
    assert megatron_not_expressed(text) == []


@pytest.mark.parametrize("zero, strategy", [(2, "optim_grads"), (3, "optim_grads_params")])
def test_megatron_zero_2_3_as_megatron_fsdp(zero, strategy):
    pf = plan_file("llama-3-8b", gpus=64, tp=4, micro_batch=1, global_batch=128, seq_len=4096, zero=zero)
    text = export(pf, "megatron")
    args = megatron_args(text)
    assert flag(args, "--use-megatron-fsdp") == "" and flag(args, "--data-parallel-sharding-strategy") == strategy
    assert flag(args, "--ckpt-format") == "fsdp_dtensor" and flag(args, "--use-distributed-optimizer") == ""
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text and "CUDA_DEVICE_MAX_CONNECTIONS=1" not in text
    old = megatron_args(export(pf, "megatron", "core_r0.12"))
    assert flag(old, "--use-custom-fsdp") == "" and flag(old, "--use-megatron-fsdp") is None


def test_megatron_environment():
    # tp or cp > 1 needs one CUDA queue; tp = cp = 1 sets nothing
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in export(plan_file(**EXAMPLE), "megatron")
    dp_only = export(plan_file("llama-3-8b", gpus=16, zero=1, micro_batch=1, global_batch=64, seq_len=4096),
                     "megatron")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in dp_only


def test_megatron_fp4_and_vocab_padding_and_hardware_notes():
    pf = plan_file("gpt3-175b", "gb200-nvl72", gpus=144, tp=8, pp=6, micro_batch=1, global_batch=96,
                   seq_len=2048, precision="fp4")
    text = export(pf, "megatron")
    assert flag(megatron_args(text), "--fp4-format") == "e2m1"
    assert "precision fp4 -> fp8: core_r0.12 has no FP4 GEMM recipe" in export_plan(pf, "megatron", "core_r0.12")
    notes = megatron_not_expressed(text)
    # 50257 is odd: no divisor avoids padding; ceil(50257 / 8) * 8 = 50264
    assert any(n.startswith("vocab = 50257 is padded by Megatron-LM to 50264") for n in notes)
    # NVLink domain of 72 > 8: 8 per node, 144 / 8 = 18 nodes, and say so
    assert "--nproc-per-node 8 --nnodes 18 " in text
    assert any(n.startswith("devices per node assumed 8") for n in notes)
    tpu = export(plan_file("gpt2-124m", "tpu-v5p", gpus=8, micro_batch=1, global_batch=8, seq_len=1024), "megatron")
    assert any("is a TPU system" in n for n in megatron_not_expressed(tpu))


# ---------------------------------------------------------------------------------------------------------
# Placements
# ---------------------------------------------------------------------------------------------------------
R, S0, S1, S2, P = "Replicate()", "Shard(0)", "Shard(1)", "Shard(2)", "Partial()"


def megatron_placements(layers=(0, 79)) -> list[OpPlacement]:
    """Megatron's pattern with sequence parallelism over (dp, cp, tp) for a few operators."""
    return [
        OpPlacement(op="embedding", split={"batch": ["dp"], "vocab": ["tp"]}, input=[S0, R, R], output=[S0, R, S1],
                    weight=[R, R, S0], style="vocab"),
        OpPlacement(op="norm1", layers=layers, split={"batch": ["dp"], "seq": ["tp"]}, input=[S0, R, S1],
                    output=[S0, R, S1], weight=[R, R, R], style="sequence"),
        OpPlacement(op="qkv", layers=layers, split={"batch": ["dp"], "heads": ["tp"]}, input=[S0, R, S1],
                    output=[S0, R, S2], weight=[R, R, S0], style="colwise"),
        OpPlacement(op="attention", layers=layers, split={"batch": ["dp"], "heads": ["tp"]}, input=[S0, R, S2],
                    output=[S0, R, S2]),
        OpPlacement(op="out_proj", layers=layers, split={"batch": ["dp"], "heads": ["tp"]}, input=[S0, R, S2],
                    output=[S0, R, S1], weight=[R, R, S1], style="rowwise"),
        OpPlacement(op="residual1", layers=layers, split={"batch": ["dp"], "seq": ["tp"]}, input=[S0, R, S1],
                    output=[S0, R, S1]),
        OpPlacement(op="lm_head", split={"batch": ["dp"], "vocab": ["tp"]}, input=[S0, R, S1], output=[S0, R, S2],
                    weight=[R, R, S0], style="colwise"),
        OpPlacement(op="loss", split={"batch": ["dp"], "vocab": ["tp"]}, input=[S0, R, S2], output=[P, R, P]),
    ]


def test_megatron_pattern_placements_say_nothing():
    pf = plan_file(placements=megatron_placements(), **EXAMPLE)
    assert megatron_not_expressed(export(pf, "megatron")) == []
    assert not any("placement" in n for n in titan_not_expressed(titan(pf)))


def test_deviating_placements_are_listed():
    odd = OpPlacement(op="qkv", layers=(0, 3), split={"batch": ["dp"], "hidden": ["tp"]}, input=[S0, R, S2],
                      output=[S0, R, P], weight=[R, R, S1], style="rowwise")
    odd_norm = OpPlacement(op="final_norm", split={"batch": ["dp"]}, input=[S0, R, R], output=[S0, R, R],
                           weight=[R, R, R])
    pf = plan_file(placements=[*megatron_placements(), odd, odd_norm], **EXAMPLE)
    notes = megatron_not_expressed(export(pf, "megatron"))
    assert len(notes) == 2
    assert notes[0].startswith("per-operator placement of layers 0-3 qkv (weight Shard(1) on tp, style rowwise; "
                               "expected colwise: weight Shard(0) on tp) is not Megatron's pattern")
    assert notes[1].startswith("per-operator placement of final_norm (output Replicate() on tp; expected Shard(1) "
                               "on tp (sequence parallel))")
    titan_notes = titan_not_expressed(titan(pf))
    assert sum("per-operator placement of layers 0-3 qkv" in n for n in titan_notes) == 1
    ds = ds_config(pf)["_perfmodel_not_expressed"]
    assert sum("per-operator placement of layers 0-3 qkv" in n for n in ds) == 1


def test_placements_checked_only_on_axes_larger_than_one():
    # tp = 1: any tp entry is the same layout; the batch must still be split over dp
    tp1 = [OpPlacement(op="qkv", layers=(0, 31), split={"batch": ["dp"]}, input=[S0, R, R], output=[S0, R, R],
                       weight=[R, R, S1], style="rowwise"),
           OpPlacement(op="mlp_in", layers=(0, 31), split={}, input=[R, R, R], output=[R, R, R], weight=[R, R, R])]
    pf = plan_file("llama-3-8b", gpus=8, micro_batch=1, global_batch=8, seq_len=4096, placements=tp1)
    (note,) = megatron_not_expressed(export(pf, "megatron"))
    assert note.startswith("per-operator placement of layers 0-31 mlp_in (output Replicate() on dp; expected batch "
                           "Shard(0) on dp)")


# ---------------------------------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------------------------------
def test_torchtitan_example():
    text = titan(plan_file(**EXAMPLE))
    cfg = toml(text)
    assert cfg["model"] == {"name": "llama3", "flavor": "70B"}
    assert cfg["training"] == {"local_batch_size": 64, "global_batch_size": 1024, "seq_len": 8192,
                               "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}
    par = cfg["parallelism"]
    assert par["data_parallel_replicate_degree"] == 1 and par["data_parallel_shard_degree"] == 16
    assert par["tensor_parallel_degree"] == 8 and par["pipeline_parallel_degree"] == 4
    assert par["context_parallel_degree"] == 1 and par["enable_async_tensor_parallel"] is False
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_microbatch_size"] == 1
    assert par["fsdp_reshard_after_forward"] == "never"
    # 1 * 16 * 1 * 8 * 4 = 512 processes
    world = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] *
             par["context_parallel_degree"] * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"])
    assert world == 512
    parts = par["module_fqns_per_model_part"]
    assert len(parts) == 8 and [len([x for x in p if x.startswith("layers.")]) for p in parts] == [10] * 8
    assert parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[-1][-3:] == ["layers.79", "norm", "output"]
    assert [f"layers.{i}" for i in range(80)] == [x for p in parts for x in p if x.startswith("layers.")]
    assert cfg["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert "quantize" not in cfg
    zero, recompute, _ = titan_changed(text)  # nearest_plan changes both (zero 2, per-op), then re-predicts
    assert zero.startswith("zero 1 -> 2: torchtitan's FSDP2 shards gradients together with the optimizer state")
    assert recompute.startswith("recompute selective (core_attn) -> per-op: torchtitan checkpoints whole blocks")
    assert titan_not_expressed(text) == []
    assert "--nproc-per-node 8 --nnodes 64" in text


@pytest.mark.parametrize("zero, replicate, shard, reshard", [
    (0, 1, 16, "never"), (1, 1, 16, "never"), (2, 1, 16, "never"), (3, 1, 16, "always")])
def test_torchtitan_zero_stages(zero, replicate, shard, reshard):
    text = titan(plan_file(gpus=512, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192,
                            sequence_parallel=True, zero=zero))
    par = toml(text)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (replicate, shard)
    assert par["fsdp_reshard_after_forward"] == reshard
    assert par["pipeline_parallel_schedule"] == "1F1B"
    assert len(par["module_fqns_per_model_part"]) == 4
    changes = [c.split(":")[0] for c in titan_changed(text) if c.startswith("zero")]
    assert changes == {0: ["zero 0 -> 2 with tp=8, pp=4"], 1: ["zero 1 -> 2"]}.get(zero, [])
    assert titan_not_expressed(text) == []


def test_torchtitan_plain_data_parallel_replicates():
    text = titan(plan_file("llama-3-8b", gpus=32, micro_batch=1, global_batch=128, seq_len=4096))
    par = toml(text)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (32, 1)
    assert par["fsdp_reshard_after_forward"] == "default"
    assert toml(text)["training"]["local_batch_size"] == 1 and "gradient accumulation 4" in text
    assert titan_not_expressed(text) == []


def test_torchtitan_without_pp_accumulates_gradients():
    text = titan(plan_file("llama-3-8b", gpus=64, tp=8, micro_batch=2, global_batch=256, seq_len=8192,
                            recompute="full", zero=3, sequence_parallel=True))
    cfg = toml(text)
    # no pipeline: local batch = micro-batch, torchtitan accumulates 256 / (2 * 8) = 16 steps
    assert cfg["training"]["local_batch_size"] == 2 and cfg["training"]["global_batch_size"] == 256
    assert "gradient accumulation 16" in text
    assert cfg["parallelism"]["pipeline_parallel_degree"] == 1
    assert "pipeline_parallel_schedule" not in cfg["parallelism"]
    assert cfg["activation_checkpoint"] == {"mode": "full"}
    assert cfg["model"] == {"name": "llama3", "flavor": "8B"}


def test_torchtitan_lists_what_it_cannot_express():
    pf = plan_file("gpt3-2.7b", gpus=64, tp=4, pp=2, cp=2, micro_batch=1, global_batch=64, seq_len=2048,
                   schedule="gpipe", precision="fp8", grad_dtype="bf16", attention="unfused", overlap_dp_comm=False)
    text = titan(pf)
    cfg = toml(text)
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "GPipe"
    assert cfg["parallelism"]["context_parallel_degree"] == 2
    # zero = 0 with tp/pp/cp: no DDP on a multi-dimensional mesh in torchtitan, FSDP2 over dp = 64 / 16 instead
    assert cfg["parallelism"]["data_parallel_shard_degree"] == 4
    # torchtitan 0.2.2 names the converter quantize.linear.float8 (mid-2025: "float8" and a [float8] table)
    assert cfg["model"]["converters"] == ["quantize.linear.float8"] and "float8" in cfg["quantize"]["linear"]
    assert cfg["model"]["flavor"] == "8B"  # nearest llama3 flavor to hidden 2560
    keys = [n.split(":")[0] for n in titan_not_expressed(text)]
    for key in ("model shape of gpt3-2.7b (n_layers=32 hidden=2560 n_heads=32 n_kv_heads=32 ffn_hidden=10240)",
                "mlp=gelu (llama3 is SwiGLU)", "norm=layernorm (llama3 uses RMSNorm)",
                "position=learned (llama3 uses RoPE)", "tie_embeddings=True (llama3 unties embedding and output)",
                "linear_bias=all (llama3 has no biases)"):
        assert key in keys, key
    changes = [c.split(":")[0] for c in titan_changed(text)]
    for change in ("zero 0 -> 2 with tp=4, pp=2, cp=2", "sequence_parallel false -> true with tp=4",
                   "overlap_dp_comm false -> true", "grad_dtype bf16 -> fp32", "attention unfused -> flash"):
        assert change in changes, (change, changes)
    assert "flavor 8B is approximate" in text


# ---------------------------------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------------------------------
# DeepSpeed's pipeline runs 1F1B with one chunk per stage and reduces after the last micro-batch: the example
# as DeepSpeed expresses it (nearest_plan changes vpp and overlap_dp_comm, tested below)
DS_EXAMPLE = EXAMPLE | {"vpp": 1, "overlap_dp_comm": False}


def test_deepspeed_example():
    cfg = ds_config(plan_file(**DS_EXAMPLE))
    assert cfg["train_batch_size"] == 1024 and cfg["train_micro_batch_size_per_gpu"] == 1
    assert cfg["gradient_accumulation_steps"] == 1024 // (16 * 1) == 64
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 16
    assert cfg["zero_optimization"] == {"stage": 1, "overlap_comm": False}
    assert cfg["bf16"] == {"enabled": True} and "fp16" not in cfg
    assert cfg["communication_data_type"] == "fp32" and cfg["data_types"] == {"grad_accum_dtype": "fp32"}
    assert "tensor_parallel" not in cfg and "activation_checkpointing" not in cfg
    assert "DeepSpeed 0.19.8 config JSON (deepspeed==0.19.8" in cfg["_perfmodel_keys"]
    notes = cfg["_perfmodel_not_expressed"]
    assert list(cfg)[-1] == "_perfmodel_not_expressed"
    starts = [n.split(":")[0] for n in notes]
    for key in ("recompute=selective", "DeepSpeed has no tensor parallelism without Megatron-DeepSpeed",
                "pp=4", "sequence_parallel=True", "dp=16 is implied, not set"):
        assert key in starts, key
    assert any("tp=8 not expressed" in n for n in notes)
    launch = cfg["_perfmodel_launch"]
    assert "--num_nodes 64 --num_gpus 8" in launch["command"]
    assert "--nnodes 64 --nproc_per_node 8" in launch["torchrun"]
    assert launch["pip"] == "pip install deepspeed==0.19.8"
    # the pipeline's mpu: PipelineModule's topology with tp ranks as its model axis, 512 / (4 x 8) = 16 data ranks
    assert (launch["world_size"], launch["pipeline_stages"], launch["model_parallel_size"]) == (512, 4, 8)
    assert "PipeModelDataParallelTopology(num_pp=4, num_mp=8, num_dp=16)" in launch["mpu"]
    assert launch["env"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_deepspeed_zero3_full_recompute():
    cfg = ds_config(plan_file("llama-3-8b", gpus=64, micro_batch=2, global_batch=512, seq_len=4096, zero=3,
                              recompute="full", grad_dtype="bf16", precision="fp16"))
    assert cfg["zero_optimization"] == {"stage": 3, "overlap_comm": True, "contiguous_gradients": True}
    assert cfg["gradient_accumulation_steps"] == 512 // (64 * 2) == 4
    assert cfg["fp16"]["enabled"] is True and "bf16" not in cfg
    assert cfg["communication_data_type"] == "bf16"
    assert cfg["activation_checkpointing"]["partition_activations"] is False  # tp = 1
    notes = cfg["_perfmodel_not_expressed"]
    assert not any(n.startswith("dp=") for n in notes)  # plain data parallelism: DeepSpeed's world is dp
    assert any(n.startswith("recompute=full") for n in notes)
    assert cfg["_perfmodel_launch"]["mpu"].startswith("none")


@pytest.mark.parametrize("version", ["0.19.8", "0.16.9"])
def test_deepspeed_autotp_without_pipeline(version):
    pf = plan_file("llama-3-8b", gpus=16, tp=4, micro_batch=1, global_batch=32, seq_len=4096, zero=2,
                   sequence_parallel=True)
    cfg = json.loads(export(pf, "deepspeed", version))
    assert cfg["tensor_parallel"] == {"autotp_size": 4}
    assert cfg["gradient_accumulation_steps"] == 32 // (1 * 4) == 8  # dp = 16 / 4
    # no mpu with AutoTP: DeepSpeedConfig's batch check multiplies by all 16 ranks, so 4 x the distinct samples
    assert cfg["train_batch_size"] == 1 * 8 * 16 == 4 * 32
    notes = cfg["_perfmodel_not_expressed"]
    assert any(n.startswith("tp=4 is only partly expressed") and "Megatron-DeepSpeed" in n for n in notes)
    assert any(n.startswith("train_batch_size = 128 = micro 1 x accumulation 8 x 16 ranks") for n in notes)
    assert not any(n.startswith("dp=") for n in notes)
    assert "data_parallel_size" not in cfg["_perfmodel_launch"]


def test_deepspeed_autotp_with_zero3_by_version():
    # 0.16.9's _configure_tensor_parallel_states asserts ZeRO <= 2; 0.19.8 runs AutoTP with ZeRO-3
    pf = plan_file("llama-3-8b", gpus=16, tp=4, micro_batch=1, global_batch=32, seq_len=4096, zero=3)
    new, old = (json.loads(export(pf, "deepspeed", v)) for v in ("0.19.8", "0.16.9"))
    assert new["tensor_parallel"] == {"autotp_size": 4} and new["train_batch_size"] == 128
    assert "tensor_parallel" not in old and old["train_batch_size"] == 32
    assert old["_perfmodel_launch"]["data_parallel_size"] == 4  # Megatron-DeepSpeed's mpu carries tp
    assert any("tp=4 not expressed" in n and "ZeRO-3" in n for n in old["_perfmodel_not_expressed"])


@pytest.mark.parametrize("settings, version, updates, starts", [
    ({"pp": 2, "zero": 2}, "0.19.8", {"zero": 1, "overlap_dp_comm": False}, "zero 2 -> 1: DeepSpeed 0.19.8's "
     "PipelineEngine asserts ZeRO stage < 2"),
    ({"pp": 2, "schedule": "gpipe"}, "0.16.9", {"schedule": "1f1b", "overlap_dp_comm": False},
     "schedule gpipe -> 1f1b"),
    ({"pp": 2, "vpp": 2}, "0.16.9", {"vpp": 1, "overlap_dp_comm": False},
     "vpp 2 -> 1: DeepSpeed 0.16.9's PipelineEngine runs only its TrainSchedule"),
    # ZeRO-0's optimizer wrappers: 0.19.8 wants grad_accum_dtype = the weights' dtype, 0.16.9 fp32 under bf16
    ({"zero": 0}, "0.19.8", {"zero": 1}, "zero 0 -> 1: DeepSpeed 0.19.8's _do_optimizer_sanity_check"),
    ({"zero": 0}, "0.16.9", {"overlap_dp_comm": False}, "overlap_dp_comm true -> false"),
    ({"zero": 0, "grad_dtype": "bf16"}, "0.19.8", {"overlap_dp_comm": False}, "overlap_dp_comm true -> false"),
    ({"zero": 0, "grad_dtype": "bf16"}, "0.16.9", {"zero": 1}, "zero 0 -> 1: DeepSpeed 0.16.9's"),
    ({"zero": 0, "precision": "fp16"}, "0.16.9", {"zero": 1}, "zero 0 -> 1"),
    ({"grad_compression": "powersgd", "zero": 0, "grad_dtype": "bf16"}, "0.19.8",
     {"grad_compression": "none", "overlap_dp_comm": False}, "grad_compression powersgd -> none"),
    ({"cp": 2}, "0.19.8", {}, None),
    ({"precision": "fp8"}, "0.19.8", {}, None),
])
def test_deepspeed_nearest_plan(settings, version, updates, starts):
    from perfmodel.export.deepspeed import nearest_plan
    plan = {"gpus": 32, "micro_batch": 1, "global_batch": 64, "seq_len": 4096, "zero": 1} | settings
    got, why = nearest_plan(plan_file("llama-3-8b", **plan), version)
    assert got == updates and len(why) == len(updates)
    assert starts is None or any(w.startswith(starts) for w in why), why


@pytest.mark.parametrize("settings, starts", [
    ({"cp": 2}, "cp=2"),
    ({"precision": "fp8"}, "precision=fp8"),
])
def test_deepspeed_lists_what_it_cannot_express(settings, starts):
    plan = {"gpus": 32, "micro_batch": 1, "global_batch": 64, "seq_len": 4096, "zero": 1} | settings
    notes = ds_config(plan_file("llama-3-8b", **plan))["_perfmodel_not_expressed"]
    assert any(n.startswith(starts) for n in notes), notes


def test_deepspeed_export_refuses_what_the_version_cannot_run_and_records_changes():
    pf = plan_file("llama-3-8b", gpus=32, micro_batch=1, global_batch=64, seq_len=4096, pp=2, zero=2)
    with pytest.raises(InputError, match="PipelineEngine asserts ZeRO stage < 2"):
        export(pf, "deepspeed", "0.16.9")
    cfg = json.loads(export_plan(pf, "deepspeed", "0.16.9"))
    assert cfg["zero_optimization"]["stage"] == 1
    assert cfg["_perfmodel_changed"][0].startswith("zero 2 -> 1: DeepSpeed 0.16.9's PipelineEngine")
    assert cfg["_perfmodel_changed"][-1].startswith("re-predicted for the plan exported")


# ---------------------------------------------------------------------------------------------------------
# Every target
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("to", GPU_TARGETS)
def test_header_names_the_plan_and_versions(to):
    text = export_plan(plan_file(**EXAMPLE), to)  # changed to what each runs: the layout stays tp 8 pp 4
    assert "llama-3-70b on dgx-h100 (512 x H100-SXM5-80GB), tp=8 pp=4 dp=16 cp=1" in text
    assert {"megatron": "Megatron-LM core_r0.16", "torchtitan": "torchtitan 0.3.0", "deepspeed": "0.19.8"}[to] in text
    if to == "megatron":  # Megatron runs the plan as planned: the file's prediction
        assert re.search(r"MFU 41\.0%", text)
    assert text.endswith("\n")
