"""torchtitan's model families and flavors as perfmodel models: the preset `spec.model.catalogue.preset_for_name`
names for "<family> <flavor>", checked against the flavor's shape as torchtitan's source states it
(spec.model.torchtitan_flavors for llama3 and the experts families the exporter writes; _SHAPES for the rest); a
deepseek_v3 flavor without a preset built from that table; or the sizes a config registry module gives a
flavor it registers itself (the 0.3.0 export's "perfmodel"). Anything else is refused naming the flavor. And the layers
of each pipeline part torchtitan gives a model when the config does not list them (torchtitan_parts)."""

from __future__ import annotations

from ...errors import InputError
from ...spec.model.config import MLAConfig, ModelConfig, MoEConfig
from ...spec.model.torchtitan_flavors import LLAMA3_FLAVORS, MOE_FLAVORS, llama3_shape, moe_shape
from ...spec.model.catalogue import list_models, load_model, preset_for_name

# Flavors spec.model.torchtitan_flavors does not hold, as torchtitan's source states them: hidden, n_layers, n_heads,
# n_kv_heads, vocab, the FFN width (each expert's, with experts), experts, top_k, every how many layers has experts.
_SHAPES = {
    # torchtitan b5bcd76c (2026-08) torchtitan/models/llama3/__init__.py _1b, _3b: hidden_dim compute_ffn_hidden_dim
    # (int(2 * 4 * dim / 3) x ffn_dim_multiplier, rounded up to multiple_of): 8192 both
    ("llama3", "1B"): (2048, 16, 32, 8, 128256, 8192, 0, 0, 0),
    ("llama3", "3B"): (3072, 28, 24, 8, 128256, 8192, 0, 0, 0),
    # b5bcd76c torchtitan/models/qwen3/__init__.py _0_6b .. _32b (head_dim 128; the same sizes in experiments/qwen3 at
    # 2bfcdd8e, 2025-08)
    ("qwen3", "0.6B"): (1024, 28, 16, 8, 151936, 3072, 0, 0, 0),
    ("qwen3", "1.7B"): (2048, 28, 16, 8, 151936, 6144, 0, 0, 0),
    ("qwen3", "4B"): (2560, 36, 32, 8, 151936, 9728, 0, 0, 0),
    ("qwen3", "8B"): (4096, 36, 32, 8, 151936, 12288, 0, 0, 0),
    ("qwen3", "14B"): (5120, 40, 40, 8, 151936, 17408, 0, 0, 0),
    ("qwen3", "32B"): (5120, 64, 64, 8, 151936, 25600, 0, 0, 0),
    # b5bcd76c torchtitan/models/gpt_oss/__init__.py _20b, _120b; n_heads 64, n_kv_heads 8: _make_gptoss_attn_config's
    # defaults
    ("gpt_oss", "20b"): (2880, 24, 64, 8, 201088, 2880, 32, 4, 1),
    ("gpt_oss", "120b"): (2880, 36, 64, 8, 201088, 2880, 128, 4, 1),
    # 2bfcdd8e (2025-08) torchtitan/experiments/llama4/__init__.py llama4_configs (v0.2.2 models/llama4, the same):
    # vocab 202048 (model/args.py); ffn 4 x 5120 x 2/3 x 1.2 rounded up to 2048 = 16384 over top_k + one shared
    # expert = 8192 per expert; interleave_moe_layer_step 1 stated for 17bx16e, args.py's default 2 for 17bx128e
    ("llama4", "17bx16e"): (5120, 48, 40, 8, 202048, 8192, 16, 1, 1),
    ("llama4", "17bx128e"): (5120, 48, 40, 8, 202048, 8192, 128, 1, 2),
}
# deepseek_v3 flavors without a preset: vocab_size (torchtitan v0.2.2 models/deepseek_v3/__init__.py; b5bcd76c the same)
_DEEPSEEK_VOCAB = {"16B": 102400, "236B": 102400}


def model_of(family: str, flavor: str, custom: dict | None = None) -> ModelConfig:
    """The model of torchtitan's `family` `flavor`: the perfmodel preset with its shape, a deepseek_v3 flavor built
    from the flavor table, or the sizes a registry module gives its own flavor."""
    if custom and custom.get("flavor") == flavor and family == "llama3" and custom.get("base") in LLAMA3_FLAVORS:
        return _custom_llama3(custom)
    preset = _preset(family, flavor)
    if preset is not None:
        model = load_model(preset)
        want, have = _stated(family, flavor), _shape_like(family, flavor, model)
        assert want is None or have == want, (family, flavor, have, want)  # the catalogue's error, not the user's
        if model.mtp_layers:  # torchtitan's deepseek_v3 flavors train without multi-token prediction by default
            model = ModelConfig(**{**model.model_dump(), "mtp_layers": 0, "mtp_acceptance": None,
                                   "name": f"{model.name}-no-mtp"})
        return model
    if family == "deepseek_v3" and flavor in _DEEPSEEK_VOCAB:
        return _deepseek(flavor)
    known = sorted({f"{fam} {fl}" for fam, fl in _known() if _preset(fam, fl)}
                   | {f"deepseek_v3 {f}" for f in _DEEPSEEK_VOCAB})
    raise InputError(f"[model] name = {family}, flavor = {flavor}: perfmodel has no model with this torchtitan "
                     f"flavor's shape; valid: {', '.join(known)}")


def _preset(family: str, flavor: str) -> str | None:
    """The catalogue's preset for torchtitan's "<family> <flavor>", where the catalogue holds it."""
    name = preset_for_name(f"{family} {flavor}", "torchtitan")
    return name if name in list_models() else None


def _known() -> set[tuple[str, str]]:
    return ({("llama3", f) for f in LLAMA3_FLAVORS} | {(fam, f) for fam, fl in MOE_FLAVORS.items() for f in fl}
            | set(_SHAPES))


def _stated(family: str, flavor: str):
    """The flavor's shape as torchtitan states it, in the terms of the table holding it; None where none does."""
    if family == "llama3" and flavor in LLAMA3_FLAVORS:
        return LLAMA3_FLAVORS[flavor]
    if flavor in MOE_FLAVORS.get(family, {}):
        return MOE_FLAVORS[family][flavor]
    return _SHAPES.get((family, flavor))


def _shape_like(family: str, flavor: str, m: ModelConfig):
    """The model in the terms of the table that holds the flavor."""
    if family == "llama3" and flavor in LLAMA3_FLAVORS:
        return llama3_shape(m)
    if flavor in MOE_FLAVORS.get(family, {}):
        return moe_shape(m)
    e = m.moe
    return (m.hidden, m.n_layers, m.n_heads, m.n_kv_heads, m.vocab, e.expert_ffn_hidden if e else m.ffn_hidden,
            e.n_experts if e else 0, e.top_k if e else 0, e.layer_freq if e else 0)


def _custom_llama3(c: dict) -> ModelConfig:
    """The 0.3.0 export's "perfmodel" flavor: llama3 flavor `base`'s layout with the sizes it states."""
    base = load_model(_preset("llama3", c["base"])).model_dump()
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
    """A deepseek_v3 flavor without a preset, from its MOE_FLAVORS sizes on DeepSeek-V3's layout."""
    dim, nl, nh, _, ffn, ne, k, moe_ffn, shared, dense, score, (q, kv, nope, rope, v) = MOE_FLAVORS["deepseek_v3"][
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


def split_point_parts(points: list, n_layers: int) -> list[int]:
    """Layers of each part from pipeline_parallel_split_points (torchtitan before module_fqns_per_model_part,
    3cabf56b config_manager.py: "layers.0,layers.2" starts a part at layers.0 and one at layers.2): the layers
    between consecutive points."""
    starts = []
    for p in points:
        head, _, index = str(p).partition(".")
        if head != "layers" or not index.isdigit() or not 0 < int(index) < n_layers:
            raise InputError(f"parallelism.pipeline_parallel_split_points: {p!r}; valid: layers.N with 0 < N < "
                             f"{n_layers}, each part holding a layer")
        starts.append(int(index))
    bounds = [0, *starts, n_layers]
    parts = [b - a for a, b in zip(bounds, bounds[1:])]
    if min(parts) < 1:
        raise InputError(f"parallelism.pipeline_parallel_split_points = {points}: a part holds no layer; valid: "
                         "increasing layers.N")
    return parts


def generated_split_parts(stages: int, n_layers: int) -> list[int]:
    """Layers of each part when no split points are given, before 3c84ce09 (2025-07-30) (3cabf56b
    parallelisms/pipeline.py generate_split_points): n_layers // stages to the first part, one more to each middle part
    while the remainder lasts, the rest to the last."""
    if stages > n_layers:
        raise InputError(f"{stages} pipeline stages over {n_layers} layers; valid: at most one stage per layer")
    base, extra = divmod(n_layers, stages)
    parts = [base] + [base + (i < extra) for i in range(stages - 2)]
    return parts + [n_layers - sum(parts)] if stages > 1 else [n_layers]
