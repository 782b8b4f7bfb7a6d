"""`perfmodel import --from maxtext`: MaxText's layered configs (base.yml, model YAMLs, shell / Kubernetes / Python
recipes copied verbatim under tests/fixtures/configs/maxtext, SOURCES.md) read as data, values worked out by hand;
every key's fate; refusals in one line; and the round trip through `perfmodel export --to maxtext`."""

from __future__ import annotations

import math

import pytest
import yaml

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.export.checks.spread import MAXTEXT_SPREAD, spread_plan_file
from perfmodel.export.maxtext.config import VERSIONS
from perfmodel.export.nearest import export_plan, nearest
from perfmodel.ingest import plan_of, read_config
from perfmodel.ingest.maxtext.keys import slice_devices
from perfmodel.spec.model.catalogue import load_model, preset_for_name
from perfmodel.spec.plan.layout import resolve

D = "tests/fixtures/configs/maxtext"
BASE = f"{D}/base.yml"


def imp(*files, name=None):
    return read_config(list(files), "maxtext", name)


def fates(i):
    return {k.key: k for k in i.keys}


def test_k8s_manifest_tpu7x_by_hand():
    # tpu7x node selector, topology 4x4x4 = 64 chips, two JAX devices each = 128 (accelerator_to_spec_map tpu7x-128);
    # ici_fsdp -1 takes all 128; per_device_batch_size 2 -> 256 sequences of 8192, 2 per fsdp rank
    i = imp(BASE, f"{D}/k8s_llama3.1-70b_tpu7x-4x4x4.yaml")
    assert (i.hardware, i.gpus, i.model.name) == ("tpu-v7", 128, "llama-3.1-70b")
    _, _, p = plan_of(i)
    assert (p.dp, p.tp, p.zero, p.micro_batch, p.global_batch, p.seq_len) == (128, 1, 3, 2, 256, 8192)
    # custom remat: decoder_layer_input, context and the q/k/v projections on device -> qkv and attention saved
    assert (p.recompute, p.recompute_saved, p.recompute_offloaded) == ("names", ["qkv", "attention"], None)
    assert p.moment_dtype == "bf16" and p.weight_dtype == "fp32" and p.stack == "maxtext"  # mu_dtype=bfloat16
    f = fates(i)
    assert f["sa_block_q"].fate == "not priced" and "kernel" in f["sa_block_q"].why
    assert f["dataset_type"].fate == "not priced" and f["profiler"].fate == "not priced"
    assert f["ici_fsdp_parallelism"].became.startswith("plan.dp = 128")


def test_benchmark_recipe_chosen_by_the_runner_script():
    # tpu-recipes' script runs trillium's llama3_1_405b_8192_pure_fsdp_ici on 2 x v6e-256: 512 chips; the recipe's
    # ici_fsdp 256 x dcn_fsdp 2 (base.yml's dcn_data -1 -> 1); 1 sequence a device
    i = imp(BASE, f"{D}/models/llama3.1-405b.yml", f"{D}/maxtext_trillium_model_configs.py",
            f"{D}/llama3-1-405b-2xv6e-256.sh")
    assert (i.name, i.hardware, i.gpus, i.model.name) == ("llama3-1-405b-8192-pure-fsdp-ici", "tpu-v6e", 512,
                                                          "llama-3.1-405b")
    _, _, p = plan_of(i)
    assert (p.dp, p.zero, p.dp_replicate, p.micro_batch, p.global_batch, p.seq_len) == (512, 3, 1, 1, 512, 8192)
    assert (p.recompute, p.recompute_saved, p.recompute_offloaded) == ("names", [], ["layer_input"])
    assert fates(i)["xla_flags"].fate == "not priced"


def test_recipe_module_needs_a_name():
    with pytest.raises(InputError, match="defines .* MaxText recipes; valid: --name one of default-basic-1"):
        imp(BASE, f"{D}/maxtext_trillium_model_configs.py")
    with pytest.raises(InputError, match="--name = 'nope' is not a recipe"):
        imp(f"{D}/maxtext_trillium_model_configs.py", name="nope")


def test_mixtral_dropped_recipe_waits_for_the_device_count():
    i = imp(BASE, f"{D}/models/mixtral-8x7b.yml", f"{D}/maxtext_trillium_model_configs.py",
            name="mixtral_8x7b_dropped")
    assert i.gpus is None and i.deferred  # ici_fsdp -1: the rest of a slice, no slice named
    with pytest.raises(InputError, match="--gpus is needed"):
        plan_of(i, "tpu-v6e")
    _, _, p = plan_of(i, "tpu-v6e", 256)  # one v6e-256 slice: 256 x 12 = 3072 sequences, fsdp 256
    assert (p.dp, p.zero, p.micro_batch, p.global_batch) == (256, 3, 12, 3072)
    assert p.moe_capacity_factor == 1.25 and p.recompute_offloaded == ["layer_input", "qkv", "out_proj"]
    assert getattr(p, "moe_dense_dispatch", True) is True or "sparse_matmul" in {k.key for k in i.not_priced()}
    _, _, p = plan_of(i, "tpu-v6e", 512)  # two slices (v6e's ICI domain is 256): dcn_data -1 = 2 replicas
    assert (p.dp, p.dp_replicate, p.global_batch) == (512, 2, 6144)


def test_shell_recipes():
    # v5p 128b: global_parameter_scale 128 = 2^7 -> x4 width and layers, x8 heads and MLP (types.py): 8192 wide,
    # 128 heads, 57344 MLP, 64 layers; ici_tensor 8 with ici_fsdp -1
    i = imp(BASE, f"{D}/v5p_128b.sh")
    m = i.model
    assert (m.hidden, m.n_heads, m.n_kv_heads, m.ffn_hidden, m.n_layers, m.vocab) == (8192, 128, 128, 57344, 64, 32000)
    _, _, p = plan_of(i, "tpu-v5p", 128)
    assert (p.tp, p.dp, p.micro_batch, p.global_batch, p.seq_len, p.sequence_parallel) == (8, 16, 8, 128, 2048, True)
    assert (p.recompute, p.recompute_saved) == ("names", ["qkv", "out_proj", "mlp_in"])  # remat_policy minimal
    assert fates(i)["quantization"].became == "plan.precision = bf16"
    # v5e llama2-70b: qkv_proj_offloaded keeps the q/k/v projections in host memory (tpu-v5e's host link)
    i = imp(BASE, f"{D}/models/llama2-70b.yml", f"{D}/v5e_llama2_70b.sh")
    assert i.model.name == "llama-2-70b"
    _, _, p = plan_of(i, "tpu-v5e", 256)
    assert (p.recompute, p.recompute_saved, p.recompute_offloaded, p.dp, p.micro_batch) == (
        "names", ["qkv"], ["qkv"], 256, 2)


@pytest.mark.parametrize("name, preset", [("llama2-70b", "llama-2-70b"), ("llama3.1-405b", "llama-3.1-405b"),
                                          ("mixtral-8x7b", "mixtral-8x7b")])
def test_model_yamls_agree_with_the_presets(tmp_path, name, preset):
    over = tmp_path / "over.yml"
    over.write_text(f"model_name: {name}\n")
    i = imp(BASE, f"{D}/models/{name}.yml", str(over))
    assert i.model.name == preset
    with open(f"{D}/models/{name}.yml") as fh:
        stated = yaml.safe_load(fh)
    f = fates(i)
    shape = [k for k in stated if k in ("base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_mlp_dim",
                                        "base_num_decoder_layers", "head_dim", "vocab_size", "mlp_activations",
                                        "num_experts", "num_experts_per_tok", "base_moe_mlp_dim")]
    assert len(shape) >= 8
    for k in shape:
        assert f[k].fate == "mapped" and f"agrees with preset {preset}" in f[k].why, k
    with pytest.raises(InputError, match="global_parameter_scale = 128 with model_name"):
        imp(BASE, f"{D}/models/{name}.yml", f"{D}/v5p_128b.sh", str(over))


def test_preset_keys_checked(tmp_path):
    over = tmp_path / "over.yml"
    over.write_text("model_name: mixtral-8x7b\nper_device_batch_size: 1\n")
    i = imp(BASE, f"{D}/models/mixtral-8x7b.yml", str(over))
    f = fates(i)
    for key in ("base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_mlp_dim", "base_moe_mlp_dim",
                "num_experts", "num_experts_per_tok", "vocab_size", "head_dim", "mlp_activations"):
        assert f[key].fate == "mapped" and "agrees with preset mixtral-8x7b" in f[key].why, key
    cli = tmp_path / "run.sh"
    cli.write_text("python3 -m MaxText.train base.yml model_name=llama2-70b base_num_decoder_layers=4\n")
    with pytest.raises(InputError, match="model YAML .* sets base_num_decoder_layers = 80 .* override_model_config"):
        imp(BASE, f"{D}/models/llama2-70b.yml", str(cli))
    cli.write_text("python3 -m MaxText.train base.yml model_name=llama2-70b base_num_decoder_layers=4 "
                   "override_model_config=true\n")
    assert imp(BASE, f"{D}/models/llama2-70b.yml", str(cli)).model.n_layers == 4


def test_every_key_has_a_fate():
    i = imp(BASE, f"{D}/models/llama3.1-405b.yml", f"{D}/maxtext_trillium_model_configs.py",
            f"{D}/llama3-1-405b-2xv6e-256.sh")
    keys = {k.key for k in i.keys}
    for f in (BASE, f"{D}/models/llama3.1-405b.yml"):
        with open(f) as fh:
            assert set(yaml.safe_load(fh)) <= keys, f
    recipe = {"per_device_batch_size", "ici_fsdp_parallelism", "dcn_fsdp_parallelism", "remat_policy",
              "decoder_layer_input", "max_target_length", "attention", "gcs_metrics", "use_iota_embed",
              "dataset_path", "dataset_type", "reuse_example_batch", "enable_checkpointing", "profiler", "sa_block_q",
              "sa_block_q_dkv", "sa_block_q_dq", "model_name", "--device_type", "--num_slices", "--model_name"}
    assert recipe <= keys
    assert all(k.why for k in i.keys if k.fate == "not priced")
    # base.yml's own per_device_batch_size (12.0) was overridden by the recipe's 1, and says so
    over = [k for k in i.keys if k.key == "per_device_batch_size" and k.fate == "not priced"]
    assert over and "overridden by per_device_batch_size = 1" in over[0].why


def test_defaults_without_base_yml(tmp_path):
    cli = tmp_path / "run.sh"
    cli.write_text("python3 -m MaxText.train MaxText/configs/base.yml model_name=llama3.1-8b "
                   "per_device_batch_size=2 ici_fsdp_parallelism=16 ici_tensor_parallelism=4 dcn_data_parallelism=2 "
                   "remat_policy=full num_vocab_tiling=4 optimizer_memory_host_offload=true\n")
    i = imp(str(cli))
    # 16 x 4 in a slice, 2 slices: 128 devices; dp = 2 x 16 = 32 (replicas of fsdp 16); micro 2 x 4 = 8
    assert i.gpus == 128 and fates(i)["(config file)"].fate == "not priced"
    _, _, p = plan_of(i, "tpu-v6e")
    assert (p.dp, p.dp_replicate, p.tp, p.zero, p.micro_batch, p.global_batch) == (32, 2, 4, 3, 8, 256)
    assert (p.recompute, p.loss_chunks, p.optimizer_offload, p.seq_len) == ("full", 4, True, 2048)
    assert any(k.fate == "default" and k.key == "max_target_length" for k in i.keys)


@pytest.mark.parametrize("text, match", [
    ("python3 -m MaxText.train base.yml ici_fsdp_parallelism=-1 ici_tensor_parallelism=-1\n", "both -1"),
    ("python3 -m MaxText.train base.yml ici_sequence_parallelism=2\n", "sequence axis is not priced"),
    ("python3 -m MaxText.train base.yml remat_policy=bogus\n", "remat_policy = 'bogus'"),
    ("python3 -m MaxText.train base.yml compile_topology=v9z-8\n", "compile_topology = 'v9z-8'"),
    ("python3 -m MaxText.train base.yml model_name=olmo3-7b\n", "no perfmodel preset and no model YAML"),
    ("python3 -m MaxText.train base.yml compile_topology=v5p-16 ici_fsdp_parallelism=4\n", "multiply to 4, not the 8"),
    ("echo hello\n", "no MaxText train command"),
])
def test_refusals(tmp_path, text, match):
    f = tmp_path / "run.sh"
    f.write_text(text)
    with pytest.raises(InputError, match=match):
        i = imp(str(f))
        plan_of(i, "tpu-v5p", 64)


def test_cli_exit_2(tmp_path, capsys):
    bad = tmp_path / "run.sh"
    bad.write_text("python3 -m MaxText.train base.yml per_device_batch_size=abc\n")
    assert main(["import", str(bad), "--from", "maxtext", "--hardware", "tpu-v5p", "--gpus", "8"]) == 2
    assert "per_device_batch_size = abc" in capsys.readouterr().err
    out = tmp_path / "plan.json"
    assert main(["import", BASE, f"{D}/k8s_llama3.1-70b_tpu7x-4x4x4.yaml", "--from", "maxtext", "--explain",
                 "-o", str(out)]) == 0
    assert out.exists() and "ici_fsdp_parallelism = -1 -> plan.dp = 128" in capsys.readouterr().out


# Round trip. The export does not carry: recompute none / selective (exported as remat_policy
# minimal_with_context / minimal, which read back as the names policy saving those tensors, as MaxText runs them:
# the exporter's own note) and names saving nothing (exported as full, read back as full recompute); the model's name
# and max_seq_len (the export writes a llama2 block's shape and max_target_length only).
ROUND = ["v5p-fsdp-tp4", "v6e-2-slices-fsdp", "v6e-2-slices-hsdp", "v6e-data-zero1", "v5p-names-save-dot",
         "v6e-names-custom", "v6e-loss-chunks"]
SPREAD = {**MAXTEXT_SPREAD, "v6e-loss-chunks": ("llama-3-8b", "tpu-v6e", dict(
    gpus=256, tp=2, zero=3, sequence_parallel=True, recompute="full", loss_chunks=4, global_batch=256,
    seq_len=8192, stack="maxtext", micro_batch=2))}
SHAPE = ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "vocab", "mlp", "tie_embeddings",
         "norm", "position", "moe", "dropout")


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("case", ROUND)
def test_round_trip(tmp_path, version, case):
    pf = spread_plan_file(case, SPREAD)
    runs, _ = nearest(pf, "maxtext", version)
    f = tmp_path / "exported.yml"
    f.write_text(export_plan(pf, "maxtext", version))
    i = read_config([f], "maxtext")
    model, _, got = plan_of(i, runs.hardware)
    want = resolve(runs.plan, runs.model, runs.hardware).model_dump()
    if runs.plan.recompute in ("none", "selective"):
        policy = {"none": "minimal_with_context", "selective": "minimal"}[runs.plan.recompute]
        from perfmodel.spec.plan.recompute import MAXTEXT_REMAT
        assert (got.recompute, got.recompute_saved) == ("names", MAXTEXT_REMAT[policy])
        want = resolve(runs.plan.model_copy(update=dict(recompute="names", recompute_modules=None,
                                                        recompute_saved=MAXTEXT_REMAT[policy])),
                       runs.model, runs.hardware).model_dump()
    have = got.model_dump()
    assert {k: have[k] for k in want if have[k] != want[k]} == {}, case
    for field in SHAPE:
        assert getattr(model, field) == getattr(runs.model, field), field
    assert math.prod([got.tp, got.cp, got.pp, got.dp]) == got.gpus == runs.plan.gpus


# -- TPU slice names (maxtext_keys.SLICES): values from Cloud TPU's docs and MaxText's accelerator_to_spec_map ------
C = "tests/fixtures/corpus/maxtext"


@pytest.mark.parametrize("name, hardware, devices", [
    ("tpu7x-4x8x8", "tpu-v7", 512),    # 4 x 8 x 8 = 256 chips, two TensorCores (JAX devices) each
    ("tpu7x-4x4x4", "tpu-v7", 128),    # accelerator_to_spec_map: tpu7x-128 = tpu7x:4x4x4, 128 devices a slice
    ("tpu7x-128", "tpu-v7", 128),      # the -N form counts TensorCores
    ("v6e-16x16", "tpu-v6e", 256),     # one TensorCore a chip: v6e-256 = v6e:16x16
    ("v6e-256", "tpu-v6e", 256),
    ("v5p-128", "tpu-v5p", 64),        # Cloud TPU v5p: 4x4x4 = 128 cores, 64 chips; one megacore device a chip
    ("v5p-4x4x4", "tpu-v5p", 64),
    ("v5litepod-256", "tpu-v5e", 256),  # v5e counts chips
    ("v5e-16", "tpu-v5e", 16),
    ("v4-128", "tpu-v4", 64),          # accelerator_to_spec_map: v4-128 = v4:4x4x4, 64 devices
])
def test_slice_names(name, hardware, devices):
    assert slice_devices(name, "--device-type") == (hardware, devices)


@pytest.mark.parametrize("name, match", [("v5p-7", "multiple of 2"), ("tpu7x-0x4x4", "multiple of 2"),
                                         ("v9z-8", "not a TPU slice name")])
def test_slice_names_refused(name, match):
    with pytest.raises(InputError, match=match):
        slice_devices(name, "--device-type")


def test_xpk_topology_and_slices(tmp_path):
    # xpk --device-type in the topology form, --num-slices 4: 4 x 256 v6e devices; ici_fsdp -1 fills each slice,
    # dcn_data -1 (base.yml) the 4 slices; the train command inside --command, after `set -e &&`
    run = tmp_path / "run.sh"
    run.write_text('ARGS="model_name=llama3.1-8b per_device_batch_size=2 max_target_length=8192"\n'
                   'xpk workload create --cluster=c --device-type=v6e-16x16 --num-slices=4 \\\n'
                   '  --command="set -e && python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml '
                   '${ARGS} | tee train.log"\n')
    i = imp(BASE, str(run))
    assert (i.hardware, i.gpus) == ("tpu-v6e", 1024)
    _, _, p = plan_of(i)
    assert (p.dp, p.dp_replicate, p.zero, p.micro_batch, p.global_batch, p.seq_len) == (1024, 4, 3, 2, 2048, 8192)
    assert fates(i)["--num-slices"].why == "4 slices"


def test_command_line_last_word_wins(tmp_path):
    # OmegaConf.from_cli: a key's last word on the command line wins; the earlier one is named as overridden
    run = tmp_path / "run.sh"
    run.write_text("python3 -m MaxText.train base.yml per_device_batch_size=1 per_device_batch_size=2 "
                   "ici_fsdp_parallelism=8 num_slices=1\n")
    i = imp(str(run))
    _, _, p = plan_of(i, "tpu-v5e")
    assert (p.gpus, p.micro_batch) == (8, 2)
    assert any(k.key == "per_device_batch_size" and "overridden by per_device_batch_size = 2" in k.why
               for k in i.not_priced())


# -- model YAMLs read block by block (maxtext_model.BLOCKS), each against its preset -------------------------------
# (maxtext commit folder, configs/models/<name>.yml, the preset of the same model, the fields where the YAML differs)
YAMLS = [
    ("e591f30", "gemma3-27b", "gemma-3-27b", {"vocab"}),    # MaxText's 262144 rows; the HF checkpoint's 262208
    ("50bafeb", "gemma3-12b", "gemma-3-12b", {"vocab"}),
    ("df1b359", "gemma4-26b", "gemma-4-26b-a4b", set()),
    ("df1b359", "gemma4-31b", "gemma-4-31b", set()),
    ("e591f30", "qwen3-0.6b", "qwen3-0.6b", set()),
    ("e591f30", "qwen3-8b", "qwen3-8b", set()),
    ("e591f30", "qwen3-30b-a3b", "qwen3-30b-a3b", {"ffn_hidden"}),  # every layer MoE: base_mlp_dim is no layer's
    ("a0fceb5", "qwen3-235b-a22b", "qwen3-235b-a22b", {"ffn_hidden"}),
    ("998b3e3", "deepseek3-671b", "deepseek-v3", set()),
    ("e591f30", "kimi-k2-1t", "kimi-k2", set()),
    ("e591f30", "deepseek2-16b", "deepseek-v2-lite", set()),
    ("998b3e3", "gpt-oss-120b", "gpt-oss-120b", set()),
    ("e591f30", "llama4-17b-16e", "llama-4-scout", {"ffn_hidden"}),
    ("e591f30", "llama4-17b-128e", "llama-4-maverick", set()),
    ("a0fceb5", "llama3.1-405b", "llama-3.1-405b", set()),
]
BLOCK_SHAPE = ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "vocab", "mlp",
               "tie_embeddings", "norm", "position", "linear_bias", "sliding_window", "windowed_layers", "moe", "mla",
               "global_attention")


@pytest.mark.parametrize("commit, name, preset, differ", YAMLS)
def test_model_yaml_blocks_match_presets(tmp_path, commit, name, preset, differ):
    # the YAML alone (model_name renamed so that no preset applies): the block's shape is the preset's
    over = tmp_path / "over.yml"
    over.write_text("model_name: no-such-preset\n")
    files = [f"{C}/maxtext-{commit}/base.yml", f"{C}/maxtext-{commit}/models/{name}.yml"]
    built, want = imp(*files, str(over)).model, load_model(preset)
    assert {f for f in BLOCK_SHAPE if getattr(built, f) != getattr(want, f)} == differ
    # with its own model_name: the preset, each shape key of the YAML agreeing with it (or naming the difference)
    if preset_for_name(name, "maxtext") != preset:
        pytest.skip(f"spec.model.catalogue.preset_for_name does not read MaxText's {name} as {preset} yet")
    over.write_text(f"model_name: {name}\n")
    i = imp(*files, str(over))
    assert i.model.name == preset and i.model.vocab == built.vocab
    f = fates(i)
    for key in ("base_emb_dim", "base_num_query_heads", "base_num_decoder_layers", "num_experts"):
        if key in yaml.safe_load(open(files[1])):
            assert f[key].fate == "mapped" and f"agrees with preset {preset}" in f[key].why, key


def test_model_yaml_shapes_by_hand():
    # gpt-oss-120b: (sliding, global) alternating over 36 layers -> 18 windowed of 128; biased projections, router
    # and experts; 128 experts of 2880, 4 a token, no shared expert (RoutedMoE)
    m = imp(f"{C}/maxtext-998b3e3/base.yml", f"{C}/maxtext-998b3e3/models/gpt-oss-120b.yml").model
    assert (m.sliding_window, m.windowed_layers, m.linear_bias) == (128, 18, "all")
    assert (m.moe.n_experts, m.moe.top_k, m.moe.n_shared_experts, m.moe.router_bias, m.moe.expert_bias) == (
        128, 4, 0, True, True)
    # deepseek3-671b: MLA (q latent 1536, kv 512, 128 + 64 wide q/k heads), 3 dense layers, 1 shared expert of 2048,
    # sigmoid routing
    m = imp(f"{C}/maxtext-998b3e3/base.yml", f"{C}/maxtext-998b3e3/models/deepseek3-671b.yml").model
    assert (m.mla.q_lora_rank, m.mla.kv_lora_rank, m.head_dim) == (1536, 512, 192)
    assert (m.moe.first_dense_layers, m.moe.n_shared_experts, m.moe.shared_ffn_hidden, m.moe.router_scoring) == (
        3, 1, 2048, "sigmoid")
    # llama4-17b-128e: interleave_moe_layer_step 2 -> MoE on odd layers, a dense 16384 MLP on the others
    m = imp(f"{C}/maxtext-e591f30/base.yml", f"{C}/maxtext-e591f30/models/llama4-17b-128e.yml").model
    assert (m.moe.layer_freq, m.moe.n_experts, m.moe.top_k, m.ffn_hidden, m.moe.router_scoring) == (
        2, 128, 1, 16384, "sigmoid")
    # gemma4-31b: 60 layers, 50 windowed of 1024; the 10 global ones 512-wide heads, 4 kv heads, one K=V projection
    m = imp(f"{C}/maxtext-df1b359/base.yml", f"{C}/maxtext-df1b359/models/gemma4-31b.yml").model
    assert (m.windowed_layers, m.global_attention.head_dim, m.global_attention.n_kv_heads,
            m.global_attention.shared_kv) == (50, 512, 4, True)


def test_gemma4_small_refused():
    with pytest.raises(InputError, match="hidden_size_per_layer_input = 256 .* per-layer input embeddings"):
        imp(f"{C}/maxtext-df1b359/base.yml", f"{C}/maxtext-df1b359/models/gemma4-e2b.yml")
