"""Model schema (a dense decoder-only transformer), parameter counts, and loading by preset name or HF config.json."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from .errors import Count, Flag, InputError, Schema, suggest
from .files import looks_like_path, read_mapping


class ModelConfig(Schema):
    """Shape of a decoder-only transformer: everything the cost model needs, nothing about parallelism."""

    name: str = Field(description="model name")
    n_layers: Count = Field(description="transformer blocks")
    hidden: Count = Field(description="model width h")
    n_heads: Count = Field(description="query heads")
    n_kv_heads: Count | None = Field(None, description="key/value heads (GQA); default n_heads")
    head_dim: Count | None = Field(None, description="default hidden // n_heads")
    ffn_hidden: Count = Field(description="MLP inner width f")
    vocab: Count = Field(description="vocabulary size V")
    max_seq_len: Count = Field(description="positions the model supports")
    mlp: Literal["gelu", "swiglu"] = Field(description="plain 2-matrix MLP or gated 3-matrix (SwiGLU) MLP")
    norm: Literal["layernorm", "rmsnorm"] = Field("layernorm", description="normalisation layer (rmsnorm: scale only)")
    position: Literal["learned", "rope", "alibi"] = Field(
        "learned", description="position encoding; only learned has parameters (max_seq_len x hidden)")
    tie_embeddings: Flag = Field(False, description="LM head shares the token embedding")
    linear_bias: Literal["none", "qkv", "all"] = Field(
        "none", description="biases on none, the q/k/v projections, or all linears")
    dropout: float = Field(0.0, ge=0, lt=1, description="hidden and attention dropout probability in training")
    sliding_window: Count | None = Field(None, description="attention window in tokens (e.g. Mistral v0.1)")
    source: str = Field("", description="where the config came from")

    @model_validator(mode="after")
    def _resolve(self):
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.head_dim is None:
            if self.hidden % self.n_heads:
                raise ValueError(
                    f"hidden = {self.hidden} is not divisible by n_heads = {self.n_heads}; give head_dim explicitly"
                )
            self.head_dim = self.hidden // self.n_heads
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads = {self.n_kv_heads} must divide n_heads = {self.n_heads}")
        return self

    # -- derived sizes -----------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query (and attention output) projection: n_heads * head_dim."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projections: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        return self.mlp == "swiglu"

    def matmul_params_per_layer(self) -> int:
        """Weights of one block's projections: Q, K, V, output, and the 2 (plain) or 3 (gated) MLP matrices."""
        h, f = self.hidden, self.ffn_hidden
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + (3 if self.gated else 2) * h * f

    def params_per_layer(self) -> int:
        """Parameters of one transformer block: attention, MLP, two norms (weights and biases)."""
        h, f = self.hidden, self.ffn_hidden
        bias = 0
        if self.linear_bias in ("qkv", "all"):
            bias += self.q_dim + 2 * self.kv_dim
        if self.linear_bias == "all":
            bias += h + ((2 * f) if self.gated else f) + h
        return self.matmul_params_per_layer() + bias + 2 * self.norm_params()

    def norm_params(self) -> int:
        """One norm: scale (and shift for LayerNorm)."""
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def position_params(self) -> int:
        """Learned position table (max_seq_len x hidden); rotary and ALiBi have none."""
        return self.max_seq_len * self.hidden if self.position == "learned" else 0

    def embedding_params(self) -> int:
        """Token embedding plus learned position embedding."""
        return self.vocab * self.hidden + self.position_params()

    def head_params(self) -> int:
        """Final norm plus the LM head (zero extra when tied to the token embedding)."""
        return self.norm_params() + (0 if self.tie_embeddings else self.vocab * self.hidden)

    def n_params(self) -> int:
        """Total parameters, counting a tied embedding once."""
        return self.embedding_params() + self.n_layers * self.params_per_layer() + self.head_params()


# ---------------------------------------------------------------------------------------------------------
# HuggingFace config.json
# ---------------------------------------------------------------------------------------------------------
HF_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "gpt_neox")


class _HFConfig:
    """Typed access to a config.json: every read checks the type and range and names the key when it fails."""

    def __init__(self, cfg: dict, where: str):
        self.cfg, self.where, self.type = cfg, where, cfg.get("model_type")

    def _bad(self, key: str, valid: str) -> InputError:
        return InputError(f"{self.where}: {key} = {self.cfg[key]!r} is not valid; valid: {valid}")

    def count(self, key: str, default=...):
        """A positive integer; `default` when absent or null (required when no default)."""
        v = self.cfg.get(key)
        if v is None:
            if default is ...:
                raise InputError(f"{self.where}: field '{key}' is required for model_type '{self.type}'")
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise self._bad(key, "a positive integer")
        return v

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


def from_hf_config(cfg: dict, name: str, where: str = "config.json") -> ModelConfig:
    """Map a HuggingFace config.json (model types in HF_MODEL_TYPES) onto ModelConfig.

    Field names follow transformers' GPT2Config, LlamaConfig, MistralConfig, Qwen2Config, GPTNeoXConfig and
    their defaults (e.g. GPT-2 ties embeddings by default, Llama does not; Qwen2 has q/k/v biases only).
    """
    mt = cfg.get("model_type")
    if mt not in HF_MODEL_TYPES:
        raise InputError(f"{where}: model_type = {mt!r} is not supported; valid: {', '.join(HF_MODEL_TYPES)}")
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
    else:  # llama, mistral, qwen2
        heads = c.count("num_attention_heads")
        if mt == "qwen2":
            bias = "qkv"
        else:
            bias = "all" if c.flag("mlp_bias", False) else ("qkv" if c.flag("attention_bias", False) else "none")
        window = c.count("sliding_window", None)
        if mt == "qwen2" and not c.flag("use_sliding_window", False):
            window = None
        fields = dict(
            n_layers=c.count("num_hidden_layers"), hidden=c.count("hidden_size"), n_heads=heads,
            n_kv_heads=c.count("num_key_value_heads", heads), head_dim=c.count("head_dim", None),
            ffn_hidden=c.count("intermediate_size"), vocab=c.count("vocab_size"),
            max_seq_len=c.count("max_position_embeddings"), mlp="swiglu", norm="rmsnorm", position="rope",
            tie_embeddings=c.flag("tie_word_embeddings", False), linear_bias=bias,
            dropout=c.prob("attention_dropout", 0.0), sliding_window=window,
        )
    return ModelConfig.parse({"name": name, **fields, "source": f"HuggingFace config ({where})"}, where=where)


def load_model(spec: str | Path | ModelConfig) -> ModelConfig:
    """A model by preset name (`perfmodel models list`), or by path to a HF config.json or a ModelConfig JSON/YAML."""
    from .model_presets import PRESETS, ALIASES

    if isinstance(spec, ModelConfig):
        return spec
    spec = str(spec)
    if looks_like_path(spec):
        path = Path(spec)
        data = read_mapping(path, f"model file {spec}")
        if "model_type" in data:
            return from_hf_config(data, name=path.parent.name if path.name == "config.json" else path.stem, where=spec)
        return ModelConfig.parse(data, where=spec)
    key = spec.lower()
    key = ALIASES.get(key, key)
    if key not in PRESETS:
        raise suggest(spec, list(PRESETS) + list(ALIASES), "model")
    return ModelConfig.parse(PRESETS[key], where=f"preset {key}")


def list_models() -> list[str]:
    from .model_presets import PRESETS

    return list(PRESETS)
