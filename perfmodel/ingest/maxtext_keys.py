"""MaxText's vocabulary as data for `perfmodel import --from maxtext`: the base.yml defaults the reader needs when
no base.yml is passed, MaxText model names with a perfmodel preset, TPU slice names, the model-shape keys, and why
each key perfmodel does not price is not priced.

Sources (maxtext e591f30cbbf217ed67ef71263ec0538239f9c3b8): src/maxtext/configs/base.yml (DEFAULTS, the values
there), configs/models/*.yml (PRESETS: the shapes compared in tests/test_import_maxtext.py), utils/
accelerator_to_spec_map.py (SLICES: v4-N and v5p-N count TensorCores, two per chip, one megacore device; v5e-N,
v6e-N count chips; tpu7x-N counts devices, two per chip), configs/types.py get_individual_scales.
"""

from __future__ import annotations

import math
import re

from ..errors import InputError

COMMIT = "e591f30cbbf217ed67ef71263ec0538239f9c3b8"
# base.yml's values (at COMMIT) of the keys the reader maps, used where no file passed states them
DEFAULTS = {
    "model_name": "default", "override_model_config": False, "per_device_batch_size": 12.0,
    "gradient_accumulation_steps": 1, "max_target_length": 2048, "remat_policy": "full", "dtype": "bfloat16",
    "weight_dtype": "float32", "grad_dtype": "float32", "mu_dtype": "", "quantization": "", "num_vocab_tiling": 1,
    "optimizer_memory_host_offload": False, "shard_optimizer_over_data": False, "capacity_factor": -1.0,
    "sparse_matmul": True, "megablox": True, "attention": "autoselected", "num_layers_per_pipeline_stage": 1,
    "num_pipeline_microbatches": -1, "num_pipeline_repeats": -1, "pipeline_parallel_layers": -1, "hardware": "tpu",
    "compile_topology": "", "compile_topology_num_slices": -1, "num_slices": -1, "global_parameter_scale": 1,
    "base_emb_dim": 2048, "base_num_query_heads": 16, "base_num_kv_heads": 16, "base_mlp_dim": 7168,
    "base_moe_mlp_dim": -1, "base_num_decoder_layers": 16, "head_dim": 128, "vocab_size": 32000,
    "decoder_block": "llama2", "mlp_activations": ["silu", "linear"], "logits_via_embedding": False,
    "enable_dropout": True, "dropout_rate": 0.0, "num_experts": 1, "num_experts_per_tok": 1, "shared_experts": 0,
    "first_num_dense_layers": 0, "mtp_num_layers": 0, "opt_type": "adamw", "decoder_layer_input": "device",
    "internal_compile": False, "internal_compile_num_devices": -1,
    **{f"{s}_{a}_parallelism": 1 for s in ("ici", "dcn") for a in (
        "diloco", "data", "fsdp", "fsdp_transpose", "sequence", "context", "context_usp_ulysses",
        "context_autoregressive", "tensor", "tensor_sequence", "pipeline", "expert", "autoregressive")},
    "ici_fsdp_parallelism": -1, "dcn_data_parallelism": -1,
}
# MaxText model_name -> perfmodel preset (perfmodel models list); the shapes agree (tests/test_import_maxtext.py)
PRESETS = {"llama2-7b": "llama-2-7b", "llama2-13b": "llama-2-13b", "llama2-70b": "llama-2-70b",
           "llama3-8b": "llama-3-8b", "llama3-70b": "llama-3-70b", "llama3.1-8b": "llama-3.1-8b",
           "llama3.1-70b": "llama-3.1-70b", "llama3.1-405b": "llama-3.1-405b", "mistral-7b": "mistral-7b",
           "mixtral-8x7b": "mixtral-8x7b", "mixtral-8x22b": "mixtral-8x22b", "qwen3-30b-a3b": "qwen3-30b-a3b",
           "qwen3-235b-a22b": "qwen3-235b-a22b", "deepseek3-671b": "deepseek-v3", "kimi-k2-1t": "kimi-k2",
           "gpt-oss-20b": "gpt-oss-20b", "gpt-oss-120b": "gpt-oss-120b"}
# slice-name prefix -> (perfmodel hardware, devices per unit of the name's count)
SLICES = {"v4": ("tpu-v4", 0.5), "v5p": ("tpu-v5p", 0.5), "v5e": ("tpu-v5e", 1), "v5litepod": ("tpu-v5e", 1),
          "v6e": ("tpu-v6e", 1), "tpu7x": ("tpu-v7", 1)}
# GKE's cloud.google.com/gke-tpu-accelerator label (Google Cloud GKE docs, "Plan TPUs in GKE") -> (hardware,
# JAX devices per chip of the gke-tpu-topology shape)
GKE = {"tpu-v4-podslice": ("tpu-v4", 1), "tpu-v5p-slice": ("tpu-v5p", 1), "tpu-v5-lite-podslice": ("tpu-v5e", 1),
       "tpu-v6e-slice": ("tpu-v6e", 1), "tpu7x": ("tpu-v7", 2)}
# base.yml's shape keys -> ModelConfig fields (dotted: moe.*, mla.*)
SHAPE = {"base_emb_dim": "hidden", "base_num_query_heads": "n_heads", "base_num_kv_heads": "n_kv_heads",
         "head_dim": "head_dim", "base_mlp_dim": "ffn_hidden", "base_num_decoder_layers": "n_layers",
         "vocab_size": "vocab", "logits_via_embedding": "tie_embeddings", "num_experts": "moe.n_experts",
         "num_experts_per_tok": "moe.top_k", "base_moe_mlp_dim": "moe.expert_ffn_hidden",
         "shared_experts": "moe.n_shared_experts", "first_num_dense_layers": "moe.first_dense_layers",
         "q_lora_rank": "mla.q_lora_rank", "kv_lora_rank": "mla.kv_lora_rank",
         "qk_nope_head_dim": "mla.qk_nope_head_dim", "qk_rope_head_dim": "mla.qk_rope_head_dim",
         "v_head_dim": "mla.v_head_dim", "mlp_activations": "mlp"}
LLAMA_BLOCKS = ("llama2", "mistral", "mixtral")  # RMSNorm, RoPE, gated MLP, no biases (layers/llama2.py, mixtral.py)
# mesh axis (the word in ici_*/dcn_*_parallelism) -> the plan degree it is part of
AXES = {"data": "data", "fsdp": "fsdp", "fsdp_transpose": "fsdp", "expert": "ep", "tensor": "tp",
        "tensor_sequence": "tp", "context": "cp", "pipeline": "pp"}


def slice_devices(name: str, where: str) -> tuple[str, int]:
    """(perfmodel hardware, JAX devices) of a TPU slice name (v5p-256 -> tpu-v5p, 128)."""
    m = re.fullmatch(r"([a-z0-9]+)-(\d+)", name.strip())
    if not m or m.group(1) not in SLICES:
        raise InputError(f"{where} = {name!r} is not a TPU slice name perfmodel knows; valid: "
                         f"{', '.join(p + '-N' for p in SLICES)} (MaxText accelerator_to_spec_map)")
    hw, per = SLICES[m.group(1)]
    return hw, max(1, int(int(m.group(2)) * per))


def gke_devices(accelerator: str, topology: str | None, where: str) -> tuple[str, int | None]:
    """(hardware, devices per slice) of GKE's TPU node selectors (tpu7x with 4x4x4: 64 chips, 128 devices)."""
    if accelerator not in GKE:
        raise InputError(f"{where} = {accelerator!r} is not a GKE TPU accelerator perfmodel knows; valid: "
                         f"{', '.join(GKE)}")
    hw, per = GKE[accelerator]
    if topology is None:
        return hw, None
    if not re.fullmatch(r"\d+(x\d+)*", topology):
        raise InputError(f"{where}: gke-tpu-topology = {topology!r} is not a TPU topology; valid: e.g. 4x4x4")
    return hw, math.prod(int(d) for d in topology.split("x")) * per


def parameter_scales(scale) -> tuple[int, int, int, int]:
    """(emb, heads, mlp, layers) powers of two MaxText multiplies the base_* shape by for global_parameter_scale
    (configs/types.py get_individual_scales: log2(scale) split in thirds, heads and mlp first, then emb)."""
    if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1 or scale & (scale - 1):
        raise InputError(f"global_parameter_scale = {scale!r}: MaxText takes a power of two; valid: 1, 2, 4, 8, ...")
    base, rem = divmod(int(math.log2(scale)), 3)
    heads = base + int(rem > 0)
    return base + int(rem > 1), heads, heads, base


_GROUPS = [  # (pattern over the key, why it is not priced)
    (r"checkpoint|ckpt|orbax|ocdbt|zarr|^load_|^save_|restore|^lora_input|hf_access", "checkpointing and weight "
     "loading: not priced, they do not change the step's time or memory"),
    (r"dataset|tokeniz|grain|tfds|^hf_|^data_|packing|shuffle|_split$|colocated|^add_bos|^add_eos|expansion_factor|"
     r"^eval_data|^train_data|^use_iota_embed|reuse_example_batch|^max_segments|^num_epoch|mixture", "data input: not "
     "priced (perfmodel prices the step on resident batches)"),
    (r"log|metric|tensorboard|profil|upload|^gcs_|goodput|monitor|diagnos|dump|debug|print|xprof|trace|^report",
     "logging and profiling: not priced"),
    (r"eval", "evaluation: not priced (the training step only)"),
    (r"learning_rate|^lr|warmup|^adam_|^opt_|weight_decay|clipping|^max_grad|cosine|schedule|muon|^beta|momentum|"
     r"^sgd|^skip_step|^z_loss|label_smooth|loss_scale", "optimizer hyper-parameters: not priced, they do not change "
     "step time or memory"),
    (r"^steps$|run_name|output_dir|^seed|_seed$|^enable_|^skip_|^jax_|^tpu_|^hardware$|^base_config$|distributed|"
     r"^elastic|^cluster|^pathways|^single_controller|^num_trainer|^mtc_|^subslice|^megascale|^cloud_", "run and "
     "cluster control: not priced"),
    (r"infer|decode|prefill|kv_cache|sampl|prompt|autoregressive|vllm|^rl_|grpo|^sft|dpo|distill|^rollout|^generate|"
     r"quantize_kvcache|kv_quant|^max_prefill|^stack_prefill|^return_log", "inference and post-training: not the "
     "pre-training step perfmodel prices"),
    (r"^sa_|splash|_tile|tiling|^wi_|^wo_|block_|_block|chunk|kernel|pallas|tokamax|cudnn|^use_jax|^ragged",
     "kernel tuning (block and tile sizes, kernel choice): not priced, perfmodel prices kernels from its tables"),
    (r"rope|yarn|rotary|position|^mscale|^beta_fast|^beta_slow|timescale|epsilon|^init|scale|^logits_dot|float32|"
     r"^normalize|^final_logits|^attn_logits|^query_pre|^fused_|^use_qk_norm|^qk_norm|soft_cap", "numerics and "
     "positional constants: not priced, no change in FLOPs or bytes perfmodel counts"),
]


def unpriced(key: str) -> str:
    """Why a MaxText key the reader does not map is not priced (one group's reason)."""
    for pattern, why in _GROUPS:
        if re.search(pattern, key):
            return why
    return "a MaxText setting perfmodel has no model of: not priced (its effect on step time or memory is not " \
           "counted)"
