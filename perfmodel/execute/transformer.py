"""The transformer the executor trains: GPT-2 and Llama architectures from a `ModelConfig`, in plain PyTorch.

One module per operator of the plan file (`planfile.OPS`), so that a plan's per-operator placements map one to
one onto modules (tensor_parallel.py), checkpointing can wrap a block or the attention core
(checkpointing.py), and pipeline stages can drop the layers they do not hold (parallel.pipeline.py). The model
knows nothing of parallelism; the only hooks it offers are `AttentionCore.context`, which context parallelism
sets to gather keys and values from the other sequence shards (and serving to a KV cache, execute/inference.py), and `MoE.dispatcher`, which expert parallelism
sets to send routed tokens to the ranks that hold their experts (parallel.expert.py).

  embedding     TokenEmbedding: token table (+ learned positions for GPT-2)
  norm1, norm2  LayerNorm (GPT-2) or RMSNorm (Llama), eps 1e-5
  qkv           three nn.Linear (wq, wk, wv: separate so that GQA heads split evenly)
  attention     AttentionCore: rotary embedding (Llama), causal scaled_dot_product_attention
  out_proj      nn.Linear
  residual1/2   Residual: x + y
  mlp_in        nn.Linear (gelu: w1; swiglu: w1 gate and w3 up)
  activation    Activation: tanh-GeLU, or SiLU(gate) * up
  mlp_out       nn.Linear
  (MoE layers)  the MLP is a MoE: router nn.Linear (hidden -> n_experts), softmax or sigmoid scores, top-k;
                GroupedExperts: the routed experts' weights as batched tensors [n_experts, ...] (expert
                parallelism shards dim 0); shared experts as one MLP every token uses
  final_norm    as norm1
  lm_head       nn.Linear (tied to the token table when the config says so)
  loss          cross entropy, outside the module (train.py)
Dropout is not run (see train.py).
"""

from __future__ import annotations

import math
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from ..spec.model.config import ModelConfig

ROPE_THETA = 10000.0  # Su et al. 2021 (RoFormer), Eq. 15: theta_i = 10000^(-2i/d)
INIT_STD = 0.02  # GPT-2 / Megatron-LM initialisation (Radford et al. 2019; Shoeybi et al. 2019, Sec. 3)


def norm(cfg: ModelConfig) -> nn.Module:
    return nn.LayerNorm(cfg.hidden, eps=1e-5, bias=True) if cfg.norm == "layernorm" else nn.RMSNorm(cfg.hidden, eps=1e-5)


class TokenEmbedding(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.hidden) if cfg.position == "learned" else None
        self.positions: torch.Tensor | None = None  # set by the trainer: the positions of this rank's tokens

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        if self.pos is not None:
            x = x + self.pos(self.positions)
        return x


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x [batch, heads, seq, head_dim] at `positions` [seq] (RoFormer, Eq. 34; the
    half-split pairing of GPT-NeoX and Llama)."""
    d = x.shape[-1]
    inv = ROPE_THETA ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class AttentionCore(nn.Module):
    """softmax(Q K^T / sqrt(d) + causal mask) V over local tensors [batch, seq, heads * head_dim].

    `context` (set by context parallelism) gathers keys and values of the other sequence shards and says
    where this rank's queries sit; without it the sequence is whole and positions are 0..seq-1.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.head_dim, self.rope, self.window = cfg.head_dim, cfg.position == "rope", cfg.sliding_window
        self.context = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, s, _ = q.shape
        q, k, v = (t.reshape(b, t.shape[1], -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if self.context is None:
            q_pos = k_pos = torch.arange(s, device=q.device)
        else:
            q_pos = self.context.positions
        if self.rope:
            q, k = rotate(q, q_pos), rotate(k, q_pos)  # keys are rotated where they live, before any gather
        if self.context is not None:
            k, v, k_pos = self.context.gather(k, v, q_pos)
        gqa = q.shape[1] != k.shape[1]
        # a context that knows its keys need no mask by position says so: `causal` True where queries and keys
        # are the same positions from 0 (a prefill into an empty KV cache), False where one query follows every key
        # (a decode step); None (context parallelism): mask by position
        causal = True if self.context is None else getattr(self.context, "causal", None)
        if causal is not None and self.window is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        else:
            mask = k_pos[None, :] <= q_pos[:, None]
            if self.window is not None:
                mask &= k_pos[None, :] > q_pos[:, None] - self.window
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return out.transpose(1, 2).reshape(b, s, -1)


class Adapter(nn.Module):
    """A LoRA update B A beside a frozen linear (Hu et al. 2021, Sec. 4.1): x -> B (A x), A (r x k) drawn at
    random, B (n x r) zero, so the adapted model starts as the base one (execute.lora adds them)."""

    def __init__(self, k: int, n: int, rank: int):
        super().__init__()
        self.a = nn.Linear(k, rank, bias=False)
        self.b = nn.Linear(rank, n, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        bias = cfg.linear_bias in ("qkv", "all")
        self.wq = nn.Linear(cfg.hidden, cfg.q_dim, bias=bias)
        self.wk = nn.Linear(cfg.hidden, cfg.kv_dim, bias=bias)
        self.wv = nn.Linear(cfg.hidden, cfg.kv_dim, bias=bias)
        self.core = AttentionCore(cfg)
        self.wo = nn.Linear(cfg.q_dim, cfg.hidden, bias=cfg.linear_bias == "all")
        self.qkv_lora: Adapter | None = None  # LoRA on the fused q, k, v projection (one A), and on wo
        self.wo_lora: Adapter | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.qkv_lora is not None:
            dq, dk, dv = self.qkv_lora(x).split([q.shape[-1], k.shape[-1], v.shape[-1]], dim=-1)
            q, k, v = q + dq, k + dk, v + dv
        z = self.core(q, k, v)
        out = self.wo(z)
        return out if self.wo_lora is None else out + self.wo_lora(z)


class Activation(nn.Module):
    def __init__(self, gated: bool):
        super().__init__()
        self.gated = gated

    def forward(self, gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
        return F.silu(gate) * up if self.gated else F.gelu(gate, approximate="tanh")


class MLP(nn.Module):
    """The dense MLP (width ffn_hidden), or, given `ffn` and `bias`, a MoE layer's shared experts."""

    def __init__(self, cfg: ModelConfig, ffn: int | None = None, bias: bool | None = None):
        super().__init__()
        bias = cfg.linear_bias == "all" if bias is None else bias
        ffn = ffn or cfg.ffn_hidden
        self.w1 = nn.Linear(cfg.hidden, ffn, bias=bias)
        self.w3 = nn.Linear(cfg.hidden, ffn, bias=bias) if cfg.gated else None
        self.act = Activation(cfg.gated)
        self.w2 = nn.Linear(ffn, cfg.hidden, bias=bias)
        self.w13_lora: Adapter | None = None  # LoRA on the fused [w1; w3] (one A), and on w2
        self.w2_lora: Adapter | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w1(x), (self.w3(x) if self.w3 is not None else None)
        if self.w13_lora is not None:
            d = self.w13_lora(x)
            f = gate.shape[-1]
            gate, up = gate + d[..., :f], (up + d[..., f:] if up is not None else None)
        h = self.act(gate, up)
        out = self.w2(h)
        return out if self.w2_lora is None else out + self.w2_lora(h)


class GroupedExperts(nn.Module):
    """`n` expert MLPs (SwiGLU or GeLU, as the model's MLP) with their weights stacked on dim 0: w1 (and w3)
    [n, ffn, hidden], w2 [n, hidden, ffn] (nn.Linear's [out, in] per expert), biases [n, ffn] / [n, hidden].

    forward(x, counts): x holds the tokens of expert 0, then of expert 1, ... (counts[e] rows each, for the
    experts this module holds); returns each token's expert output in the same order. Every expert runs, even
    on no tokens, so that every weight has a gradient on every rank."""

    def __init__(self, hidden: int, ffn: int, n: int, gated: bool, bias: bool):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n, ffn, hidden))
        self.w3 = nn.Parameter(torch.empty(n, ffn, hidden)) if gated else None
        self.w2 = nn.Parameter(torch.empty(n, hidden, ffn))
        self.w1_bias = nn.Parameter(torch.empty(n, ffn)) if bias else None
        self.w3_bias = nn.Parameter(torch.empty(n, ffn)) if bias and gated else None
        self.w2_bias = nn.Parameter(torch.empty(n, hidden)) if bias else None
        self.act = Activation(gated)

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        def b(t, e):
            return None if t is None else t[e]

        out = []
        for e, part in enumerate(x.split(counts)):
            h = F.linear(part, self.w1[e], b(self.w1_bias, e))
            h = self.act(h, F.linear(part, self.w3[e], b(self.w3_bias, e))) if self.w3 is not None else self.act(h)
            out.append(F.linear(h, self.w2[e], b(self.w2_bias, e)))
        return torch.cat(out)


class MoE(nn.Module):
    """A mixture-of-experts MLP: a router picks `top_k` of `n_experts` routed experts per token, whose outputs
    are summed weighted by the router's scores; shared experts (if any) add their output for every token.

    Scores: softmax over all experts, the top-k kept as they are (Megatron-Core's default, GShard/Switch), or
    sigmoid, the top-k renormalised to sum to 1 (DeepSeek-V3, Sec. 2.1.2). Dropless (every token reaches its
    experts, no capacity), deterministic (stable sorts, no random jitter), no auxiliary load-balancing loss.

    The routed tokens are sorted by expert; `dispatcher` (None: every expert is here) is the hook expert
    parallelism sets: `dispatch(x, counts)` sends them to the ranks that hold their experts and returns the
    tokens of this rank's experts with their counts and a handle; `combine(y, handle)` sends the outputs back.
    `counts` keeps the tokens per expert of the last forward (this rank's tokens; a statistic, no gradient).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        m = cfg.moe
        self.n_experts, self.top_k, self.scoring = m.n_experts, m.top_k, m.router_scoring
        self.router = nn.Linear(cfg.hidden, m.n_experts, bias=m.router_bias)
        self.experts = GroupedExperts(cfg.hidden, m.expert_ffn_hidden, m.n_experts, cfg.gated, m.expert_bias)
        self.shared = MLP(cfg, m.shared_ffn_hidden, bias=False) if m.shared_ffn_hidden else None
        self.dispatcher = None
        self.counts: torch.Tensor | None = None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [tokens, top_k], expert ids [tokens, top_k]) of tokens x [tokens, hidden]."""
        logits = self.router(x).float()
        scores = logits.softmax(-1) if self.scoring == "softmax" else logits.sigmoid()
        weights, ids = torch.topk(scores, self.top_k, dim=-1)
        if self.scoring == "sigmoid":
            weights = weights / weights.sum(-1, keepdim=True)
        return weights, ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, ids = self.route(x)
        flat = ids.reshape(-1)  # token t's k-th choice at t * top_k + k
        order = torch.argsort(flat, stable=True)  # (token, choice) pairs grouped by expert
        counts = torch.bincount(flat, minlength=self.n_experts)
        self.counts = counts.detach()
        routed = x[order // self.top_k]
        if self.dispatcher is None:
            y = self.experts(routed, counts.tolist())
        else:
            local, local_counts, handle = self.dispatcher.dispatch(routed, counts)
            y = self.dispatcher.combine(self.experts(local, local_counts), handle)
        y = y[torch.argsort(order)].reshape(-1, self.top_k, shape[-1])  # back to (token, choice) order
        out = (y * weights.unsqueeze(-1).to(y.dtype)).sum(1)
        if self.shared is not None:
            out = out + self.shared(x)
        return out.reshape(shape)


class Residual(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class Block(nn.Module):
    """Pre-norm transformer block (GPT-2, Llama); layer `index`'s MLP is a MoE where the config says so."""

    def __init__(self, cfg: ModelConfig, index: int = 0):
        super().__init__()
        self.norm1, self.attention, self.residual1 = norm(cfg), Attention(cfg), Residual()
        self.norm2, self.residual2 = norm(cfg), Residual()
        self.mlp = MoE(cfg) if cfg.is_moe_layer(index) else MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.residual1(x, self.attention(self.norm1(x)))
        return self.residual2(x, self.mlp(self.norm2(x)))


class Transformer(nn.Module):
    """Embedding, `n_layers` blocks (a ModuleDict keyed by global layer index, so that a pipeline stage keeps
    the names of the layers it holds), final norm and LM head. Any part may be None on a pipeline stage."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(cfg)
        self.layers = nn.ModuleDict({str(i): Block(cfg, i) for i in range(cfg.n_layers)})
        self.final_norm = norm(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embedding.tok.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids [batch, seq] (or hidden states on a later pipeline stage) -> logits (or hidden states)."""
        if self.embedding is not None:
            x = self.embedding(x)
        for layer in self.layers.values():
            x = layer(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.lm_head is not None:
            x = self.lm_head(x)
        return x


def init_std(name: str, cfg: ModelConfig) -> float | None:
    """Standard deviation of the normal initialisation of parameter `name`; None for ones (norm scales) and
    zeros (biases, norm shifts). Output projections of each residual branch are scaled by 1/sqrt(2 n_layers)
    (Radford et al. 2019, GPT-2, Sec. 2.3)."""
    if name.endswith("bias") or ".norm" in name or name.startswith("final_norm") or "_lora.b." in name:
        return None  # (a LoRA B starts at zero: Hu et al. 2021, Sec. 4.1)
    if name.endswith(("wo.weight", "w2.weight", "experts.w2")):
        return INIT_STD / math.sqrt(2 * cfg.n_layers)
    return INIT_STD


def is_expert_weight(name: str) -> bool:
    """A routed experts' batched weight or bias ([n_experts, ...]; expert parallelism shards dim 0)."""
    return ".experts." in name or name.startswith("experts.")


@torch.no_grad()
def initial_value(name: str, shape, cfg: ModelConfig, seed: int, device, first_expert: int = 0) -> torch.Tensor:
    """The full (unsharded) initial value of parameter `name`: the same on every rank and in every layout,
    because it is drawn from a generator seeded by the seed and the parameter's name alone.

    A routed experts' weight [n, ...] is drawn one expert at a time (expert e under the name `name/e`), so that
    a rank holding experts first_expert .. first_expert + n - 1 draws just its shard, equal to that part of the
    whole."""
    if init_std(name, cfg) is None:
        fill = 0.0 if name.endswith("bias") or "_lora.b." in name else 1.0
        return torch.full(shape, fill, device=device)
    if is_expert_weight(name) and "/" not in name:
        return torch.stack([initial_value(f"{name}/{first_expert + e}", tuple(shape[1:]), cfg, seed, device)
                            for e in range(shape[0])])
    std = init_std(name.split("/")[0], cfg)
    name = "embedding.tok.weight" if name == "lm_head.weight" and cfg.tie_embeddings else name
    gen = torch.Generator(device=device)
    gen.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
    return torch.empty(shape, device=device).normal_(0.0, std, generator=gen)
