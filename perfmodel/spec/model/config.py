"""Model schema (a decoder-only transformer, dense or mixture-of-experts, with grouped-query or DeepSeek's
multi-head latent attention), parameter counts (total and active per token), and loading by preset name or HF
config.json."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ...types import Count, Count0, Flag, Real, Schema
from .global_attention import GlobalAttentionConfig, check as check_global, shaped

# The most layers (and leading dense layers, MoE layer interval, MTP modules) a model may have: far beyond any
# published model (Megatron-LM's 1T has 128), small enough that the per-layer rules run at once.
MAX_LAYERS = 10_000


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
    n_shared_experts: Count0 = Field(0, description="experts every token uses, besides the routed ones")
    shared_ffn_hidden: Count | None = Field(
        None, description="inner width of the shared experts together; default n_shared_experts * expert_ffn_hidden")
    first_dense_layers: Count0 = Field(0, le=MAX_LAYERS,
                                    description="leading layers with a dense MLP (first_k_dense_replace)")
    layer_freq: Count = Field(1, le=MAX_LAYERS, description="every layer_freq-th layer is a MoE layer (1: all)")
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


class SparseAttentionConfig(Schema):
    """DeepSeek Sparse Attention (DeepSeek-AI 2025, DeepSeek-V3.2-Exp report, Sec. 2.1; GLM-5 uses it as is): a
    lightning indexer scores every earlier token for each query, I(t, s) = sum_j w(t, j) ReLU(q(t, j) . k(s)), over
    `index_heads` heads of `index_head_dim` in FP8, and the main attention reads only the `topk` best keys. Every
    token stays in the cache (plus one index key per token and layer): the work, not the memory, is what shrinks.
    Parameters as the reference Indexer (DeepSeek-V3.2-Exp inference/model.py): wq_b (query latent, or hidden
    without one, to index_heads x index_head_dim), wk (hidden to index_head_dim) with a LayerNorm, and
    weights_proj (hidden to index_heads)."""

    topk: Count = Field(description="keys each query attends to (index_topk)")
    index_heads: Count = Field(description="indexer heads (index_n_heads)")
    index_head_dim: Count = Field(description="indexer query/key width per head (index_head_dim)")


class LinearAttentionConfig(Schema):
    """Gated DeltaNet layers (Yang, Kautz and Hatamizadeh 2025, "Gated Delta Networks", ICLR, Sec. 3; Qwen3-Next's and
    Qwen3.5's Qwen3NextGatedDeltaNet in transformers): `layers` of the model's layers replace attention by a gated
    delta-rule recurrence. Each projects the hidden state to queries and keys (key_heads x key_head_dim each),
    values and an output gate (value_heads x value_head_dim each) and two per-head gates (beta, alpha), runs a
    depthwise causal convolution of conv_kernel taps over q, k and v, keeps per sequence one key_head_dim x
    value_head_dim state per value head (in `state_bytes`: fp32 in Qwen3.5, mamba_ssm_dtype), and projects the
    gated, normed output back to the hidden size. No KV cache: a fixed state per sequence instead."""

    layers: Count = Field(description="layers that are Gated DeltaNet (the others full attention)")
    key_heads: Count = Field(description="query/key heads (linear_num_key_heads)")
    key_head_dim: Count = Field(description="query/key width per head (linear_key_head_dim)")
    value_heads: Count = Field(description="value heads, each with its own state (linear_num_value_heads)")
    value_head_dim: Count = Field(description="value width per head (linear_value_head_dim)")
    conv_kernel: Count = Field(4, description="causal convolution taps (linear_conv_kernel_dim)")
    state_bytes: Real = Field(4.0, gt=0, description="bytes per element of the recurrent state (fp32: 4)")
    chunk: Count = Field(64, description="tokens per chunk of the chunked delta-rule kernel (flash-linear-attention's "
                                         "chunk_gated_delta_rule: 64)")

    @property
    def key_dim(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.value_heads * self.value_head_dim


class PublishedAcceptance(Schema):
    """A model's published acceptance of its own multi-token prediction draft: the default of speculative decoding
    with method mtp where a user states none (spec.serving.schema.resolve_serve)."""

    rate: Real = Field(gt=0, lt=1, description="probability a draft token is accepted given the ones before it were")
    source: str = Field(min_length=1, description="the paper, section and figure it comes from")


class ModelConfig(Schema):
    """Shape of a decoder-only transformer: everything the cost model needs, nothing about parallelism."""

    name: str = Field(description="model name")
    n_layers: Count = Field(le=MAX_LAYERS, description="transformer blocks")
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
    dropout: Real = Field(0.0, ge=0, lt=1, description="hidden and attention dropout probability in training")
    sliding_window: Count | None = Field(None, description="attention window in tokens (e.g. Mistral v0.1)")
    sliding_window_layers: Count0 | None = Field(
        None, le=MAX_LAYERS, description="how many layers use sliding_window (GPT-OSS alternates); default all of them")
    moe: MoEConfig | None = Field(None, description="mixture-of-experts layers; None for a dense model")
    mla: MLAConfig | None = Field(None, description="multi-head latent attention; None for (grouped-query) MHA")
    linear_attention: LinearAttentionConfig | None = Field(
        None, description="Gated DeltaNet layers among the layers (Qwen3-Next, Qwen3.5); None: all full attention")
    attention_output_gate: Flag = Field(False, description="full attention gates its output by a sigmoid of a second "
                                                           "query-wide projection (Qwen3-Next, Qwen3.5)")
    sparse_attention: SparseAttentionConfig | None = Field(
        None, description="DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): each query reads its topk keys")
    global_attention: GlobalAttentionConfig | None = Field(
        None, description="the head shape of the layers without sliding_window where it is their own (Gemma 4)")
    mtp_layers: Count0 = Field(0, le=MAX_LAYERS, description="multi-token prediction modules (DeepSeek-V3: 1), each an "
                                                 "embedding-concat projection and one transformer block")
    mtp_acceptance: PublishedAcceptance | None = Field(
        None, description="the published acceptance of the MTP module as a speculative draft (DeepSeek-V3: 85-90% "
                          "for the second token); None: none published, so speculative decoding states its own")
    fp8_weight_blocks: Flag = Field(False, description="the model's published fp8 checkpoint scales weights in 128 x "
                                                      "128 blocks (quantization_config.weight_block_size: DeepSeek-V3, "
                                                      "Kimi K2, Qwen3 FP8, MiniMax-M2, GLM-5-FP8), so its fp8 MoE "
                                                      "layers run the block-scaled kernels (serve.moe_kernels)")
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
        la = self.linear_attention
        if la is not None:
            if la.layers >= self.n_layers or self.mla is not None or self.sliding_window is not None:
                raise ValueError(f"linear_attention.layers = {la.layers} of {self.n_layers} layers (mla "
                                 f"{self.mla is not None}, sliding_window {self.sliding_window}); valid: fewer than "
                                 "n_layers, beside grouped-query attention without windows")
            if la.value_dim != self.q_dim:
                raise ValueError(f"linear_attention value_heads x value_head_dim = {la.value_dim} differs from the full "
                                 f"attention's n_heads x head_dim = {self.q_dim}; valid: equal widths (the output "
                                 "projection the mean layer shares)")
        if self.sparse_attention is not None and self.sliding_window is not None:
            raise ValueError(f"sliding_window = {self.sliding_window} with sparse_attention is not modelled; valid: "
                             "one of the two (sliding_window null, or sparse_attention null)")
        if self.sliding_window_layers is not None and self.sliding_window_layers > self.n_layers:
            raise ValueError(f"sliding_window_layers = {self.sliding_window_layers} exceeds n_layers = "
                             f"{self.n_layers}; valid: 0..{self.n_layers}")
        check_global(self)
        return self

    # -- derived sizes -----------------------------------------------------------------------------------
    @property
    def q_dim(self) -> float:
        """Width of the attention output (what the output projection reads): n_heads * head_dim, or with MLA
        n_heads * v_head_dim; with global_attention the mean over the layers (`shaped`)."""
        return self.n_heads * self.mla.v_head_dim if self.mla else shaped(self, lambda s: self.n_heads * s.head_dim)

    @property
    def kv_dim(self) -> float:
        """Width of each of the key and value projections: n_kv_heads * head_dim (MLA: kv_lora_rank, what one
        token's cache holds besides the shared rotary key); with global_attention the mean over the layers."""
        return self.mla.kv_lora_rank if self.mla else shaped(self, lambda s: s.n_kv_heads * s.head_dim)

    @property
    def kv_proj_dim(self) -> float:
        """Output width of the key and value projections together: 2 kv_dim, but kv_dim in a global layer whose
        keys are its values (GlobalAttentionConfig.shared_kv); the mean over the layers."""
        return 2 * self.kv_dim if self.mla else shaped(self, lambda s: (2 - s.shared_kv) * s.n_kv_heads * s.head_dim)

    @property
    def qk_dim(self) -> float:
        """Width of the query (and of all keys) the attention core contracts over: n_heads * head_dim (MLA:
        n_heads * (qk_nope_head_dim + qk_rope_head_dim)); with global_attention the mean over the layers."""
        return self.n_heads * self.mla.qk_head_dim if self.mla else self.q_dim

    @property
    def windowed_layers(self) -> int:
        """Layers that attend within sliding_window: sliding_window_layers, all where unset, none without a window."""
        if self.sliding_window is None:
            return 0
        return self.n_layers if self.sliding_window_layers is None else self.sliding_window_layers

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
        latents' norms (q_lora, kv_lora scales). Sparse attention adds its indexer (`indexer_params`).
        """
        h = self.hidden
        if self.mla is None:
            full = h * (self.q_dim * (2 if self.attention_output_gate else 1) + self.kv_proj_dim)
            return self._mean_over_kinds(full, self.delta_in_params()) + self.indexer_params()
        a, heads = self.mla, self.n_heads
        q = (h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * heads * a.qk_head_dim if a.q_lora_rank
             else h * heads * a.qk_head_dim)
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank + a.kv_lora_rank * heads * (
            a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + self.indexer_params()

    @property
    def full_attention_layers(self) -> int:
        """Layers with (softmax) attention and a KV cache: all but the linear-attention ones."""
        return self.n_layers - (self.linear_attention.layers if self.linear_attention else 0)

    def _mean_over_kinds(self, full: float, linear: float) -> float:
        """A per-layer count averaged over full-attention and linear-attention layers (the mean layer)."""
        if self.linear_attention is None:
            return full
        n = self.linear_attention.layers
        return (self.full_attention_layers * full + n * linear) / self.n_layers

    def delta_in_params(self) -> int:
        """One Gated DeltaNet layer's input side (`LinearAttentionConfig`): the projections to q, k (key_dim each),
        v and the output gate z (value_dim each) and the beta and alpha gates (value_heads each), the depthwise
        convolution over q, k, v (conv_kernel taps), dt_bias and A_log (value_heads each) and the gated RMSNorm's
        value_head_dim scales; 0 without linear attention. The output projection (value_dim = q_dim) is the mean
        layer's out_proj."""
        la = self.linear_attention
        if la is None:
            return 0
        return (self.hidden * (2 * la.key_dim + 2 * la.value_dim + 2 * la.value_heads)
                + la.conv_kernel * (2 * la.key_dim + la.value_dim) + 2 * la.value_heads + la.value_head_dim)

    def indexer_params(self) -> int:
        """One layer's sparse-attention indexer (`SparseAttentionConfig`): the index query from the query latent
        (or the hidden state) to heads x d_I, the index key h x d_I with its LayerNorm (2 d_I), the head weights
        h x heads; 0 without sparse attention."""
        s = self.sparse_attention
        if s is None:
            return 0
        q_in = self.mla.q_lora_rank if self.mla is not None and self.mla.q_lora_rank else self.hidden
        return (q_in * s.index_heads * s.index_head_dim + self.hidden * s.index_head_dim + 2 * s.index_head_dim
                + self.hidden * s.index_heads)

    def linear_has_bias(self, name: str) -> bool:
        """Whether the layer linear `name` (qkv, out_proj, mlp_in, mlp_out; the LM head never) has a bias: qkv under
        linear_bias qkv or all (not with MLA's projections), the others under all."""
        if name == "qkv":
            return self.linear_bias in ("qkv", "all") and self.mla is None
        return name != "lm_head" and self.linear_bias == "all"

    def attention_params(self) -> int:
        """One layer's attention weights and biases: qkv_params, the output projection q_dim x h, biases."""
        bias = ((self.q_dim + self.kv_proj_dim) * self.linear_has_bias("qkv")
                + self.hidden * self.linear_has_bias("out_proj"))
        return self.qkv_params() + self.q_dim * self.hidden + bias

    def mlp_matmul_params(self, ffn: float) -> float:
        """The weight matrices of one MLP (or expert) of inner width `ffn`: mlp_matrices x hidden x ffn."""
        return self.mlp_matrices * self.hidden * ffn

    def mlp_params(self, ffn: int, bias: bool | None = None) -> int:
        """One MLP (or expert) of inner width `ffn`: its matrices, plus biases where the model has them."""
        g = 2 if self.gated else 1
        b = (self.linear_bias == "all") if bias is None else bias
        return self.mlp_matmul_params(ffn) + (g * ffn + self.hidden if b else 0)

    def is_moe_layer(self, i: int) -> bool:
        """Layer i (from 0) routes its MLP to experts: MoEConfig's rule, i >= first_dense_layers and
        (i + 1) % layer_freq == 0; never in a dense model."""
        m = self.moe
        return m is not None and i >= m.first_dense_layers and (i + 1) % m.layer_freq == 0

    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (`is_moe_layer`); 0 for a dense model."""
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

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
        attn = self.qkv_matmul_params() + self.q_dim * self.hidden
        dense = self.mlp_matmul_params(self.ffn_hidden)
        if self.moe is None:
            return attn + dense
        m = self.moe
        moe = (self.hidden * m.n_experts + m.top_k * self.mlp_matmul_params(m.expert_ffn_hidden)
               + self.mlp_matmul_params(m.shared_ffn_hidden or 0))
        return attn + (self.dense_layers() * dense + self.moe_layers() * moe) / self.n_layers

    def qkv_matmul_params(self) -> int:
        """qkv_params without the MLA latents' RMSNorm scales (q_lora_rank + kv_lora_rank), the indexer key's
        LayerNorm (2 index_head_dim) and a Gated DeltaNet's convolution, gates' biases and norm: its matrices."""
        norms = 2 * self.sparse_attention.index_head_dim if self.sparse_attention else 0
        la = self.linear_attention
        if la is not None:
            norms += la.layers / self.n_layers * (la.conv_kernel * (2 * la.key_dim + la.value_dim)
                                                  + 2 * la.value_heads + la.value_head_dim)
        return self.qkv_params() - norms - ((self.mla.q_lora_rank or 0) + self.mla.kv_lora_rank if self.mla else 0)

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
        (the convention of the Mixtral and Qwen3 reports: embedding included; the gpt-oss model card leaves the
        input embedding out, tests/test_models_moe.py)."""
        return self.embedding_params() + self.layer_params(active=True) + self.head_params()
