"""MaxText's vocabulary as data for `perfmodel import --from maxtext`: the base.yml defaults the reader needs when
no base.yml is passed, MaxText model names with a perfmodel preset, TPU slice names, the model-shape keys, and why
each key perfmodel does not price is not priced.

Sources (maxtext e591f30cbbf217ed67ef71263ec0538239f9c3b8): src/maxtext/configs/base.yml (DEFAULTS, the values
there), configs/types.py get_individual_scales; TPU slice names (SLICES, `slice_devices`): see there.
"""

from __future__ import annotations

import math
import re

from ...errors import InputError

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
    "sliding_window_size": 0, "global_head_dim": 0, "global_num_kv_heads": 0, "share_kv_projections": False,
    "attention_type": "global", "attention_bias": False, "mlp_bias": False, "routed_bias": False,
    "routed_score_func": "", "interleave_moe_layer_step": 1, "hidden_size_per_layer_input": 0,
    "num_kv_shared_layers": 0, "q_lora_rank": 0, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128,
    "internal_compile": False, "internal_compile_num_devices": -1,
    **{f"{s}_{a}_parallelism": 1 for s in ("ici", "dcn") for a in (
        "diloco", "data", "fsdp", "fsdp_transpose", "sequence", "context", "context_usp_ulysses",
        "context_autoregressive", "tensor", "tensor_sequence", "pipeline", "expert", "autoregressive")},
    "ici_fsdp_parallelism": -1, "dcn_data_parallelism": -1,
}
# TPU slice names: prefix -> (perfmodel hardware, TensorCores a chip the "-N" form counts, JAX devices a chip).
# "-N" counts TensorCores where a chip has two (Cloud TPU docs, "TPU v5p": "--accelerator-type ... the number of
# TensorCores", topology 4x4x4 = 128 cores, 64 chips; v4 likewise) and chips where it has one (v5e / v5litepod, v6e:
# v6e-256 is 16x16 chips). A device is what JAX counts (jax.experimental.pallas.tpu.ChipVersion: v4 and v5p run their
# two TensorCores as one megacore device; TPU 7x has two TensorCores a chip and no megacore, so two devices; Cloud
# TPU docs "TPU7x (Ironwood)": "Each TPU7x chip contains two TensorCores"). MaxText's utils/accelerator_to_spec_map.py
# agrees: v5p-128 = v5:4x4x4 with 64 devices, v6e-256 = v6e:16x16 with 256, tpu7x-128 = tpu7x:4x4x4 with 128. The
# topology form (xpk --device-type=tpu7x-4x8x8, v6e-16x16) names the chips: devices = chips x devices a chip.
SLICES = {"v4": ("tpu-v4", 2, 1), "v5p": ("tpu-v5p", 2, 1), "v5e": ("tpu-v5e", 1, 1), "v5litepod": ("tpu-v5e", 1, 1),
          "v6e": ("tpu-v6e", 1, 1), "tpu7x": ("tpu-v7", 2, 2)}
# GKE's cloud.google.com/gke-tpu-accelerator label (Google Cloud GKE docs, "Plan TPUs in GKE") -> the slice prefix
GKE = {"tpu-v4-podslice": "v4", "tpu-v5p-slice": "v5p", "tpu-v5-lite-podslice": "v5e", "tpu-v6e-slice": "v6e",
       "tpu7x": "tpu7x"}
# base.yml's shape keys -> ModelConfig fields (dotted: moe.*, mla.*)
SHAPE = {"base_emb_dim": "hidden", "base_num_query_heads": "n_heads", "base_num_kv_heads": "n_kv_heads",
         "head_dim": "head_dim", "base_mlp_dim": "ffn_hidden", "base_num_decoder_layers": "n_layers",
         "vocab_size": "vocab", "logits_via_embedding": "tie_embeddings", "num_experts": "moe.n_experts",
         "num_experts_per_tok": "moe.top_k", "base_moe_mlp_dim": "moe.expert_ffn_hidden",
         "shared_experts": "moe.n_shared_experts", "first_num_dense_layers": "moe.first_dense_layers",
         "q_lora_rank": "mla.q_lora_rank", "kv_lora_rank": "mla.kv_lora_rank",
         "qk_nope_head_dim": "mla.qk_nope_head_dim", "qk_rope_head_dim": "mla.qk_rope_head_dim",
         "v_head_dim": "mla.v_head_dim", "mlp_activations": "mlp"}
# mesh axis (the word in ici_*/dcn_*_parallelism) -> the plan degree it is part of
AXES = {"data": "data", "fsdp": "fsdp", "fsdp_transpose": "fsdp", "expert": "ep", "tensor": "tp",
        "tensor_sequence": "tp", "context": "cp", "pipeline": "pp"}


def slice_devices(name: str, where: str) -> tuple[str, int]:
    """(perfmodel hardware, JAX devices) of a TPU slice name: v5p-256 -> tpu-v5p, 128; tpu7x-4x8x8 -> tpu-v7, 512
    (SLICES)."""
    m = re.fullmatch(r"([a-z0-9]+)-(\d+(?:x\d+)*)", name.strip().lower())
    if not m or m.group(1) not in SLICES:
        raise InputError(f"{where} = {name!r} is not a TPU slice name perfmodel knows; valid: "
                         f"{', '.join(p + '-N' for p in SLICES)} or a topology such as tpu7x-4x4x4, v6e-16x16")
    hw, cores, per_chip = SLICES[m.group(1)]
    dims = [int(d) for d in m.group(2).split("x")]
    if 0 in dims or (len(dims) == 1 and dims[0] % cores):
        raise InputError(f"{where} = {name!r}: {m.group(1)}-N counts {cores} TensorCores a chip, so N is a positive "
                         f"multiple of {cores}; valid: e.g. {m.group(1)}-{8 * cores}")
    chips = dims[0] // cores if len(dims) == 1 else math.prod(dims)
    return hw, chips * per_chip


def gke_devices(accelerator: str, topology: str | None, where: str) -> tuple[str, int | None]:
    """(hardware, devices per slice) of GKE's TPU node selectors (tpu7x with 4x4x4: 64 chips, 128 devices)."""
    if accelerator not in GKE:
        raise InputError(f"{where} = {accelerator!r} is not a GKE TPU accelerator perfmodel knows; valid: "
                         f"{', '.join(GKE)}")
    if topology is None:
        return SLICES[GKE[accelerator]][0], None
    if not re.fullmatch(r"\d+(x\d+)+", topology):
        raise InputError(f"{where}: gke-tpu-topology = {topology!r} is not a TPU topology; valid: e.g. 4x4x4")
    return slice_devices(f"{GKE[accelerator]}-{topology}", f"{where} with gke-tpu-topology")


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
