"""MaxText's model as a ModelConfig: the decoder block's shape keys (a configs/models/<model_name>.yml over
base.yml) read by the block that uses them (BLOCKS), and model_name's perfmodel preset
(spec.model.catalogue.preset_for_name) checked against them.

What each block builds (maxtext e591f30cbbf217ed67ef71263ec0538239f9c3b8, src/maxtext/models/ and layers/): every
block has RMSNorm and rotary positions; the MLP is gated (three matrices) where mlp_activations is [act, linear]
(layers/linears.py MlpBlock). MoE layers (layers/moe.py RoutedAndSharedMoE) hold num_experts experts of
base_moe_mlp_dim, num_experts_per_tok a token, and shared_experts x the shared width (maxtext_utils.
get_shared_expert_mlp_dim: base_mlp_dim on gemma4, base_moe_mlp_dim elsewhere) that every token uses.
- llama2 / mistral / mixtral / qwen3 / qwen3_moe: the base_* shape (mixtral, qwen3_moe: MoE on every layer).
- gemma3 / gemma4: GEMMA3_ATTENTION_PATTERN / GEMMA4_ATTENTION_PATTERN, five sliding_window_size layers then one
  global (layer i global where i % 6 == 5); gemma4's global layers have global_head_dim heads, global_num_kv_heads
  kv heads and, with share_kv_projections, one projection for keys and values (models/gemma4.py).
- deepseek: attention_type mla (q_lora_rank 0: no query latent), first_num_dense_layers dense layers first,
  routed_score_func sigmoid (models/deepseek.py).
- gpt_oss: GPT_OSS_ATTENTION_PATTERN (sliding, global) alternating; attention_bias on the projections, routed_bias on
  the router, mlp_bias on the experts (models/gpt_oss.py).
- llama4: MoE on layer i where (i + 1) % interleave_moe_layer_step == 0 (llama4.py determine_is_moe_layer), a dense
  MLP of base_mlp_dim on the others, the router scored by a sigmoid (layers/moe.py).
"""

from __future__ import annotations

from typing import Any, Callable

from ...errors import InputError
from ...spec.model.config import ModelConfig

# the keys each block reads, beside the common shape (COMMON)
COMMON = {"base_emb_dim": "hidden", "base_num_query_heads": "n_heads", "base_num_kv_heads": "n_kv_heads",
          "head_dim": "head_dim", "base_mlp_dim": "ffn_hidden", "base_num_decoder_layers": "n_layers",
          "vocab_size": "vocab", "logits_via_embedding": "tie_embeddings", "mlp_activations": "mlp"}
MOE = ("num_experts", "num_experts_per_tok", "base_moe_mlp_dim", "shared_experts", "first_num_dense_layers")


class Shape:
    """ModelConfig fields (dotted: moe.n_experts) and, for each key read, the fields it gave."""

    def __init__(self, cfg, scale: dict[str, int]) -> None:
        self.cfg, self.scale, self.fields, self.keys = cfg, scale, {}, {}

    def num(self, key: str) -> int:
        v = self.cfg.number(key, int)
        return v * 2 ** self.scale.get(key, 0) if v > 0 else v

    def set(self, field: str, value, *keys: str) -> None:
        self.fields[field] = value
        for k in keys:
            self.keys.setdefault(k, []).append(field)

    def nested(self) -> dict[str, Any]:
        """The fields as ModelConfig takes them (moe.x -> moe: {x: ...})."""
        out: dict[str, Any] = {}
        for f, v in self.fields.items():
            if "." in f:
                sub, name = f.split(".")
                out.setdefault(sub, {})[name] = v
            else:
                out[f] = v
        return out


def mlp_kind(v) -> str:
    """mlp_activations -> ModelConfig.mlp: [act, linear] is gated, act(x W0) * (x W1), three matrices; one activation
    two matrices (layers/linears.py MlpBlock)."""
    acts = [str(a) for a in v] if isinstance(v, list) else [str(v)]
    gates = ("silu", "gelu", "sigmoid", "relu")
    if len(acts) == 2 and "linear" in acts and set(acts) - {"linear"} <= set(gates):
        return "swiglu"
    if len(acts) == 1 and acts[0] in gates:
        return "gelu"
    raise InputError(f"mlp_activations = {v}: valid: [silu, linear] (gated), [gelu, linear], [sigmoid, linear] or "
                     "[gelu]")


def _common(s: Shape) -> None:
    cfg = s.cfg
    for key, field in COMMON.items():
        if field == "mlp":
            s.set("mlp", mlp_kind(cfg.value(key)), key)
        elif field == "tie_embeddings":
            s.set(field, bool(cfg.value(key)), key)
        else:
            s.set(field, s.num(key), key)
    s.set("norm", "rmsnorm", "decoder_block")
    s.set("position", "rope", "decoder_block")


def _moe(s: Shape, shared_width: str | None = None, layer_freq: str | None = None,
         scoring: str | None = None) -> None:
    """The MoE keys: routed experts, shared experts (shared_experts x `shared_width`, on the blocks that build
    RoutedAndSharedMoE: deepseek, llama4, gemma4; the others' RoutedMoE ignores shared_experts), leading dense layers,
    the MoE layers' stride and the router's score function."""
    n = s.num("num_experts")
    if n <= 1:  # MaxText builds no MoE block: the other MoE keys are unused (base.yml's shared_experts was 1)
        return
    width = s.num("base_moe_mlp_dim")
    width = width if width > 0 else s.num("base_mlp_dim")
    s.set("moe.n_experts", n, "num_experts")
    s.set("moe.top_k", s.num("num_experts_per_tok"), "num_experts_per_tok")
    s.set("moe.expert_ffn_hidden", width, "base_moe_mlp_dim")
    shared = s.num("shared_experts") if shared_width else 0
    if shared > 0:
        s.set("moe.n_shared_experts", shared, "shared_experts")
        s.set("moe.shared_ffn_hidden", shared * (width if shared_width == "base_moe_mlp_dim" else s.num(shared_width)),
              "shared_experts")
    s.set("moe.first_dense_layers", max(s.num("first_num_dense_layers"), 0), "first_num_dense_layers")
    if layer_freq:
        s.set("moe.layer_freq", max(s.num(layer_freq), 1), layer_freq)
    func = scoring or str(s.cfg.value("routed_score_func") or "softmax")
    if func not in ("softmax", "sigmoid"):
        raise InputError(f"routed_score_func = {func!r}: valid: softmax, sigmoid")
    s.set("moe.router_scoring", func, *([] if scoring else ["routed_score_func"]))


def _windowed(s: Shape, pattern: int) -> None:
    """sliding_window_size on the layers a pattern of `pattern` layers (the last of them global) windows."""
    window = s.num("sliding_window_size")
    if window > 0:
        s.set("sliding_window", window, "sliding_window_size")
        s.set("sliding_window_layers", sum(i % pattern != pattern - 1 for i in range(s.fields["n_layers"])),
              "sliding_window_size")


def llama(s: Shape) -> None:
    _common(s)
    _moe(s)


def gemma3(s: Shape) -> None:
    _common(s)
    _windowed(s, 6)


def gemma4(s: Shape) -> None:
    gemma3(s)
    head, kv = s.num("global_head_dim"), s.num("global_num_kv_heads")
    shared = bool(s.cfg.value("share_kv_projections"))
    if head > 0 or kv > 0 or shared:
        s.set("global_attention", {"head_dim": head if head > 0 else s.fields["head_dim"],
                                   "n_kv_heads": kv if kv > 0 else s.fields["n_kv_heads"], "shared_kv": shared},
              "global_head_dim", "global_num_kv_heads", "share_kv_projections")
    _moe(s, "base_mlp_dim")


def gemma4_small(s: Shape) -> None:
    for key, what in (("hidden_size_per_layer_input", "per-layer input embeddings"),
                      ("num_kv_shared_layers", "layers that reuse an earlier layer's keys and values")):
        if s.num(key) > 0:
            raise InputError(f"{key} = {s.cfg.value(key)} (decoder_block gemma4_small): {what} are not priced by "
                             "perfmodel (spec.model.hf_gemma4 refuses them too); valid: 0, or a model without them")
    gemma4(s)


def deepseek(s: Shape) -> None:
    _common(s)
    _moe(s, "base_moe_mlp_dim")
    if s.cfg.value("attention_type") == "mla":
        nope, rope = s.num("qk_nope_head_dim"), s.num("qk_rope_head_dim")
        q = s.num("q_lora_rank")
        s.set("mla", {"q_lora_rank": q if q > 0 else None, "kv_lora_rank": s.num("kv_lora_rank"),
                      "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": s.num("v_head_dim")},
              "attention_type", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        s.set("head_dim", nope + rope, "qk_nope_head_dim")


def gpt_oss(s: Shape) -> None:
    _common(s)
    _moe(s)
    _windowed(s, 2)
    s.set("linear_bias", "all" if s.cfg.value("attention_bias") else "none", "attention_bias")
    if "moe.n_experts" in s.fields:
        s.set("moe.router_bias", bool(s.cfg.value("routed_bias")), "routed_bias")
        s.set("moe.expert_bias", bool(s.cfg.value("mlp_bias")), "mlp_bias")


def llama4(s: Shape) -> None:
    _common(s)
    _moe(s, "base_moe_mlp_dim", layer_freq="interleave_moe_layer_step", scoring="sigmoid")


BLOCKS: dict[str, Callable[[Shape], None]] = {
    "llama2": llama, "mistral": llama, "mixtral": llama, "qwen3": llama, "qwen3_moe": llama, "gemma3": gemma3,
    "gemma4": gemma4, "gemma4_small": gemma4_small, "deepseek": deepseek, "gpt_oss": gpt_oss, "llama4": llama4}
# keys a block reads without a ModelConfig field, and why (the ledger's reason)
UNCOUNTED = {
    "attention_sink": "one sink logit a head (gpt-oss): not counted, as the perfmodel presets do not",
    "chunk_attn_window_size": "Llama 4's chunked local attention: priced as full causal attention (as perfmodel's "
                              "llama-4 presets)",
    "nope_layer_interval": "layers without rotary positions (Llama 4): no parameters or FLOPs of their own",
    "use_qk_norm": "query/key RMSNorm scales: not counted (ModelConfig has two norms a layer)",
    "routed_bias": "DeepSeek's routing bias (aux-loss-free balancing): no FLOPs, one value an expert",
    "inhomogeneous_layer_cycle_interval": "how MaxText scans the repeating layer pattern: the pattern itself is read",
}


def block_shape(cfg, scale: dict[str, int]) -> Shape:
    """The decoder block's shape (`cfg`: maxtext.reader.Config); refused for a block perfmodel does not read."""
    block = cfg.value("decoder_block")
    if block not in BLOCKS:
        raise InputError(f"decoder_block = {block!r}: perfmodel reads the shape of MaxText's {', '.join(BLOCKS)} "
                         "blocks; valid: one of them, or a model_name with a perfmodel preset (perfmodel models list)")
    s = Shape(cfg, scale)
    BLOCKS[block](s)
    return s


def differences(preset: ModelConfig, built: ModelConfig, fields) -> dict[str, tuple[Any, Any]]:
    """field -> (preset's, files') for the top-level `fields` where the two models differ (sub-configs compared
    whole); ffn_hidden not where every layer is a MoE layer (Qwen3-MoE's base_mlp_dim, Llama 4 Scout's: no layer
    runs that MLP)."""
    out = {}
    moe = built.moe
    unused = moe is not None and moe.layer_freq == 1 and moe.first_dense_layers == 0  # no layer runs the dense MLP
    for f in {f.split(".")[0] for f in fields} - ({"ffn_hidden"} if unused else set()):
        a, b = getattr(preset, f), getattr(built, f)
        a, b = (a.model_dump() if hasattr(a, "model_dump") else a), (b.model_dump() if hasattr(b, "model_dump") else b)
        if a != b:
            out[f] = (a, b)
    return out
