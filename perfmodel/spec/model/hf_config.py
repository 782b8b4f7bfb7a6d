"""HuggingFace config.json onto ModelConfig: dense (gpt2, llama, mistral, qwen2, qwen3, mimo, gpt_neox, gemma3, gemma4) and
mixture-of-experts / multi-head latent attention model types (mixtral, qwen3_moe, minimax_m2, deepseek_v3 and
kimi_k2, deepseek_v32 and glm_moe_dsa with sparse attention, gpt_oss, llama4), and the multimodal wrappers whose
text model is one of them (llama4, kimi_k25, qwen3_vl, qwen3_vl_moe, gemma3, gemma4: the vision tower is not priced). Every read is
typed and names the key when it fails (one-line InputError); an architecture the cost model cannot price yet is
refused naming the one field that makes it so (`UNPRICED`)."""

from __future__ import annotations

from ...errors import InputError
from ...types import MAX_COUNT
from .config import MAX_LAYERS, ModelConfig
from .hf_gemma4 import gemma4_fields
from .presets import DEEPSEEK_V3_MTP_ACCEPTANCE

# Keys that count layers (or steps between MoE layers): up to MAX_LAYERS, as ModelConfig takes; other counts (widths,
# heads, experts, positions, vocabulary) up to MAX_COUNT.
_LAYER_KEYS = ("n_layer", "num_hidden_layers", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
               "interleave_moe_layer_step", "num_nextn_predict_layers", "num_mtp_modules", "mtp_transformer_layers",
               "full_attention_interval", "mtp_num_hidden_layers")
# Multimodal configs read for their text model only: the wrapper's type -> the text_config's own type, as
# transformers (Llama4Config, Qwen3VLConfig, Qwen3VLMoeConfig) and Kimi-K2.5's configuration_kimi_k25.py nest it.
WRAPPERS = {"llama4": "llama4_text", "kimi_k25": "kimi_k2", "qwen3_vl": "qwen3_vl_text",
            "qwen3_vl_moe": "qwen3_vl_moe_text", "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text",
            "gemma3": "gemma3_text", "gemma4": "gemma4_text"}
# Hybrid models of Gated DeltaNet and gated full attention (Qwen3-Next, Qwen3.5): transformers' Qwen3NextConfig keys
GDN_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
# Text model types read as another with the same keys: Qwen3-VL's text models are Qwen3 / Qwen3-MoE with
# interleaved multimodal rotary positions (no parameters); MiMo is Qwen2 (q/k/v biases) with MTP modules.
SAME_AS = {"qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe", "mimo": "qwen2"}
MLA_TYPES = ("deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa")
HF_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "gpt_neox", "qwen3", "mixtral", "qwen3_moe", "minimax_m2",
                  "step3p7", "gemma3_text", "gemma4_text", *GDN_TYPES, *MLA_TYPES, "gpt_oss", "llama4_text", *SAME_AS, *WRAPPERS)
# Architectures read but not priced yet: model_type -> (the field that makes it so, what it holds). The refusal
# names that field, so a user knows what is missing rather than that the name is unknown.
UNPRICED = {
    "nemotron_h": ("hybrid_override_pattern", "Mamba-2 layers ('M': a recurrent state per sequence)"),
    "deepseek_v4": ("compress_ratios", "DeepSeek-V4's compressed sparse attention (keys compressed per layer)"),
    "deepseek_ref": ("compress_ratios", "DeepSeek-V4's compressed sparse attention (keys compressed per layer)"),
    "minimax_m3": ("sparse_attention_config", "MiniMax-M3's block-sparse attention"),
    "minimax_m3_vl": ("text_config.sparse_attention_config", "MiniMax-M3's block-sparse attention"),
    "kimi_k3": ("text_config.linear_attn_config", "Kimi Delta Attention layers (linear attention)"),
    "mimo_v2_flash": ("swa_num_key_value_heads", "windowed layers with head counts of their own (and a value "
                                                 "width, v_head_dim, unlike the key's)"),
    "nemotron-nas": ("block_configs", "per-layer block shapes (layers without attention, MLP widths of their own)"),
}


class _HFConfig:
    """Typed access to a config.json: every read checks the type and range and names the key when it fails."""

    def __init__(self, cfg: dict, where: str):
        self.cfg, self.where, self.type = cfg, where, cfg.get("model_type")

    def _bad(self, key: str, valid: str) -> InputError:
        return InputError(f"{self.where}: {key} = {self.cfg.get(key)!r} is not valid; valid: {valid}")

    def _required(self, key: str, hint: str = "") -> InputError:
        return InputError(f"{self.where}: field '{key}' is required for model_type '{self.type}'{hint}")

    def _int(self, key: str, default, least: int):
        v = self.cfg.get(key)
        if v is None:
            if default is ...:
                raise self._required(key)
            return default
        most = MAX_LAYERS if key in _LAYER_KEYS else MAX_COUNT
        if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= most:
            raise self._bad(key, f"{'a positive' if least > 0 else 'a non-negative'} integer up to {most}")
        return v

    def count(self, key: str, default=...):
        """A positive integer; `default` when absent or null (required when no default)."""
        return self._int(key, default, 1)

    def count0(self, key: str, default=...):
        """A non-negative integer (e.g. a number of leading dense layers); `default` when absent or null."""
        return self._int(key, default, 0)

    def optional_count(self, key: str, meaning_of_null: str):
        """A positive integer or null, where null means something (DeepSeek's q_lora_rank); the key must be there."""
        if key not in self.cfg:
            raise self._required(key, f" (null: {meaning_of_null})")
        return self.count(key, None)

    def prob(self, key: str, default: float) -> float:
        v = self.cfg.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise self._bad(key, "a probability in [0, 1)")
        return float(v)

    def flag(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._bad(key, "true or false")
        return v

    def choice(self, key: str, valid: tuple[str, ...], default: str) -> str:
        v = self.cfg.get(key)
        if v is None:
            return default
        if v not in valid:
            raise self._bad(key, ", ".join(valid))
        return v

    def indices(self, key: str, n_layers: int) -> list[int] | None:
        """A list of distinct layer indices 0..n_layers-1; None when absent or null."""
        v = self.cfg.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers
                                          for i in v) or len(set(v)) != len(v):
            raise self._bad(key, f"a list of distinct layer indices 0..{n_layers - 1}")
        return v

    def layer_kinds(self, key: str, valid: tuple[str, ...], n_layers: int) -> list[str] | None:
        """A list of one of `valid` per layer; None when absent or null."""
        v = self.cfg.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or len(v) != n_layers or any(k not in valid for k in v):
            raise self._bad(key, f"a list of {n_layers} entries (num_hidden_layers), each {' or '.join(valid)}")
        return v

    def moe_layout(self, moe: set[int], n_layers: int, key: str) -> dict:
        """first_dense_layers and layer_freq for which MoEConfig's rule (i >= first_dense_layers and
        (i + 1) % layer_freq == 0) picks exactly the layers `moe`; refused naming `key` where none does."""
        if moe:
            first = min(moe)
            for freq in range(1, n_layers + 1):
                if {i for i in range(first, n_layers) if (i + 1) % freq == 0} == moe:
                    # the fewest leading dense layers that give the same layers (0 for 1, 3, 5, ... at freq 2)
                    skipped = [i for i in range(first) if (i + 1) % freq == 0]
                    return dict(first_dense_layers=skipped[-1] + 1 if skipped else 0, layer_freq=freq)
        layers = sorted(moe)
        layers = ", ".join(map(str, layers if len(layers) <= 8 else layers[:4] + ["..."] + layers[-1:])) or "none"
        raise self._bad(key, f"a layout whose MoE layers (here: {layers}) are every n-th layer after leading "
                             "dense layers (i >= first_dense_layers and (i + 1) % layer_freq == 0)")

    def top_k(self, key: str, n_experts: int, experts_key: str) -> int:
        k = self.count(key)
        if k > n_experts:
            raise self._bad(key, f"1..{n_experts} ({experts_key})")
        return k


def _moe_fields(c: _HFConfig, mt: str, n_layers: int) -> dict:
    """The MoEConfig of a mixture-of-experts config.json (mixtral, qwen3_moe, deepseek_v3/kimi_k2, gpt_oss,
    llama4_text), from the keys of transformers' MixtralConfig, Qwen3MoeConfig, DeepseekV3Config, GptOssConfig and
    Llama4TextConfig, with each model's rule for which layers are MoE layers."""
    if mt == "mixtral":  # every layer; experts as wide as intermediate_size; softmax over the top-k logits
        n = c.count("num_local_experts")
        return dict(n_experts=n, top_k=c.top_k("num_experts_per_tok", n, "num_local_experts"),
                    expert_ffn_hidden=c.count("intermediate_size"))
    if mt in ("qwen3_next", "qwen3_5_moe_text"):
        # Qwen3NextSparseMoeBlock: qwen3_moe's routed experts and layer rule, plus one shared expert of
        # shared_expert_intermediate_size (its sigmoid gate, hidden x 1, is not counted)
        fields = _moe_fields(c, "qwen3_moe", n_layers)
        shared = c.count0("shared_expert_intermediate_size", 0)
        return dict(fields, n_shared_experts=1 if shared else 0, shared_ffn_hidden=shared or None)
    if mt == "qwen3_moe":
        # Qwen3MoeDecoderLayer: layer i is sparse when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step
        # == 0; the others have a dense MLP of intermediate_size. (norm_topk_prob only rescales the weights.)
        n = c.count("num_experts")
        k = c.top_k("num_experts_per_tok", n, "num_experts")
        step = c.count("decoder_sparse_step", 1)
        dense = set(c.indices("mlp_only_layers", n_layers) or ())
        moe = {i for i in range(n_layers) if i not in dense and (i + 1) % step == 0}
        return dict(n_experts=n, top_k=k, expert_ffn_hidden=c.count("moe_intermediate_size"),
                    **c.moe_layout(moe, n_layers, "mlp_only_layers" if dense else "decoder_sparse_step"))
    if mt in MLA_TYPES:
        # DeepseekV3DecoderLayer (and DeepSeek-V3.2's and GLM-5's, which keep it): layer i is MoE when
        # i >= first_k_dense_replace and i % moe_layer_freq == 0 (note: i, not i + 1); shared experts are one MLP of n_shared_experts * moe_intermediate_size. Group-limited
        # routing (n_group, topk_group) and the sigmoid router's selection bias (e_score_correction_bias,
        # n_routed_experts values per layer) are not modelled: they add no matmul and ~15k parameters.
        n = c.count("n_routed_experts")
        k = c.top_k("num_experts_per_tok", n, "n_routed_experts")
        first, freq = c.count0("first_k_dense_replace"), c.count("moe_layer_freq", 1)
        moe = {i for i in range(first, n_layers) if i % freq == 0}
        return dict(n_experts=n, top_k=k, expert_ffn_hidden=c.count("moe_intermediate_size"),
                    n_shared_experts=c.count0("n_shared_experts"),
                    router_scoring=c.choice("scoring_func", ("softmax", "sigmoid"), "sigmoid"),
                    **c.moe_layout(moe, n_layers, "moe_layer_freq" if freq > 1 else "first_k_dense_replace"))
    if mt == "minimax_m2":
        # MiniMaxM2SparseMoeBlock (vLLM's minimax_m2.py): every layer; each expert intermediate_size wide; a sigmoid
        # router with a selection bias (use_routing_bias: no matmul); shared experts only where
        # shared_intermediate_size > 0 (0 in M2 and M2.5).
        n = c.count("num_local_experts")
        shared = c.count0("shared_intermediate_size", 0)
        return dict(n_experts=n, top_k=c.top_k("num_experts_per_tok", n, "num_local_experts"),
                    expert_ffn_hidden=c.count("intermediate_size"), n_shared_experts=1 if shared else 0,
                    shared_ffn_hidden=shared or None,
                    router_scoring=c.choice("scoring_func", ("softmax", "sigmoid"), "sigmoid"))
    if mt == "step3p7":
        # Step-3.x Flash: layers from first_k_dense_replace on are MoE (the first ones a dense MLP of
        # intermediate_size); n_shared_experts shared experts share_expert_dim wide each; sigmoid router.
        n, first = c.count("num_experts"), c.count0("first_k_dense_replace", 0)
        shared = c.count0("n_shared_experts", 0)
        return dict(n_experts=n, top_k=c.top_k("num_experts_per_tok", n, "num_experts"),
                    expert_ffn_hidden=c.count("moe_intermediate_size"), n_shared_experts=shared,
                    shared_ffn_hidden=shared * c.count("share_expert_dim") if shared else None,
                    router_scoring=c.choice("scoring_func", ("softmax", "sigmoid"), "sigmoid"),
                    **c.moe_layout(set(range(first, n_layers)), n_layers, "first_k_dense_replace"))
    if mt == "gpt_oss":
        # Every layer; router and experts (fused gate/up of 2 x intermediate_size, down) have biases; softmax over
        # the top-k logits. The original release names the top-k experts_per_token, transformers
        # num_experts_per_tok; both appear in openai/gpt-oss-* config.json.
        n = c.count("num_local_experts")
        key = "num_experts_per_tok" if c.cfg.get("num_experts_per_tok") is not None else "experts_per_token"
        k = c.top_k(key, n, "num_local_experts")
        if key == "num_experts_per_tok" and c.cfg.get("experts_per_token") not in (None, k):
            raise c._bad("experts_per_token", f"{k} (num_experts_per_tok) or absent")
        return dict(n_experts=n, top_k=k, expert_ffn_hidden=c.count("intermediate_size"), router_bias=True,
                    expert_bias=True)
    # llama4_text: MoE layers listed in moe_layers, else every interleave_moe_layer_step-th (Llama4TextConfig);
    # a shared expert as wide as a routed one (Llama4TextMoe.shared_expert); sigmoid of the top-k logits.
    n = c.count("num_local_experts")
    k = c.top_k("num_experts_per_tok", n, "num_local_experts")
    listed = c.indices("moe_layers", n_layers)
    step = c.count("interleave_moe_layer_step", 1)
    moe = set(listed) if listed is not None else set(range(step - 1, n_layers, step))
    return dict(n_experts=n, top_k=k, expert_ffn_hidden=c.count("intermediate_size"), n_shared_experts=1,
                router_scoring="sigmoid",
                **c.moe_layout(moe, n_layers, "moe_layers" if listed is not None else "interleave_moe_layer_step"))


def _linear_attention(c: _HFConfig, n_layers: int) -> dict:
    """Qwen3-Next's and Qwen3.5's hybrid layers (transformers' Qwen3NextConfig): `layer_types` ('linear_attention'
    / 'full_attention' per layer; default: full every full_attention_interval-th layer, 4), the Gated DeltaNet's
    linear_* widths, and full attention gated by a second query-wide projection (attn_output_gate, on in both)."""
    kinds = ("linear_attention", "full_attention")
    every = c.count("full_attention_interval", 4)
    types = c.layer_kinds("layer_types", kinds, n_layers) or [
        kinds[1] if (i + 1) % every == 0 else kinds[0] for i in range(n_layers)]
    linear = types.count("linear_attention")
    if linear in (0, n_layers):
        raise c._bad("layer_types", "a mix of 'linear_attention' and 'full_attention' layers (hybrid models)")
    # the recurrent state's dtype where the config states it (Qwen3.5: float32); fp32 otherwise, as the
    # flash-linear-attention kernels accumulate it
    state = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}[c.choice("mamba_ssm_dtype", ("float32", "bfloat16",
                                                                                          "float16"), "float32")]
    return dict(attention_output_gate=c.flag("attn_output_gate", True), linear_attention=dict(
        layers=linear, key_heads=c.count("linear_num_key_heads"), key_head_dim=c.count("linear_key_head_dim"),
        value_heads=c.count("linear_num_value_heads"), value_head_dim=c.count("linear_value_head_dim"),
        conv_kernel=c.count("linear_conv_kernel_dim", 4), state_bytes=state))


def _mtp_layers(c: _HFConfig, mt: str) -> int:
    """Multi-token prediction modules of a GQA model, each one block: MiMo's and Step-3.x's
    num_nextn_predict_layers (DeepSeek-V3's key), MiniMax-M2's num_mtp_modules of mtp_transformer_layers blocks
    where use_mtp (one block each, as ModelConfig counts them)."""
    if mt in ("mimo", "step3p7", "qwen3_next"):
        return c.count0("num_nextn_predict_layers", 0)
    if mt in ("qwen3_5_text", "qwen3_5_moe_text"):
        return c.count0("mtp_num_hidden_layers", 0)
    if mt == "minimax_m2" and c.flag("use_mtp", False):
        if c.count("mtp_transformer_layers", 1) != 1:
            raise c._bad("mtp_transformer_layers", "1 (one block per MTP module, as ModelConfig counts them)")
        return c.count0("num_mtp_modules", 0)
    return 0


def _gemma3(c: _HFConfig) -> dict:
    """Gemma 3's text model (Gemma Team 2025, Gemma 3 technical report, Sec. 2): transformers' Gemma3TextConfig
    (src/transformers/models/gemma3/configuration_gemma3.py at 008f5c8c29be84d4721dc6d1e0fcd72300580be4), whose
    defaults fill what google/gemma-3-*/config.json leaves out (vocab_size 262208, head_dim 256,
    max_position_embeddings 131072, tie_word_embeddings true, sliding_window 4096, sliding_window_pattern 6). The MLP
    is GeGLU (gelu_pytorch_tanh of the gate times up: three matrices, priced as SwiGLU's); layer i attends within
    the window unless (i + 1) % sliding_window_pattern == 0 (Gemma3DecoderLayer; newer configs list layer_types):
    5 local layers per global one. Not counted (ModelConfig has two norms a layer): the post-attention and
    post-MLP RMSNorms and the per-head query/key RMSNorms, 2 hidden + 2 head_dim scales per layer; the sqrt(hidden)
    embedding scale and query_pre_attn_scalar have no parameters."""
    n, kinds = c.count("num_hidden_layers", 26), ("sliding_attention", "full_attention")
    c.choice("hidden_activation", ("gelu_pytorch_tanh", "gelu"), "gelu_pytorch_tanh")
    if c.flag("attention_bias", False):
        raise c._bad("attention_bias", "false (Gemma 3's projections have no biases)")
    every = c.count("sliding_window_pattern", 6)
    types = c.layer_kinds("layer_types", kinds, n) or [kinds[(i + 1) % every == 0] for i in range(n)]
    windowed = types.count("sliding_attention")
    return dict(n_layers=n, hidden=c.count("hidden_size", 2304), n_heads=c.count("num_attention_heads", 8),
                n_kv_heads=c.count("num_key_value_heads", 4), head_dim=c.count("head_dim", 256),
                ffn_hidden=c.count("intermediate_size", 9216), vocab=c.count("vocab_size", 262208),
                max_seq_len=c.count("max_position_embeddings", 131072), mlp="swiglu", norm="rmsnorm",
                position="rope", tie_embeddings=c.flag("tie_word_embeddings", True), linear_bias="none",
                dropout=c.prob("attention_dropout", 0.0),
                sliding_window=c.count("sliding_window", 4096) if windowed else None,
                sliding_window_layers=windowed if 0 < windowed < n else None)


def from_hf_config(cfg: dict, name: str, where: str = "config.json") -> ModelConfig:
    """Map a HuggingFace config.json (model types in HF_MODEL_TYPES) onto ModelConfig.

    Field names follow transformers' GPT2Config, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
    GPTNeoXConfig, MixtralConfig, Qwen3MoeConfig, DeepseekV3Config (also DeepSeek-V3's, Kimi-K2's and Moonlight's
    own configuration_deepseek.py), GptOssConfig and Llama4Config and their defaults (e.g. GPT-2 ties embeddings
    by default, Llama does not; Qwen2 has q/k/v biases only). Keys that shape the parameters and have no safe
    default (head_dim of Qwen3 and GPT-OSS, the expert counts and widths, DeepSeek's latent ranks) are required.
    A `llama4` config (Llama4ForConditionalGeneration) is read for its text model (`text_config`) only.
    """
    mt = cfg.get("model_type")
    if not isinstance(mt, str):
        raise InputError(f"{where}: model_type = {mt!r} is not supported; valid: {', '.join(HF_MODEL_TYPES)}")
    if mt in UNPRICED:
        field, why = UNPRICED[mt]
        raise InputError(f"{where}: model_type = {mt!r}: field '{field}' holds {why}, which the cost model does not "
                         f"price yet; valid model types: {', '.join(HF_MODEL_TYPES)}")
    if mt not in HF_MODEL_TYPES:
        raise InputError(f"{where}: model_type = {mt!r} is not supported; valid: {', '.join(HF_MODEL_TYPES)}")
    if mt in WRAPPERS:
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise InputError(f"{where}: field 'text_config' is required for model_type {mt!r} and must be a "
                             f"mapping (the text model's config); got {text!r}")
        # tie_word_embeddings sits at the top level of the wrapper (checked there); text_config's own wins where it
        # has one.
        _HFConfig(cfg, where).flag("tie_word_embeddings", False)
        cfg, where, mt = {"tie_word_embeddings": cfg.get("tie_word_embeddings"), **text,
                          "model_type": WRAPPERS[mt]}, f"{where} text_config", WRAPPERS[mt]
    named, mt = mt, SAME_AS.get(mt, mt)
    c = _HFConfig(cfg, where)
    if mt == "gpt2":
        h = c.count("n_embd")
        fields = dict(
            n_layers=c.count("n_layer"), hidden=h, n_heads=c.count("n_head"), ffn_hidden=c.count("n_inner", 4 * h),
            vocab=c.count("vocab_size"), max_seq_len=c.count("n_positions"), mlp="gelu", norm="layernorm",
            position="learned", tie_embeddings=c.flag("tie_word_embeddings", True), linear_bias="all",
            dropout=max(c.prob("resid_pdrop", 0.1), c.prob("attn_pdrop", 0.1)),
        )
    elif mt == "gpt_neox":
        fields = dict(
            n_layers=c.count("num_hidden_layers"), hidden=c.count("hidden_size"),
            n_heads=c.count("num_attention_heads"), ffn_hidden=c.count("intermediate_size"),
            vocab=c.count("vocab_size"), max_seq_len=c.count("max_position_embeddings"), mlp="gelu",
            norm="layernorm", position="rope", tie_embeddings=c.flag("tie_word_embeddings", False),
            linear_bias="all", dropout=max(c.prob("hidden_dropout", 0.0), c.prob("attention_dropout", 0.0)),
        )
    elif mt in MLA_TYPES:
        # Multi-head latent attention (DeepSeek-V2 Sec. 2.1); kimi_k2 is Kimi-K2's name for the same architecture
        # (DeepseekV3ForCausalLM). num_key_value_heads is ignored: MLA's keys and values come per query head from
        # the latent. head_dim is set to the per-head query/key width (qk_nope_head_dim + qk_rope_head_dim); GLM-5
        # states that sum as qk_head_dim (its head_dim key is the rotary part) and must agree. deepseek_v32 and
        # glm_moe_dsa add DeepSeek Sparse Attention's indexer (index_topk, index_n_heads, index_head_dim).
        if c.flag("attention_bias", False):
            raise c._bad("attention_bias", "false (MLA projections with biases are not modelled)")
        heads, n_layers = c.count("num_attention_heads"), c.count("num_hidden_layers")
        mla = dict(q_lora_rank=c.optional_count("q_lora_rank", "queries projected directly, no latent"),
                   kv_lora_rank=c.count("kv_lora_rank"), qk_nope_head_dim=c.count("qk_nope_head_dim"),
                   qk_rope_head_dim=c.count("qk_rope_head_dim"), v_head_dim=c.count("v_head_dim"))
        qk = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        if c.count("qk_head_dim", qk) != qk:
            raise c._bad("qk_head_dim", f"{qk} (qk_nope_head_dim + qk_rope_head_dim) or absent")
        sparse = None
        if mt in ("deepseek_v32", "glm_moe_dsa"):
            sparse = dict(topk=c.count("index_topk"), index_heads=c.count("index_n_heads"),
                          index_head_dim=c.count("index_head_dim"))
        fields = dict(
            n_layers=n_layers, hidden=c.count("hidden_size"), n_heads=heads, n_kv_heads=heads,
            head_dim=mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"], ffn_hidden=c.count("intermediate_size"),
            vocab=c.count("vocab_size"), max_seq_len=c.count("max_position_embeddings"), mlp="swiglu",
            norm="rmsnorm", position="rope", tie_embeddings=c.flag("tie_word_embeddings", False), linear_bias="none",
            dropout=c.prob("attention_dropout", 0.0), moe=_moe_fields(c, mt, n_layers), mla=mla,
            # DeepSeek-V3's own configuration_deepseek.py; transformers' DeepseekV3Config has no such key (and
            # does not load the MTP weights), so absent means none.
            mtp_layers=c.count0("num_nextn_predict_layers", 0), sparse_attention=sparse,
        )
    elif mt in ("gemma3_text", "gemma4_text"):
        fields = _gemma3(c) if mt == "gemma3_text" else gemma4_fields(c)
    else:  # llama, mistral, qwen2 (mimo), qwen3, mixtral, qwen3_moe, minimax_m2, step3p7, gpt_oss, llama4_text
        heads, n_layers = c.count("num_attention_heads"), c.count("num_hidden_layers")
        if mt == "qwen2":
            bias = "qkv"
        elif mt == "gpt_oss":
            # GptOssAttention: q, k, v and o projections all biased (attention_bias, default true); no dense MLP.
            # The attention sinks (one learned logit per head and layer, 64 x 36 in gpt-oss-120b) are ignored.
            bias = "all" if c.flag("attention_bias", True) else "none"
        else:
            bias = "all" if c.flag("mlp_bias", False) else ("qkv" if c.flag("attention_bias", False) else "none")
        window, window_layers = c.count("sliding_window", None), None
        if mt in ("qwen2", "qwen3", "qwen3_moe") and not c.flag("use_sliding_window", False):
            window = None
        if mt in ("gpt_oss", "step3p7"):
            # layer_types: "sliding_attention" / "full_attention" per layer; GptOssConfig's default alternates,
            # windowed first, and sliding_window defaults to 128 as there. Step-3.x Flash states both (3 windowed
            # layers of 512 tokens in 4).
            kinds = ("sliding_attention", "full_attention")
            types = c.layer_kinds("layer_types", kinds, n_layers)
            if types is None and mt == "step3p7":  # no default pattern to fall back on
                raise c._required("layer_types")
            types = types or [kinds[i % 2] for i in range(n_layers)]
            window = c.count("sliding_window", 128 if mt == "gpt_oss" else ...)
            window_layers = types.count("sliding_attention")
            if window_layers == 0:
                window, window_layers = None, None
            elif window_layers == n_layers:
                window_layers = None
        if mt == "llama4_text":
            # Llama 4's chunked local attention (attention_chunk_size, 3 layers in 4) is not modelled: every layer
            # is priced as full causal attention, exact for sequences up to the chunk (8192). use_qk_norm is an L2
            # norm without weights. Dense layers (none in Scout) have intermediate_size_mlp.
            window, ffn = None, c.count("intermediate_size_mlp", 16384)
        elif mt == "qwen3_5_moe_text":  # every layer MoE: no dense MLP width unless the config gives one
            ffn = c.count("intermediate_size", c.count("moe_intermediate_size"))
        else:
            ffn = c.count("intermediate_size")
        fields = dict(
            n_layers=n_layers, hidden=c.count("hidden_size"), n_heads=heads,
            n_kv_heads=c.count("num_key_value_heads", heads),
            # Required where the model sets head_dim on its own (Qwen3: 128, e.g. for 1024 / 16 in Qwen3-0.6B;
            # GPT-OSS: 64 for 2880 / 64; Llama 4: 128). Qwen3's q_norm/k_norm (2 x head_dim scales per layer) are
            # not counted: ModelConfig has no field for them.
            # MiniMax-M2: 128 for 3072 / 48; its per-layer q/k RMSNorm (use_qk_norm) and partial rotary (rotary_dim
            # of head_dim) are not counted either.
            head_dim=c.count("head_dim", ... if mt in ("qwen3", "qwen3_moe", "gpt_oss", "llama4_text", "minimax_m2",
                                                       "step3p7", *GDN_TYPES) else None),
            ffn_hidden=ffn, vocab=c.count("vocab_size"),
            max_seq_len=c.count("max_position_embeddings"), mlp="swiglu", norm="rmsnorm", position="rope",
            tie_embeddings=c.flag("tie_word_embeddings", False), linear_bias=bias,
            dropout=c.prob("attention_dropout", 0.0), sliding_window=window, sliding_window_layers=window_layers,
        )
        if mt in ("mixtral", "qwen3_moe", "minimax_m2", "step3p7", "gpt_oss", "llama4_text", "qwen3_next",
                  "qwen3_5_moe_text"):
            fields["moe"] = _moe_fields(c, mt, n_layers)
        if mt in GDN_TYPES:
            fields.update(_linear_attention(c, n_layers))
        fields["mtp_layers"] = _mtp_layers(c, named)
    quant = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config")
    if isinstance(quant, dict) and quant.get("weight_block_size"):  # DeepSeek-style fp8: 128 x 128 weight blocks
        fields["fp8_weight_blocks"] = True
    if named == "deepseek_v3" and fields.get("mtp_layers"):  # DeepSeek-V3's MTP module (V3, R1, V3.1 share it)
        fields["mtp_acceptance"] = DEEPSEEK_V3_MTP_ACCEPTANCE
    return ModelConfig.parse({"name": name, **fields, "source": f"HuggingFace config ({where})"}, where=where)
