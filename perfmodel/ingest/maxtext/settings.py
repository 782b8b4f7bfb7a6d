"""MaxText's precision, remat policy and MoE keys as plan fields (perfmodel.ingest.maxtext.reader's `Config`):
quantization / dtype -> precision; weight_dtype, grad_dtype, mu_dtype -> the state's dtypes (configs/types.py:
mu_dtype defaults to weight_dtype; trainers/pre_train/train.py casts fp32 gradients to grad_dtype); remat_policy ->
recompute (spec.plan.recompute MAXTEXT_REMAT / MAXTEXT_OFFLOADED / MAXTEXT_CHECKPOINT_NAMES, the inverse of
export.maxtext.mesh.remat_keys); capacity_factor / sparse_matmul -> the MoE dispatch. maxtext e591f30's base.yml.
"""

from __future__ import annotations

from ...errors import InputError
from ...spec.model.config import ModelConfig
from ...spec.plan.layout import Plan
from ...spec.plan.recompute import (
    MAXTEXT_CHECKPOINT_NAMES, MAXTEXT_KV_NAMES, MAXTEXT_OFFLOADED, MAXTEXT_REMAT, names_unpriced,
)

# remat_policy custom's checkpoint names (base.yml); those outside MAXTEXT_CHECKPOINT_NAMES have no names tensor
_REMAT_NAMES = ("decoder_layer_input", "context", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo", "moe_mlpwi_0",
                "moe_mlpwi_1", "moe_mlpwo", "query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj", "out_proj",
                "query_wa_proj", "kv_wa_proj", "mla_q", "mla_kv", "attention_out", "engram",
                "indexer_cutoff_threshold")
# quantization (configs/types.py QuantizationType) -> plan precision; nanoo_fp8 is AMD's fp8 (e4m3fnuz)
_QUANT = {"": "bf16", "fp8": "fp8", "fp8_full": "fp8", "nanoo_fp8": "fp8", "int8": "int8",
          "te_fp8_delayedscaling": "fp8", "te_fp8_currentscaling": "fp8", "te_mxfp8": "fp8"}
_DTYPE = {"float32": "fp32", "bfloat16": "bf16"}


def precision(cfg) -> None:
    """quantization / dtype -> plan.precision; weight_dtype, grad_dtype, mu_dtype -> the state's dtypes."""
    q, dtype = str(cfg.value("quantization") or ""), cfg.value("dtype")
    if dtype not in ("bfloat16", "float32", "float16"):
        raise InputError(f"dtype = {dtype!r}: valid: bfloat16, float32, float16")
    if q in _QUANT:
        prec = _QUANT[q] if q or dtype != "float16" else "fp16"
        why = {"nanoo_fp8": "AMD's fp8 (e4m3fnuz) GEMMs, priced as fp8", "int8": "AQT int8 GEMMs"}.get(q, "")
        cfg.put("quantization", why, plan__precision=prec)
    else:
        prec = "fp16" if dtype == "float16" else "bf16"
        cfg.skip("quantization", f"quantization = {q} is not priced (perfmodel has no model of it); its GEMMs are "
                                 f"priced in {prec}")
    cfg.put("dtype", "the activations' compute dtype" + ("; float32 activations are not priced, bf16 GEMMs are"
                                                         if dtype == "float32" else ""), plan__precision=prec)
    w, g = cfg.value("weight_dtype"), cfg.value("grad_dtype")
    for key, v in (("weight_dtype", w), ("grad_dtype", g), ("mu_dtype", cfg.value("mu_dtype") or w)):
        if v not in _DTYPE:
            raise InputError(f"{key} = {v!r}: valid: float32, bfloat16")
    grads = "bf16" if "bfloat16" in (w, g) else "fp32"  # train.py casts fp32 gradients to grad_dtype
    fields = {"plan__grad_dtype": grads}
    if "weight_dtype" in Plan.model_fields:
        fields["plan__weight_dtype"] = _DTYPE[w]
    cfg.put("weight_dtype", "the parameters' stored dtype (gradients follow it)", **fields)
    cfg.put("grad_dtype", "fp32 gradients cast to it (train.py)", plan__grad_dtype=grads)
    mu = cfg.value("mu_dtype") or w  # types.py: mu_dtype defaults to weight_dtype
    if "moment_dtype" in Plan.model_fields:
        cfg.put("mu_dtype", "Adam's moments (default: weight_dtype)", plan__moment_dtype=_DTYPE[mu])
    else:
        cfg.skip("mu_dtype", "Adam's moment dtype: not priced in this perfmodel (no plan field)")


def remat(cfg, model: ModelConfig) -> None:
    """remat_policy -> recompute: full is full recompute; the named policies and custom are the names policy
    (spec.plan.recompute MAXTEXT_REMAT: the tensors each saves, MAXTEXT_OFFLOADED those in host memory)."""
    policy = cfg.value("remat_policy")
    if policy == "full":
        cfg.put("remat_policy", "jax.checkpoint of each layer saving its input", plan__recompute="full")
        return
    if policy == "custom":
        kept, off = [], []
        for tensor, names in MAXTEXT_CHECKPOINT_NAMES.items():
            places = {n: cfg.value(n) or "remat" for n in names}
            for n, v in places.items():
                if v not in ("remat", "device", "offload"):
                    raise InputError(f"{n} = {v!r} (remat_policy custom): valid: remat, device, offload")
            held = [v for v in places.values() if v != "remat"]
            if tensor == "qkv" and held and all(places[n] == "remat" for n in names if n not in MAXTEXT_KV_NAMES):
                tensor = "kv"  # key_proj / value_proj kept, query_proj rebuilt (attentions.py:1125-1127 at a0fceb5)
            if held:
                kept.append(tensor)
            if held and all(v == "offload" for v in held):
                off.append(tensor)
            elif "offload" in held:
                raise InputError(f"remat_policy custom offloads part of {tensor} ({', '.join(names)}) and keeps part "
                                 "on device: not priced; valid: one placement for all of them")
            for n in names:
                cfg.put(n, f"{tensor} {'offloaded' if tensor in off else 'kept' if tensor in kept else 'recomputed'}")
        saved = [t for t in kept if t != "layer_input"]
        if cfg.value("decoder_layer_input") == "remat":
            raise InputError("decoder_layer_input = remat: MaxText keeps each layer's input (base.yml); valid: "
                             "device, offload")
        for n in _REMAT_NAMES:
            if n not in cfg.done and cfg.value(n) not in (None, "remat"):
                cfg.skip(n, f"{n} = {cfg.value(n)}: perfmodel's names policy has no tensor for it; priced as "
                            "recomputed" if n != "mlpwo" else "mlpwo's output feeds only the residual add: keeping it "
                                                               "keeps nothing the backward needs")
    elif policy in MAXTEXT_REMAT:
        saved, off = list(MAXTEXT_REMAT[policy]), list(MAXTEXT_OFFLOADED.get(policy, []))
        for n in _REMAT_NAMES:
            cfg.skip(n, "used only with remat_policy custom")
    else:
        raise InputError(f"remat_policy = {policy!r}: valid: full, custom, {', '.join(MAXTEXT_REMAT)}")
    if names_unpriced(model, saved):
        fallback = {"minimal": "selective", "minimal_with_context": "none"}.get(policy)
        if fallback is None or off:
            raise InputError(f"remat_policy = {policy} on {model.name}: the names policy does not price "
                             f"{names_unpriced(model, saved)}; valid: remat_policy full, minimal or "
                             "minimal_with_context, or custom without mlpwi")
        cfg.put("remat_policy", f"names does not price {names_unpriced(model, saved)}: priced as {fallback} "
                                "(export.maxtext.mesh.REMAT)", plan__recompute=fallback)
        return
    cfg.put("remat_policy", f"jax.checkpoint saving the layer input and {', '.join(saved) or 'nothing else'}",
            plan__recompute="names", plan__recompute_saved=saved, plan__recompute_offloaded=off or None)


def moe(cfg, model: ModelConfig) -> None:
    """capacity_factor -> moe_capacity_factor (-1: dropless); sparse_matmul false -> dense dispatch."""
    keys = ("capacity_factor", "sparse_matmul", "megablox", "shard_exp_on_fsdp")
    if model.moe is None:
        for k in keys:
            cfg.skip(k, "not used: a dense model")
        return
    cf = cfg.number("capacity_factor")
    cfg.put("capacity_factor", "dropless" if cf <= 0 else "token dropping",
            plan__moe_capacity_factor=None if cf <= 0 else float(cf))
    if cfg.value("sparse_matmul"):
        cfg.put("sparse_matmul", "grouped GEMMs on the routed tokens")
    elif "moe_dense_dispatch" in Plan.model_fields:
        cfg.put("sparse_matmul", "dense dispatch into [experts, capacity] buffers", plan__moe_dense_dispatch=True)
    else:
        cfg.skip("sparse_matmul", "sparse_matmul = false (dense one-hot dispatch) is not priced: perfmodel prices "
                                  "grouped GEMMs on the routed tokens")
    cfg.skip("megablox", "the grouped-GEMM kernel (megablox or jax ragged_dot): not priced, one GEMM table prices both")
    cfg.skip("shard_exp_on_fsdp", "where the expert weights are stored: perfmodel's zero = 3 shards them over the "
                                  "data-parallel ranks as it shards every weight")
