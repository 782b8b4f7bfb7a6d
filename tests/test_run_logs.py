"""Training logs -> published-runs rows (`perfmodel.calibrate.runs.logs`), on snippets printed as the frameworks print them.

Megatron-LM: `_print_args` (megatron/training/arguments.py: '  name ' + '.' * (48 - len(name)) + ' value', sorted)
and `training_log` (megatron/training/training.py). torchtitan: the step line of torchtitan/train.py with its
colour codes, under torchrun's '[rank0]:' and torchtitan's '[titan] time - root - INFO - ' prefixes.
Expected values are worked out by hand in the comments.
"""

from pathlib import Path

import pandas as pd
import pytest

from perfmodel.calibrate.runs.logs import (
    parse_megatron_log,
    parse_torchtitan_log,
    runs_from_logs,
)
from perfmodel.errors import InputError

DEV_CSV = Path(__file__).parents[1] / "benchmarks" / "data" / "published_runs_dev.csv"

# Megatron-Core 2024, Llama-3-8B-like: GQA, fp8 hybrid, TP2 x PP2 (interleaved) x CP2 x DP8 on 64 GPUs.
MEGATRON_CORE = """\
using world size: 64, data-parallel size: 8, context-parallel size: 2, tensor-model-parallel size: 2, \
pipeline-model-parallel size: 2
------------------------ arguments ------------------------
  accumulate_allreduce_grads_in_fp32 .............. True
  bf16 ............................................ True
  context_parallel_size ........................... 2
  data_parallel_size .............................. 8
  data_path ....................................... ['/data/fineweb_text_document']
  ffn_hidden_size ................................. 14336
  fp16 ............................................ False
  fp8 ............................................. hybrid
  global_batch_size ............................... 128
  group_query_attention ........................... True
  hidden_size ..................................... 4096
  log_interval .................................... 10
  lr .............................................. 0.0003
  micro_batch_size ................................ 1
  normalization ................................... RMSNorm
  num_attention_heads ............................. 32
  num_layers ...................................... 32
  num_layers_per_virtual_pipeline_stage ........... 4
  num_query_groups ................................ 8
  pipeline_model_parallel_size .................... 2
  position_embedding_type ......................... rope
  rank ............................................ 0
  recompute_granularity ........................... selective
  recompute_method ................................ None
  seq_length ...................................... 8192
  sequence_parallel ............................... True
  swiglu .......................................... True
  tensor_model_parallel_size ...................... 2
  tokenizer_type .................................. HuggingFaceTokenizer
  train_iters ..................................... 500
  use_distributed_optimizer ....................... True
  virtual_pipeline_model_parallel_size ............ 4
  vocab_size ...................................... None
  world_size ...................................... 64
-------------------- end of arguments ---------------------
> building HuggingFaceTokenizer tokenizer ...
 > padded vocab (size: 128256) with 0 dummy tokens (new size: 128256)
 [2024-05-01 10:00:10] iteration       10/     500 | consumed samples:         1280 | elapsed time per iteration (ms): 9876.5 | throughput per GPU (TFLOP/s/GPU): 203.1 | learning rate: 6.000000E-06 | global batch size:   128 | lm loss: 9.500000E+00 | loss scale: 1.0 | grad norm: 1.500 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-05-01 10:02:11] iteration       20/     500 | consumed samples:         2560 | elapsed time per iteration (ms): 5012.3 | throughput per GPU (TFLOP/s/GPU): 400.2 | learning rate: 1.200000E-05 | global batch size:   128 | lm loss: 9.100000E+00 | loss scale: 1.0 | grad norm: 1.400 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-05-01 10:04:12] iteration       30/     500 | consumed samples:         3840 | elapsed time per iteration (ms): 5003.1 | throughput per GPU (TFLOP/s/GPU): 400.9 | learning rate: 1.800000E-05 | global batch size:   128 | lm loss: 8.700000E+00 | loss scale: 1.0 | grad norm: 1.300 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-05-01 10:06:13] iteration       40/     500 | consumed samples:         5120 | elapsed time per iteration (ms): 4998.7 | throughput per GPU (TFLOP/s/GPU): 401.3 | learning rate: 2.400000E-05 | global batch size:   128 | lm loss: 8.300000E+00 | loss scale: 1.0 | grad norm: 1.200 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-05-01 10:08:14] iteration       50/     500 | consumed samples:         6400 | elapsed time per iteration (ms): 5020.0 | throughput per GPU (TFLOP/s/GPU): 399.6 | learning rate: 3.000000E-05 | global batch size:   128 | lm loss: 7.900000E+00 | loss scale: 1.0 | grad norm: 1.100 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""

# Older Megatron-LM, GPT-3 style, fp16, through `torchrun --tee` (every line prefixed); the dump has no
# data_parallel_size or context_parallel_size, so dp = 32 / (4*2*1) = 4.
MEGATRON_OLD = """\
[default0]:------------------------ arguments ------------------------
[default0]:  bf16 ............................................ False
[default0]:  ffn_hidden_size ................................. 8192
[default0]:  fp16 ............................................ True
[default0]:  global_batch_size ............................... 512
[default0]:  group_query_attention ........................... False
[default0]:  hidden_size ..................................... 2048
[default0]:  loss_scale ...................................... None
[default0]:  micro_batch_size ................................ 4
[default0]:  num_attention_heads ............................. 16
[default0]:  num_layers ...................................... 24
[default0]:  num_layers_per_virtual_pipeline_stage ........... None
[default0]:  num_query_groups ................................ 1
[default0]:  pipeline_model_parallel_size .................... 2
[default0]:  recompute_granularity ........................... full
[default0]:  recompute_method ................................ uniform
[default0]:  seq_length ...................................... 2048
[default0]:  sequence_parallel ............................... False
[default0]:  tensor_model_parallel_size ...................... 4
[default0]:  tokenizer_type .................................. GPT2BPETokenizer
[default0]:  use_distributed_optimizer ....................... False
[default0]:  virtual_pipeline_model_parallel_size ............ None
[default0]:  vocab_size ...................................... None
[default0]:  world_size ...................................... 32
[default0]:-------------------- end of arguments ---------------------
[default0]: > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)
[default0]: [2021-03-01 08:00:00] iteration      100/   10000 | consumed samples:        51200 | elapsed time per iteration (ms): 2500.0 | learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 7.000000E+00 | loss scale: 65536.0 | grad norm: 0.900 | number of skipped iterations:   0 | number of nan iterations:   0 |
[default0]: [2021-03-01 08:01:00] iteration      200/   10000 | consumed samples:       102400 | elapsed time per iteration (ms): 1200.4 | learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 6.500000E+00 | loss scale: 65536.0 | grad norm: 0.900 | number of skipped iterations:   0 | number of nan iterations:   0 |
[default0]: [2021-03-01 08:02:00] iteration      300/   10000 | consumed samples:       153600 | elapsed time per iteration (ms): 1210.6 | learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 6.000000E+00 | loss scale: 65536.0 | grad norm: 0.900 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""

P = "[rank0]:[titan] 2025-03-01 10:00:{:02d},123 - root - INFO - "
R, G, Y, B, C, M, X = (f"\x1b[{n}m" for n in (31, 32, 33, 34, 36, 35, 39))


def titan_step(step, loss, mem, pct, tps, tflops, mfu):
    """torchtitan/train.py's step line, colour codes included."""
    return (P.format(step % 60) + f"{R}step: {step:2}  {G}loss: {loss:7.4f}  {Y}memory: {mem:5.2f}GiB({pct:.2f}%)  "
            f"{B}tps: {round(tps):,}  {C}tflops: {tflops:,.2f}  {M}mfu: {mfu:.2f}%{X}")


# Llama 3 70B, TP8 x FSDP(-1) on 64 H100s, config dumped with --job.print_args.
TITAN_DUMP = "\n".join([
    P.format(0) + "Starting job: Llama 3 70B training",
    P.format(0) + "Running with args: {'job': {'config_file': './train_configs/llama3_70b.toml', 'dump_folder': "
    "'./outputs', 'description': 'Llama 3 70B training', 'print_args': True}, 'model': {'name': 'llama3', "
    "'flavor': '70B', 'tokenizer_path': './assets/tokenizer/original/tokenizer.model', 'converters': []}, "
    "'training': {'local_batch_size': 2, 'global_batch_size': -1, 'seq_len': 8192, 'max_norm': 1.0, "
    "'steps': 1000, 'mixed_precision_param': 'bfloat16', 'mixed_precision_reduce': 'float32', "
    "'compile': False}, 'parallelism': {'data_parallel_replicate_degree': 1, 'data_parallel_shard_degree': -1, "
    "'fsdp_reshard_after_forward': 'default', 'tensor_parallel_degree': 8, 'pipeline_parallel_degree': 1, "
    "'context_parallel_degree': 1}, 'activation_checkpoint': {'mode': 'full', 'selective_ac_option': '2'}, "
    "'float8': {'enable_fsdp_float8_all_gather': False, 'precompute_float8_dynamic_scale_for_fsdp': False}}",
    P.format(1) + "Building 2-D device mesh with ['dp_shard', 'tp'], [8, 8]",
    P.format(2) + "CUDA capacity: NVIDIA H100 80GB HBM3 with 79.11GiB memory",
    P.format(3) + "Building llama3 70B with TransformerModelArgs(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8)",
    titan_step(1, 12.2505, 61.05, 77.18, 120, 54.31, 5.49),
    titan_step(10, 9.7432, 70.12, 88.65, 829, 375.20, 37.94),
    titan_step(20, 8.1205, 70.12, 88.65, 831, 376.11, 38.03),
    titan_step(30, 7.5531, 70.12, 88.65, 835, 377.92, 38.21),
]) + "\n"

# Llama 3 8B, FSDP(-1) on 8 GPUs (world size from the torchrun line run_train.sh echoes), fp8 via converters;
# no config dump, so the TOML beside the log gives the layout.
TITAN_TOML_LOG = "\n".join([
    ("+ torchrun --nproc_per_node=8 --rdzv_backend c10d --rdzv_endpoint=localhost:0 --local-ranks-filter 0 "
     "--role rank --tee 3 -m torchtitan.train --job.config_file ./train_configs/llama3_8b.toml"),
    P.format(0) + "Starting job: Llama 3 8B training",
    titan_step(1, 12.0012, 30.12, 38.06, 6002, 291.43, 29.47),
    titan_step(10, 7.9431, 30.12, 38.06, 7123, 345.67, 34.95),
    titan_step(20, 7.1002, 30.12, 38.06, 7101, 344.60, 34.84),
    titan_step(30, 6.6019, 30.12, 38.06, 7140, 346.49, 35.03),
]) + "\n"

TITAN_TOML = """\
[job]
dump_folder = "./outputs"
description = "Llama 3 8B training"

[model]
name = "llama3"
flavor = "8B"
tokenizer_path = "./assets/tokenizer/original/tokenizer.model"
converters = ["float8"]

[training]
local_batch_size = 2
seq_len = 8192
steps = 1000

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[float8]
enable_fsdp_float8_all_gather = true
"""


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_megatron_core_log():
    r = parse_megatron_log(MEGATRON_CORE, "logs/mcore-8b.log")
    assert (r["row_id"], r["source"], r["framework"]) == ("mcore-8b", "logs/mcore-8b.log", "Megatron-LM")
    assert (r["source_group"], r["row_type"], r["trust"], r["gpu_type"]) == ("user-logs", "training_run", "A", "")
    assert (r["n_layers"], r["hidden"], r["ffn_hidden"], r["heads"], r["kv_heads"]) == (32, 4096, 14336, 32, 8)
    assert (r["vocab"], r["seq_len"]) == (128256, 8192)  # vocab from the tokenizer's padded-vocab line
    assert (r["n_gpus"], r["tp"], r["pp"], r["dp"], r["cp"], r["sp"]) == (64, 2, 2, 8, 2, "yes")
    assert r["vpp"] == 4  # 32 layers / pp 2 / 4 layers per virtual stage
    assert (r["micro_batch"], r["global_batch"], r["recompute"]) == (1, 128, "selective")
    assert (r["zero_dist_opt"], r["precision"]) == ("distributed optimizer", "fp8")
    assert "llama" in r["model"]  # swiglu: the fitting code picks the Llama block style from the name
    # first line (9876.5) dropped; median of 5012.3, 5003.1, 4998.7, 5020.0 = (5003.1 + 5012.3) / 2 = 5007.7 ms
    assert r["iter_time_s"] == pytest.approx(5.0077)
    assert "median of 4" in r["notes"] and "warm-up" in r["notes"]


def test_older_megatron_log_with_launcher_prefix():
    r = parse_megatron_log(MEGATRON_OLD, "run-1.3b.out")
    assert r["dp"] == 4 and r["cp"] == 1  # 32 / (tp 4 * pp 2 * cp 1)
    assert (r["heads"], r["kv_heads"]) == (16, 16)  # num_query_groups 1 is ignored without GQA
    assert (r["vocab"], r["vpp"], r["sp"]) == (50304, 1, "no")
    assert (r["recompute"], r["zero_dist_opt"], r["precision"]) == ("full", "none", "fp16")
    assert (r["micro_batch"], r["global_batch"]) == (4, 512)
    assert "llama" not in r["model"].lower()
    assert r["iter_time_s"] == pytest.approx(1.2055)  # median(1200.4, 1210.6) = 1205.5 ms


def test_torchtitan_log_with_config_dump():
    r = parse_torchtitan_log(TITAN_DUMP, "titan/70b.log")
    assert (r["model"], r["framework"], r["row_id"]) == ("llama3 70B", "torchtitan", "70b")
    assert (r["n_layers"], r["hidden"], r["ffn_hidden"], r["heads"], r["kv_heads"], r["vocab"]) == \
        (80, 8192, 28672, 64, 8, 128256)
    assert r["gpu_type"] == "NVIDIA H100 80GB HBM3"
    # shard -1 takes what TP leaves of the 8 x 8 mesh: 64 / 8 = 8
    assert (r["n_gpus"], r["tp"], r["pp"], r["dp"], r["cp"], r["sp"]) == (64, 8, 1, 8, 1, "yes")
    assert (r["micro_batch"], r["global_batch"], r["seq_len"]) == (2, 16, 8192)  # global = 2 x dp 8
    assert (r["recompute"], r["zero_dist_opt"], r["precision"]) == ("full", "FSDP2", "bf16")
    assert r["tokens_per_s_per_gpu"] == 831  # median(829, 831, 835); step 1 dropped
    # a dp rank (8 GPUs) runs 2 x 8192 tokens at 831 x 8 tokens/s: 16384 / 6648 s
    assert r["iter_time_s"] == pytest.approx(16384 / 6648)
    assert r["iter_time_s"] == pytest.approx(2.46450, abs=1e-5)


def test_torchtitan_log_with_companion_toml(tmp_path):
    log = tmp_path / "llama3-8b-fp8.log"
    log.write_text(TITAN_TOML_LOG)
    (tmp_path / "llama3-8b-fp8.toml").write_text(TITAN_TOML)
    r = parse_torchtitan_log(TITAN_TOML_LOG, str(log))
    assert (r["n_layers"], r["hidden"], r["ffn_hidden"], r["heads"], r["kv_heads"], r["vocab"]) == \
        (32, 4096, 14336, 32, 8, 128256)
    assert (r["n_gpus"], r["tp"], r["dp"], r["sp"], r["gpu_type"]) == (8, 1, 8, "no", "")
    assert (r["precision"], r["recompute"], r["zero_dist_opt"]) == ("fp8", "selective", "FSDP2")
    assert r["tokens_per_s_per_gpu"] == 7123  # median(7123, 7101, 7140)
    assert r["iter_time_s"] == pytest.approx(2 * 8192 / 7123)  # local batch x seq_len / tps = 2.30015 s
    assert r["iter_time_s"] == pytest.approx(2.30015, abs=1e-5)
    assert "llama3-8b-fp8.toml" in r["notes"]


@pytest.mark.parametrize("section, want", [
    ("", "none"),
    ("[compile]\nenable = true\n", "model+loss"),  # job_config.py Compile: components default model and loss
    ('[compile]\nenable = true\ncomponents = ["model"]\n', "model"),
    ('[compile]\nenable = false\ncomponents = ["model"]\n', "none")])
def test_torchtitan_compile_is_read(tmp_path, section, want):
    log = tmp_path / "c.log"
    (tmp_path / "c.toml").write_text(TITAN_TOML + "\n" + section)
    assert parse_torchtitan_log(TITAN_TOML_LOG, str(log))["compile"] == want


def test_torchtitan_2024_compile_flag_compiles_the_blocks():
    assert parse_torchtitan_log(TITAN_DUMP, "titan/70b.log")["compile"] == "none"  # 'compile': False
    on = TITAN_DUMP.replace("'compile': False", "'compile': True")
    assert parse_torchtitan_log(on, "titan/70b.log")["compile"] == "model"


def test_float8_section_alone_is_not_fp8(tmp_path):
    log = tmp_path / "bf16.log"
    (tmp_path / "bf16.toml").write_text(TITAN_TOML.replace('converters = ["float8"]', "converters = []"))
    assert parse_torchtitan_log(TITAN_TOML_LOG, str(log))["precision"] == "bf16"


def test_runs_from_logs_directory_in_name_order(tmp_path):
    (tmp_path / "b-megatron.log").write_text(MEGATRON_OLD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a-titan.out").write_text(TITAN_TOML_LOG)
    (tmp_path / "sub" / "a-titan.toml").write_text(TITAN_TOML)
    (tmp_path / "README.md").write_text("not a log")
    (tmp_path / "nvidia-smi.txt").write_text("GPU 0: NVIDIA H100 80GB HBM3\n")  # not a run log: skipped, named
    df = runs_from_logs(tmp_path)
    assert list(df["row_id"]) == ["a-titan", "b-megatron"]
    assert list(df["framework"]) == ["torchtitan", "Megatron-LM"]
    assert len(df.attrs["skipped"]) == 1 and "nvidia-smi.txt" in df.attrs["skipped"][0]
    dev = list(pd.read_csv(DEV_CSV, nrows=0).columns)  # the dev set's columns, then Megatron's split settings
    assert list(df.columns) == dev + ["account_for_embedding", "account_for_loss", "first_stage_layers",
                                      "last_stage_layers"]
    assert df["tflops_per_gpu"].isna().all()
    assert len(runs_from_logs(tmp_path / "b-megatron.log")) == 1


@pytest.mark.parametrize(("text", "needle"), [
    ("Epoch 1/10: accuracy 0.91\nall good\n", "neither a Megatron-LM"),
    (MEGATRON_CORE.split(" [2024-05-01")[0], "no 'elapsed time per iteration (ms)' lines"),
    (MEGATRON_CORE.split(" [2024-05-01 10:02")[0], "only 1"),
    (MEGATRON_CORE.replace("  seq_length ...................................... 8192\n", ""), "seq_length"),
    (TITAN_TOML_LOG, "without a config dump"),
    (TITAN_DUMP.replace("'70B'", "'3B'"), "valid: llama3 8B"),
])
def test_bad_logs_raise_one_line_naming_the_file(tmp_path, text, needle):
    log = tmp_path / "bad.log"
    log.write_text(text)
    with pytest.raises(InputError) as e:
        runs_from_logs(tmp_path)
    msg = one_line(e)
    assert str(log) in msg and needle in msg


def test_shard_degree_minus_one_without_world_size_names_the_field(tmp_path):
    log = tmp_path / "nosize.log"
    (tmp_path / "nosize.toml").write_text(TITAN_TOML)
    text = TITAN_TOML_LOG.split("\n", 1)[1]  # without the torchrun line
    with pytest.raises(InputError) as e:
        parse_torchtitan_log(text, str(log))
    msg = one_line(e)
    assert str(log) in msg and "data_parallel_shard_degree" in msg


def test_non_integer_degree_in_toml_is_one_line(tmp_path):
    log = tmp_path / "str-tp.log"
    (tmp_path / "str-tp.toml").write_text(TITAN_TOML.replace("tensor_parallel_degree = 1", 'tensor_parallel_degree = "8"'))
    with pytest.raises(InputError) as e:
        parse_torchtitan_log(TITAN_TOML_LOG, str(log))
    assert "tensor_parallel_degree = '8'" in one_line(e) and str(log) in one_line(e)


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(InputError) as e:
        runs_from_logs(tmp_path / "nope")
    assert "no such file" in one_line(e)
    with pytest.raises(InputError) as e:
        runs_from_logs(tmp_path)
    assert "no *.log" in one_line(e)


def test_megatron_uneven_split_is_read_and_priced():
    """30 layers + embedding + loss = 32 slots, pp 2, 4 slots per virtual stage: vpp 4 (Megatron-LM counts the
    accounted embedding and loss in num_layers_per_virtual_pipeline_stage)."""
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.calibrate.runs.table import to_case

    text = (MEGATRON_CORE.replace("  num_layers ...................................... 32",
                                  "  num_layers ...................................... 30")
            .replace("  virtual_pipeline_model_parallel_size ............ 4\n", "")
            .replace("  pipeline_model_parallel_size .................... 2\n",
                     "  pipeline_model_parallel_size .................... 2\n"
                     "  account_for_embedding_in_pipeline_split ......... True\n"
                     "  account_for_loss_in_pipeline_split .............. True\n"))
    row = parse_megatron_log(text, "uneven.log")
    assert row["vpp"] == 4 and row["account_for_embedding"] and row["account_for_loss"]
    case = to_case(pd.Series(row), load_hardware("dgx-h100"))
    assert not case.reason, case.reason
    assert case.plan.vpp == 4 and case.plan.account_for_embedding and case.plan.account_for_loss
