"""torchtitan's model families and flavors as perfmodel models: the preset with the flavor's shape (checked against
perfmodel.export.torchtitan_model's flavor tables, the exporter's), a deepseek_v3 flavor without a preset built from
that table, or the sizes a config registry module gives a flavor it registers itself (the 0.3.0 export's
"perfmodel" flavor); anything else is refused naming the flavor. And the layers of each pipeline part torchtitan
gives a model when the config does not list them (torchtitan_parts)."""

from __future__ import annotations

from types import SimpleNamespace

from ..errors import InputError
from ..export.torchtitan_model import _LLAMA3_FLAVORS, _MOE_FLAVORS, moe_shape_of
from ..spec.model import MLAConfig, ModelConfig, MoEConfig
from ..spec.model_catalogue import load_model

# (family, flavor) -> the perfmodel preset with that shape (checked against the flavor tables at import)
_PRESETS = {("llama3", "8B"): "llama-3.1-8b", ("llama3", "70B"): "llama-3.1-70b",
            ("llama3", "405B"): "llama-3.1-405b", ("qwen3", "30B-A3B"): "qwen3-30b-a3b",
            ("qwen3", "235B-A22B"): "qwen3-235b-a22b", ("deepseek_v3", "671B"): "deepseek-v3",
            # torchtitan v0.2.2 models/llama4/__init__.py 17bx16e: dim 5120, 48 layers, 40 heads, 8 kv heads, 16
            # experts (MoEArgs: top_k 1, one shared expert, sigmoid); ffn 4*5120*2/3*1.2 rounded up to 2048 = 16384,
            # split over top_k + shared = 2 (auto_scale_hidden_dim): 8192 per expert; vocab 202048 (model/args.py)
            ("llama4", "17bx16e"): "llama-4-scout"}
# deepseek_v3 flavors without a preset: vocab_size (torchtitan v0.2.2 models/deepseek_v3/__init__.py)
_DEEPSEEK_VOCAB = {"16B": 102400, "236B": 102400}


def model_of(family: str, flavor: str, custom: dict | None = None) -> ModelConfig:
    """The model of torchtitan's `family` `flavor`: the perfmodel preset with its shape, a deepseek_v3 flavor built
    from the flavor table, or the sizes a registry module gives its own flavor."""
    if custom and custom.get("flavor") == flavor and family == "llama3" and custom.get("base") in _LLAMA3_FLAVORS:
        return _custom_llama3(custom)
    preset = _PRESETS.get((family, flavor))
    if preset is not None:
        model = load_model(preset)
        pf = SimpleNamespace(model=model)
        want = (_LLAMA3_FLAVORS.get(flavor) if family == "llama3" else _MOE_FLAVORS.get(family, {}).get(flavor))
        have = ((model.hidden, model.n_layers, model.n_heads, model.n_kv_heads, model.ffn_hidden) if family == "llama3"
                else moe_shape_of(pf))
        assert want is None or have == want, (family, flavor, have, want)
        if model.mtp_layers:  # torchtitan's deepseek_v3 flavors have no multi-token prediction
            model = ModelConfig(**{**model.model_dump(), "mtp_layers": 0, "mtp_acceptance": None,
                                   "name": f"{model.name}-no-mtp"})
        return model
    if family == "deepseek_v3" and flavor in _DEEPSEEK_VOCAB:
        return _deepseek(flavor)
    known = sorted({f"{fam} {fl}" for fam, fl in _PRESETS} | {f"deepseek_v3 {f}" for f in _DEEPSEEK_VOCAB})
    raise InputError(f"[model] name = {family}, flavor = {flavor}: perfmodel has no model with this torchtitan "
                     f"flavor's shape; valid: {', '.join(known)}")


def _custom_llama3(c: dict) -> ModelConfig:
    """The 0.3.0 export's "perfmodel" flavor: llama3 flavor `base`'s layout with the sizes it states."""
    base = load_model(_PRESETS[("llama3", c["base"])]).model_dump()
    try:
        dim, n_heads = c["dim"], c["n_heads"]
        return ModelConfig(**{**base, "name": f"torchtitan-llama3-{c['flavor']}", "hidden": dim,
                              "n_layers": c["n_layers"], "n_heads": n_heads, "n_kv_heads": c["n_kv_heads"],
                              "ffn_hidden": c["hidden_dim"], "vocab": c.get("vocab", base["vocab"]),
                              "head_dim": c.get("rope_dim", dim // n_heads)})
    except KeyError as err:
        raise InputError(f"flavor {c['flavor']!r}: its function states no {err.args[0]}; valid: a flavor built by "
                         "_build_llama3_layers(n_layers=, dim=, n_heads=, n_kv_heads=, hidden_dim=)") from None


def _deepseek(flavor: str) -> ModelConfig:
    """A deepseek_v3 flavor without a preset, from the exporter's flavor table on DeepSeek-V3's layout."""
    dim, nl, nh, _, ffn, ne, k, moe_ffn, shared, dense, score, (q, kv, nope, rope, v) = _MOE_FLAVORS["deepseek_v3"][
        flavor]
    base = load_model("deepseek-v3").model_dump()
    moe = MoEConfig(**{**base["moe"], "n_experts": ne, "top_k": k, "expert_ffn_hidden": moe_ffn,
                       "n_shared_experts": shared, "shared_ffn_hidden": moe_ffn, "first_dense_layers": dense,
                       "router_scoring": score})
    mla = MLAConfig(q_lora_rank=q or None, kv_lora_rank=kv, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                    v_head_dim=v)
    return ModelConfig(**{**base, "name": f"torchtitan-deepseek_v3-{flavor}", "hidden": dim, "n_layers": nl,
                          "n_heads": nh, "n_kv_heads": nh, "head_dim": nope + rope, "ffn_hidden": ffn,
                          "vocab": _DEEPSEEK_VOCAB[flavor], "moe": moe, "mla": mla, "mtp_layers": 0,
                          "mtp_acceptance": None, "fp8_weight_blocks": False,
                          "source": f"torchtitan v0.2.2 models/deepseek_v3/__init__.py flavor {flavor}"})


def torchtitan_parts(stages: int, n_layers: int, first_less: int, last_less: int) -> list[int]:
    """Layers of each model part when module_fqns_per_model_part is not given (torchtitan's
    generate_llm_fqn_per_model_part): n_layers + the input and output weights split evenly over the stages, the
    remainder one each to the first stages, the first stage giving up first_less, the last last_less."""
    effective = n_layers + first_less + last_less
    per, extra = divmod(effective, stages)
    parts = [per + (i < extra) for i in range(stages)]
    parts[0] -= first_less
    parts[-1] -= last_less
    if min(parts) < 1:
        raise InputError(f"{stages} pipeline stages over {n_layers} layers (+{first_less} input, +{last_less} output) "
                         "leave a stage empty; valid: fewer stages or pipeline_parallel_*_stage_less_layers")
    return parts
