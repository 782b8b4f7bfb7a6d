"""MaxText: the plan as a MaxText config, a YAML of overrides on MaxText's base.yml (`base_config: base.yml`), read
by `python3 -m maxtext.trainers.pre_train.train THIS_FILE.yml` (configs/pyconfig.py initialize: base.yml, then
this file, then key=value arguments; configs/types.py MaxTextConfig validates every key).

Version: 0.2.5 (maxtext==0.2.5 on PyPI, the newest; Python >= 3.12). Keys and their base.yml lines: the model
(base_emb_dim, base_num_query_heads, base_num_kv_heads, base_mlp_dim, base_num_decoder_layers, head_dim lines
204-210, mlp_activations 215, logits_via_embedding 218, num_experts 247, base_moe_mlp_dim 271, decoder_block 190,
vocab_size 821, max_target_length 1004), precision (dtype 128, weight_dtype 194, quantization 137), the mesh
(ici_* / dcn_* 764-793, shard_optimizer_over_data 799; maxtext.mesh says how the plan maps onto it), remat_policy
450, attention 486, the pipeline (num_layers_per_pipeline_stage 409, num_pipeline_microbatches 419) and the batch
(per_device_batch_size 840, gradient_accumulation_steps 1098). MaxText's batch: global = devices x
per_device_batch_size x gradient_accumulation_steps (types.py calculate_global_batch_sizes), sharded over the data,
fsdp, expert (and with a pipeline, stage) axes; the tensor and context axes hold the same sequences.

`nearest_plan` (maxtext.mesh) changes what 0.2.5 cannot run; what the config still leaves out is listed in the
closing comments. perfmodel.export.checks.maxtext_check runs MaxText's own config code on every export.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ...spec.plan.file import PlanFile
from ...spec.plan.recompute import MAXTEXT_REMAT, names_unpriced
from .mesh import MAXTEXT, REMAT, data_axis, mesh, nearest_plan, per_device_batch, remat_keys
from ..plan_facts import not_expressed_comments, placement_deviations, prediction, shape, summary

VERSIONS: dict[str, str] = {"0.2.5": "maxtext==0.2.5"}
__all__ = ["VERSIONS", "nearest_plan", "maxtext", "settings"]
_AXES = ("data", "fsdp", "stage", "context", "tensor", "expert")
_KEY = {"stage": "pipeline"}  # mesh axis -> the word in its ici_* / dcn_* key


def maxtext(pf: PlanFile, version: str | None = None, changes: Sequence[str] = ()) -> str:
    """The MaxText config YAML for `version` (default the newest). `changes` (what nearest_plan changed) are
    written as comments near the top; what MaxText cannot carry, at the end."""
    version = version or next(iter(VERSIONS))
    keys, launch, notes = settings(pf)
    lines = [f"# perfmodel export: MaxText {version} config ({VERSIONS[version]}): overrides on MaxText's "
             "configs/base.yml",
             f"# plan: {summary(pf)}", f"# {prediction(pf)}", f"# model: {pf.model.name} ({shape(pf)})"]
    lines += [f"# changed to run on {MAXTEXT}: {c}" for c in changes]
    lines += [f"# {ln}" for ln in launch]
    lines += [f"{k}: {_yaml(v)}" for k, v in keys.items()]
    lines += not_expressed_comments(f"MaxText {version}", notes)
    return "\n".join(lines) + "\n"


_JAX_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}  # Plan.weight_dtype / moment_dtype -> MaxText's names


def _yaml(v) -> str:
    """A YAML scalar or flow list (JSON's syntax is YAML's: strings quoted, lists in brackets)."""
    return json.dumps(v)


def settings(pf: PlanFile) -> tuple[dict, list[str], list[str]]:
    """(config keys in the order written, launch comment lines, notes of what is not expressed)."""
    p, m = pf.plan, pf.model
    msh = mesh(pf)
    keys: dict = {"base_config": "base.yml", "run_name": "perfmodel", "hardware": "tpu" if msh.tpu else "gpu"}
    notes = list(msh.notes)
    keys.update(_model(pf, notes))
    # the stored parameters and Adam's mu (nu follows weight_dtype): maxtext.mesh._state_dtype_changes
    keys.update(dtype="bfloat16", weight_dtype=_JAX_DTYPE[p.weight_dtype], mu_dtype=_JAX_DTYPE[p.moment_dtype])
    if p.precision in ("fp8", "int8"):  # AQT's int8 training: quantization int8 (configs/types.py QuantizationType)
        keys["quantization"] = p.precision
    for scope, degrees in (("ici", msh.ici), ("dcn", msh.dcn)):
        keys.update({f"{scope}_{_KEY.get(a, a)}_parallelism": degrees[a] for a in _AXES})
    if p.zero == 1:
        keys["shard_optimizer_over_data"] = True
    if p.optimizer_offload:  # the optimizer's shardings in pinned_host memory (maxtext_utils get_abstract_state)
        keys["optimizer_memory_host_offload"] = True
    # experts without expert parallelism: their weights stored by expert on embed_moe's mesh axes (fsdp and
    # context: base.yml logical_axis_rules), gathered whole for the grouped GEMMs as ZeRO-3 gathers them
    # (layers/moe.py wi/wo_kernel_axes, mlp_no_fsdp), no token dispatch; those axes must split the experts evenly,
    # with no tensor or expert axis (pyconfig's condition)
    split = msh.ici["fsdp"] * msh.dcn["fsdp"] * msh.ici["context"] * msh.dcn["context"]
    if m.moe is not None and p.ep == p.tp == 1 and p.zero == 3 and m.moe.n_experts % split == 0:
        keys["shard_exp_on_fsdp"] = True
    keys.update(remat_keys(p))
    if p.loss_chunks > 1:  # base.yml: the logits tiled along the batch-sequence axis
        keys["num_vocab_tiling"] = p.loss_chunks
    keys["attention"] = "autoselected" if p.attention == "flash" else "dot_product"
    keys.update(_batch(pf))
    launch = _launch(pf, msh)
    notes += _notes(pf)
    return keys, launch, notes


def _model(pf: PlanFile, notes: list[str]) -> dict:
    """The model's shape as base.yml's keys: a Llama-style decoder block (llama2: RMSNorm, RoPE, gated MLP, no
    biases), mixtral's for a mixture of experts; what those blocks do not have is noted."""
    m, p = pf.model, pf.plan
    out = {"decoder_block": "llama2" if m.moe is None else "mixtral", "base_emb_dim": m.hidden,
           "base_num_query_heads": m.n_heads, "base_num_kv_heads": m.n_kv_heads, "head_dim": m.head_dim,
           "base_mlp_dim": m.ffn_hidden, "base_num_decoder_layers": m.n_layers, "vocab_size": m.vocab,
           "max_target_length": p.seq_len,
           "mlp_activations": ["silu", "linear"] if m.mlp == "swiglu" else ["gelu"],
           "logits_via_embedding": m.tie_embeddings, "enable_dropout": m.dropout > 0}
    if m.dropout > 0:
        out["dropout_rate"] = m.dropout
    if m.moe is not None:
        e = m.moe
        # mixtral's block is MoE in every layer: types.py wants base_mlp_dim = base_moe_mlp_dim there
        out.update(num_experts=e.n_experts, num_experts_per_tok=e.top_k, base_mlp_dim=e.expert_ffn_hidden,
                   base_moe_mlp_dim=e.expert_ffn_hidden,
                   capacity_factor=-1.0 if p.moe_capacity_factor is None else p.moe_capacity_factor,  # -1: dropless
                   sparse_matmul=not p.moe_dense_dispatch)  # false: one-hot dispatch einsums (moe.py dense_matmul)
        if p.moe_capacity_factor is not None and not p.moe_pad_to_capacity and not p.moe_dense_dispatch:
            notes.append(f"moe_capacity_factor={p.moe_capacity_factor:g} without padding: MaxText's dropping path "
                         "dispatches into fixed [experts, capacity] buffers (layers/moe.py), so every expert runs "
                         "padded to its capacity; price it with moe_pad_to_capacity")
        if e.n_shared_experts or e.first_dense_layers or e.layer_freq > 1 or e.router_scoring != "softmax":
            notes.append(f"experts: shared experts ({e.n_shared_experts}), first dense layers "
                         f"({e.first_dense_layers}, ffn_hidden {m.ffn_hidden}), layer_freq ({e.layer_freq}), "
                         "router_scoring "
                         f"({e.router_scoring}) are not in the mixtral block; MaxText's own model configs "
                         "(configs/models/deepseek3-671b.yml, qwen3-30b-a3b.yml; model_name: NAME) carry them")
    if m.norm != "rmsnorm" or m.position != "rope" or m.linear_bias != "none":
        notes.append(f"norm={m.norm}, position={m.position}, linear_bias={m.linear_bias}: the llama2 / mixtral "
                     "decoder blocks are RMSNorm, RoPE, no biases (decoder_block gpt3 has LayerNorm, biases and "
                     "learned positions)")
    if m.position == "rope":
        notes.append("rope_max_timescale: base.yml's 10000 is kept; set the model's RoPE base (Llama 3: 500000)")
    if m.mla is not None or m.mtp_layers or m.sliding_window or m.linear_attention or m.sparse_attention \
            or m.attention_output_gate or m.global_attention:
        notes.append("latent attention, multi-token prediction, sliding windows, global layers' own head shape, "
                     "linear or sparse attention and gated attention outputs: set by MaxText's model configs "
                     "(model_name), not written here")
    return out


def _batch(pf: PlanFile) -> dict:
    """Without a pipeline: per_device_batch_size = the plan's micro-batch over the tensor and context axes (which
    hold the same sequences), accumulated num_microbatches times. With one: the whole batch in one step, split by
    MaxText's pipeline into the plan's num_microbatches (num_pipeline_microbatches; types.py)."""
    p, m = pf.plan, pf.model
    pdbs = per_device_batch(p)
    if p.pp == 1:
        return {"per_device_batch_size": int(pdbs) if pdbs.is_integer() else pdbs,
                "gradient_accumulation_steps": p.num_microbatches}
    return {"per_device_batch_size": int(pdbs) if pdbs.is_integer() else pdbs, "gradient_accumulation_steps": 1,
            "num_layers_per_pipeline_stage": m.n_layers // p.pp, "num_pipeline_microbatches": p.num_microbatches}


def _launch(pf: PlanFile, msh) -> list[str]:
    """How to run and check it: MaxText's train and its ahead-of-time compile for the target slice (train_compile:
    compile_topology and compile_topology_num_slices, no TPU needed). maxtext_check reads the second line."""
    p = pf.plan
    aot = (f"compile_topology={msh.topology} compile_topology_num_slices={msh.slices}" if msh.topology else
           f"internal_compile=true internal_compile_num_devices={p.gpus} compile_topology_num_slices={msh.slices}")
    where = (f"{msh.slices} slice{'s' if msh.slices > 1 else ''} of {msh.per_slice} devices ({msh.topology})"
             if msh.tpu else f"{p.gpus} GPUs")
    ax = data_axis(pf)
    out = [f"run on {where}: python3 -m maxtext.trainers.pre_train.train THIS_FILE.yml",
           f"aot: python3 -m maxtext.trainers.pre_train.train_compile THIS_FILE.yml {aot}",
           f"mesh: {f'data {p.dp_replicate} x ' if p.dp_replicate > 1 else ''}{ax} {p.dp // p.dp_replicate // p.ep} "
           f"(dp {p.dp}{f' as {p.dp_replicate} replicas' if p.dp_replicate > 1 else ''} over ep {p.ep}; "
           + {"fsdp": "zero=3: parameters, gradients and optimizer state sharded over fsdp",
              "data": "zero=1: replicas, optimizer state sharded over data (shard_optimizer_over_data)"
              if p.zero == 1 else "zero=0: replicas"}[ax]
           + f"), tensor {p.tp}, context {p.cp}, stage {p.pp}, expert {p.ep}; ici_* inside a slice, dcn_* across "
             "slices (stage first, then the data axis)",
           f"batch: {p.global_batch} sequences of {p.seq_len} a step = {p.gpus} devices x per_device_batch_size x "
           f"gradient_accumulation_steps"
           + (f"; {p.num_microbatches} pipeline micro-batches of {p.dp * p.micro_batch}" if p.pp > 1 else
              f"; micro-batch {p.micro_batch} per data-parallel rank ({p.dp} ranks) x {p.num_microbatches} steps")]
    return out


def _notes(pf: PlanFile) -> list[str]:
    p = pf.plan
    notes = []
    if p.recompute == "none":
        notes.append("recompute=none: MaxText 0.2.5 wraps every decoder layer in jax.checkpoint (remat_policy "
                     "'none' saves nothing, as 'full'); minimal_with_context keeps every projection's output and "
                     "the attention context, recomputing only element-wise ops (norms, activations)")
    policy = REMAT.get(p.recompute, "minimal")  # per-op: changed to selective (minimal) by nearest_plan
    saved = MAXTEXT_REMAT.get(policy, [])
    if p.recompute != "names" and names_unpriced(pf.model, saved) is None:
        flags = "--recompute names" + (f" --recompute-saved {','.join(saved)}" if saved else "")
        notes.append(f"recompute={p.recompute}: remat_policy {policy} is jax.checkpoint saving "
                     f"{', '.join(saved) or 'nothing but the layer input'}, and XLA re-runs only what the backward "
                     f"needs of the rest; perfmodel predict {flags} prices it as MaxText runs it")
    if p.cp > 1:
        notes.append(f"cp={p.cp}: MaxText's context axis with context_parallel_strategy all_gather (base.yml: keys "
                     "and values all-gathered, load-balanced causal chunks); its ring strategy needs tokamax "
                     "splash attention")
    if not p.overlap_dp_comm:
        notes.append("overlap_dp_comm=false: XLA schedules the data-parallel collectives itself (asynchronous, "
                     "beside compute); the config has no setting to serialise them")
    if p.pp > 1:
        notes.append(f"pp={p.pp}: MaxText pipelines the decoder layers only; embedding and LM head run on every "
                     "stage's devices (the stage axis is a batch axis for them)")
    notes += [f"per-operator placement of {d}: MaxText shards by its logical_axis_rules, not per operator"
              for d in placement_deviations(pf)]
    notes.append("data: base.yml's dataset_type synthetic, steps and checkpointing are kept; set dataset_type, "
                 "tokenizer_path, base_output_directory and steps for a real run")
    return notes
