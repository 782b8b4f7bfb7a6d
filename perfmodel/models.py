"""Model schema (a decoder-only transformer, dense or mixture-of-experts, with grouped-query or DeepSeek's
multi-head latent attention), parameter counts (total and active per token), and loading by preset name or HF
config.json."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from .errors import Count, Flag, InputError, Schema, suggest
from .files import looks_like_path, read_mapping


class MoEConfig(Schema):
    """The mixture-of-experts part of a model: which layers route their MLP to experts, and how.

    A MoE layer replaces the dense MLP by a router (a hidden x n_experts linear), `n_experts` routed experts of
    width `expert_ffn_hidden` of which each token uses `top_k`, and optionally shared experts every token uses
    (DeepSeek-MoE, Dai et al. 2024, Sec. 3.2). Layer i (from 0) is a MoE layer when i >= first_dense_layers and
    (i + 1) % layer_freq == 0 (transformers' Qwen3-MoE decoder_sparse_step and Llama-4 interleave_moe_layer_step;
    DeepSeek-V3's first_k_dense_replace).
    """

    n_experts: Count = Field(description="routed experts per MoE layer")
    top_k: Count = Field(description="routed experts each token is sent to")
    expert_ffn_hidden: Count = Field(description="inner width of one routed expert's MLP")
    n_shared_experts: int = Field(0, ge=0, description="experts every token uses, besides the routed ones")
    shared_ffn_hidden: Count | None = Field(
        None, description="inner width of the shared experts together; default n_shared_experts * expert_ffn_hidden")
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense MLP (first_k_dense_replace)")
    layer_freq: Count = Field(1, description="every layer_freq-th layer is a MoE layer (1: all)")
    router_scoring: Literal["softmax", "sigmoid"] = Field(
        "softmax", description="router score function (DeepSeek-V3: sigmoid with a bias; the others softmax)")
    router_bias: Flag = Field(False, description="the router linear has a bias (GPT-OSS)")
    expert_bias: Flag = Field(False, description="the experts' linears have biases (GPT-OSS)")

    @model_validator(mode="after")
    def _resolve(self):
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k = {self.top_k} exceeds n_experts = {self.n_experts}; valid: 1..{self.n_experts}")
        if self.shared_ffn_hidden is None:
            self.shared_ffn_hidden = self.n_shared_experts * self.expert_ffn_hidden or None
        return self


class MLAConfig(Schema):
    """DeepSeek's multi-head latent attention (DeepSeek-V2, Liu et al. 2024, Sec. 2.1): queries and keys/values
    are projected down to a latent (q_lora_rank, kv_lora_rank), normalised and projected up per head; each head's
    query and key have a part without position (qk_nope_head_dim) and a rotary part (qk_rope_head_dim, the key's
    shared by all heads); values have v_head_dim per head."""

    q_lora_rank: Count | None = Field(None, description="query latent width; None: queries projected directly")
    kv_lora_rank: Count = Field(description="key/value latent width")
    qk_nope_head_dim: Count = Field(description="per-head query/key width without rotary embedding")
    qk_rope_head_dim: Count = Field(description="per-head query/key rotary width (the key part shared by heads)")
    v_head_dim: Count = Field(description="per-head value width")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


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
    sliding_window_layers: int | None = Field(
        None, ge=0, description="how many layers use sliding_window (GPT-OSS alternates); default all of them")
    moe: MoEConfig | None = Field(None, description="mixture-of-experts layers; None for a dense model")
    mla: MLAConfig | None = Field(None, description="multi-head latent attention; None for (grouped-query) MHA")
    mtp_layers: int = Field(0, ge=0, description="multi-token prediction modules (DeepSeek-V3: 1), each an "
                                                 "embedding-concat projection and one transformer block")
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
        if self.moe is not None and self.moe_layers() == 0:
            raise ValueError(f"moe: no layer of {self.n_layers} is a MoE layer (first_dense_layers = "
                             f"{self.moe.first_dense_layers}, layer_freq = {self.moe.layer_freq}); valid: "
                             f"first_dense_layers < {self.n_layers}")
        if self.sliding_window_layers is not None and self.sliding_window_layers > self.n_layers:
            raise ValueError(f"sliding_window_layers = {self.sliding_window_layers} exceeds n_layers = "
                             f"{self.n_layers}; valid: 0..{self.n_layers}")
        return self

    # -- derived sizes -----------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the attention output (what the output projection reads): n_heads * head_dim, or with MLA
        n_heads * v_head_dim."""
        return self.n_heads * (self.mla.v_head_dim if self.mla else self.head_dim)

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projections: n_kv_heads * head_dim (MLA: kv_lora_rank, what one
        token's cache holds besides the shared rotary key)."""
        return self.mla.kv_lora_rank if self.mla else self.n_kv_heads * self.head_dim

    @property
    def qk_dim(self) -> int:
        """Width of the query (and of all keys) the attention core contracts over: n_heads * head_dim (MLA:
        n_heads * (qk_nope_head_dim + qk_rope_head_dim))."""
        return self.n_heads * (self.mla.qk_head_dim if self.mla else self.head_dim)

    @property
    def kv_width(self) -> int:
        """Key plus value width per token as attention reads them: 2 kv_dim (MLA: per head after the up
        projection, n_heads (d_qk + d_v)): what context parallelism exchanges and attention keeps."""
        return self.qk_dim + self.q_dim if self.mla else 2 * self.kv_dim

    @property
    def attention_input_width(self) -> int:
        """Query, key and value width per token that the attention core reads: qk_dim + kv_width."""
        return self.qk_dim + self.kv_width

    @property
    def rope_width(self) -> int:
        """Elements per token the rotary embedding rotates: queries and keys (MLA: each head's rotary query part
        and the one shared rotary key)."""
        if self.mla:
            return (self.n_heads + 1) * self.mla.qk_rope_head_dim
        return self.q_dim + self.kv_dim

    @property
    def attention_core_dim(self) -> float:
        """Mean per-token width of the attention core's two matmuls, QK^T over qk_dim and PV over q_dim:
        (qk_dim + q_dim) / 2 (= n_heads * head_dim without MLA). Attention FLOPs are 4 * keys * this."""
        return (self.qk_dim + self.q_dim) / 2

    @property
    def gated(self) -> bool:
        return self.mlp == "swiglu"

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP (or expert): 3 gated (gate, up, down), 2 plain."""
        return 3 if self.gated else 2

    def qkv_params(self) -> int:
        """Weights of the projections from the hidden state to queries, keys and values (no biases).

        MHA/GQA: h (q + 2 kv). MLA (DeepSeek-V2, Sec. 2.1.2-2.1.3): queries h q_lora + q_lora H d_qk (or
        h H d_qk without a query latent), keys and values h (kv_lora + d_rope) + kv_lora H (d_nope + d_v), plus the
        latents' norms (q_lora, kv_lora scales).
        """
        h = self.hidden
        if self.mla is None:
            return h * (self.q_dim + 2 * self.kv_dim)
        a, heads = self.mla, self.n_heads
        q = (h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * heads * a.qk_head_dim if a.q_lora_rank
             else h * heads * a.qk_head_dim)
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank + a.kv_lora_rank * heads * (
            a.qk_nope_head_dim + a.v_head_dim)
        return q + kv

    def attention_params(self) -> int:
        """One layer's attention weights and biases: qkv_params, the output projection q_dim x h, biases."""
        bias = 0
        if self.linear_bias in ("qkv", "all") and self.mla is None:
            bias += self.q_dim + 2 * self.kv_dim
        if self.linear_bias == "all":
            bias += self.hidden
        return self.qkv_params() + self.q_dim * self.hidden + bias

    def mlp_params(self, ffn: int, bias: bool | None = None) -> int:
        """One MLP (or expert) of inner width `ffn`: 2 or 3 matrices, plus biases where the model has them."""
        h, g = self.hidden, (2 if self.gated else 1)
        b = (self.linear_bias == "all") if bias is None else bias
        return self.mlp_matrices * h * ffn + (g * ffn + h if b else 0)

    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (MoEConfig's rule); 0 for a dense model."""
        if self.moe is None:
            return 0
        m = self.moe
        return sum(1 for i in range(self.n_layers) if i >= m.first_dense_layers and (i + 1) % m.layer_freq == 0)

    def dense_layers(self) -> int:
        """Layers with a dense MLP."""
        return self.n_layers - self.moe_layers()

    def router_params(self) -> int:
        """One MoE layer's router: hidden x n_experts (+ n_experts bias)."""
        m = self.moe
        return self.hidden * m.n_experts + (m.n_experts if m.router_bias else 0)

    def expert_params(self) -> int:
        """One routed expert's MLP."""
        return self.mlp_params(self.moe.expert_ffn_hidden, self.moe.expert_bias)

    def shared_expert_params(self) -> int:
        """One MoE layer's shared experts (together); 0 without them."""
        f = self.moe.shared_ffn_hidden
        return self.mlp_params(f, False) if f else 0

    def moe_mlp_params(self, active: bool = False) -> int:
        """One MoE layer's MLP part: router, routed experts (all of them, or the top_k a token uses when
        `active`), shared experts."""
        m = self.moe
        return (self.router_params() + (m.top_k if active else m.n_experts) * self.expert_params()
                + self.shared_expert_params())

    def matmul_params_per_layer(self) -> float:
        """Weights one token multiplies by in a mean layer: attention projections and, averaged over the layers,
        the dense MLP or the router, top_k routed and shared experts (2 FLOPs each per token)."""
        attn = self.qkv_params() - self.mla_norm_params() + self.q_dim * self.hidden
        dense = self.mlp_matrices * self.hidden * self.ffn_hidden
        if self.moe is None:
            return attn + dense
        m = self.moe
        moe = self.hidden * m.n_experts + m.top_k * self.mlp_matrices * self.hidden * m.expert_ffn_hidden + (
            self.mlp_matrices * self.hidden * m.shared_ffn_hidden if m.shared_ffn_hidden else 0)
        return attn + (self.dense_layers() * dense + self.moe_layers() * moe) / self.n_layers

    def mla_norm_params(self) -> int:
        """The latents' RMSNorm scales inside qkv_params (not matmul weights)."""
        return (self.mla.q_lora_rank or 0) + self.mla.kv_lora_rank if self.mla else 0

    def params_per_layer(self, active: bool = False) -> float:
        """Parameters of a mean transformer block: attention, MLP (dense, or MoE: all experts, or those one token
        uses when `active`), two norms; averaged over dense and MoE layers."""
        dense = self.mlp_params(self.ffn_hidden)
        mlp = dense if self.moe is None else (
            (self.dense_layers() * dense + self.moe_layers() * self.moe_mlp_params(active)) / self.n_layers)
        return self.attention_params() + mlp + 2 * self.norm_params()

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

    def layer_params(self, active: bool = False) -> int:
        """All transformer blocks' parameters (MoE layers: all experts, or the top_k a token uses when `active`)."""
        return round(self.n_layers * self.params_per_layer(active))

    def mtp_params(self) -> int:
        """Multi-token prediction modules (DeepSeek-V3, Sec. 2.2): per module two norms, a 2h x h projection and
        one block (a MoE block where the model has experts); embedding and LM head shared with the main model."""
        if not self.mtp_layers:
            return 0
        mlp = self.moe_mlp_params() if self.moe is not None else self.mlp_params(self.ffn_hidden)
        block = self.attention_params() + mlp + 2 * self.norm_params()
        return self.mtp_layers * (2 * self.norm_params() + 2 * self.hidden * self.hidden + block + self.norm_params())

    def n_params(self, mtp: bool = False) -> int:
        """Total parameters, counting a tied embedding once (and the multi-token prediction modules with `mtp`;
        published sizes leave them out: DeepSeek-V3's 671B)."""
        return (self.embedding_params() + self.layer_params() + self.head_params()
                + (self.mtp_params() if mtp else 0))

    def active_params(self) -> int:
        """Parameters one token uses in the forward: as n_params, with only top_k routed experts per MoE layer
        (the convention of the DeepSeek-V3, Qwen3 and Mixtral reports: embedding included)."""
        return self.embedding_params() + self.layer_params(active=True) + self.head_params()


# ---------------------------------------------------------------------------------------------------------
# HuggingFace config.json
# ---------------------------------------------------------------------------------------------------------
HF_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "gpt_neox", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3",
                  "kimi_k2", "gpt_oss", "llama4_text", "llama4")


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
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise self._bad(key, "a positive integer" if least > 0 else "a non-negative integer")
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
                    return dict(first_dense_layers=first, layer_freq=freq)
        layers = ", ".join(map(str, sorted(moe))) or "none"
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
    if mt in ("deepseek_v3", "kimi_k2"):
        # DeepseekV3DecoderLayer: layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0 (note:
        # i, not i + 1); shared experts are one MLP of n_shared_experts * moe_intermediate_size. Group-limited
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
    if mt not in HF_MODEL_TYPES:
        raise InputError(f"{where}: model_type = {mt!r} is not supported; valid: {', '.join(HF_MODEL_TYPES)}")
    if mt == "llama4":
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise InputError(f"{where}: field 'text_config' is required for model_type 'llama4' and must be a "
                             f"mapping (the text model's Llama4TextConfig); got {text!r}")
        # tie_word_embeddings sits at the top level of Llama4Config; text_config's own wins where it has one.
        cfg, where, mt = {"tie_word_embeddings": cfg.get("tie_word_embeddings"), **text,
                          "model_type": "llama4_text"}, f"{where} text_config", "llama4_text"
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
    elif mt in ("deepseek_v3", "kimi_k2"):
        # Multi-head latent attention (DeepSeek-V2 Sec. 2.1); kimi_k2 is Kimi-K2's name for the same architecture
        # (DeepseekV3ForCausalLM). num_key_value_heads is ignored: MLA's keys and values come per query head from
        # the latent. head_dim is set to the per-head query/key width (qk_nope_head_dim + qk_rope_head_dim).
        if c.flag("attention_bias", False):
            raise c._bad("attention_bias", "false (MLA projections with biases are not modelled)")
        heads, n_layers = c.count("num_attention_heads"), c.count("num_hidden_layers")
        mla = dict(q_lora_rank=c.optional_count("q_lora_rank", "queries projected directly, no latent"),
                   kv_lora_rank=c.count("kv_lora_rank"), qk_nope_head_dim=c.count("qk_nope_head_dim"),
                   qk_rope_head_dim=c.count("qk_rope_head_dim"), v_head_dim=c.count("v_head_dim"))
        fields = dict(
            n_layers=n_layers, hidden=c.count("hidden_size"), n_heads=heads, n_kv_heads=heads,
            head_dim=mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"], ffn_hidden=c.count("intermediate_size"),
            vocab=c.count("vocab_size"), max_seq_len=c.count("max_position_embeddings"), mlp="swiglu",
            norm="rmsnorm", position="rope", tie_embeddings=c.flag("tie_word_embeddings", False), linear_bias="none",
            dropout=c.prob("attention_dropout", 0.0), moe=_moe_fields(c, mt, n_layers), mla=mla,
            # DeepSeek-V3's own configuration_deepseek.py; transformers' DeepseekV3Config has no such key (and
            # does not load the MTP weights), so absent means none.
            mtp_layers=c.count0("num_nextn_predict_layers", 0),
        )
    else:  # llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, gpt_oss, llama4_text
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
        if mt == "gpt_oss":
            # layer_types: "sliding_attention" / "full_attention" per layer; GptOssConfig's default alternates,
            # windowed first. sliding_window defaults to 128 as there.
            kinds = ("sliding_attention", "full_attention")
            types = c.layer_kinds("layer_types", kinds, n_layers) or [kinds[i % 2] for i in range(n_layers)]
            window = c.count("sliding_window", 128)
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
        else:
            ffn = c.count("intermediate_size")
        fields = dict(
            n_layers=n_layers, hidden=c.count("hidden_size"), n_heads=heads,
            n_kv_heads=c.count("num_key_value_heads", heads),
            # Qwen3 (128), GPT-OSS (64) and Llama 4 (128) set head_dim apart from hidden / heads: required there.
            # Qwen3's q_norm/k_norm (2 x head_dim scales per layer) are not counted: ModelConfig has no field.
            head_dim=c.count("head_dim", ... if mt in ("qwen3", "qwen3_moe", "gpt_oss", "llama4_text") else None),
            ffn_hidden=ffn, vocab=c.count("vocab_size"),
            max_seq_len=c.count("max_position_embeddings"), mlp="swiglu", norm="rmsnorm", position="rope",
            tie_embeddings=c.flag("tie_word_embeddings", False), linear_bias=bias,
            dropout=c.prob("attention_dropout", 0.0), sliding_window=window, sliding_window_layers=window_layers,
        )
        if mt in ("mixtral", "qwen3_moe", "gpt_oss", "llama4_text"):
            fields["moe"] = _moe_fields(c, mt, n_layers)
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
