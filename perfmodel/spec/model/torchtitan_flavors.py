"""torchtitan's model flavors by their sizes, as torchtitan 0.2.2 and 0.3.0 state them
(torchtitan/models/{llama3,qwen3,deepseek_v3}/__init__.py; the same sizes in both releases): facts about the
framework that both its exporter (which flavor a plan's model is nearest) and its config reader (which model a
flavor names) read."""

from __future__ import annotations

from .config import ModelConfig

# torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py): dim, n_layers, n_heads, n_kv_heads, ffn.
LLAMA3_FLAVORS = {"8B": (4096, 32, 32, 8, 14336), "70B": (8192, 80, 64, 8, 28672),
                  "405B": (16384, 126, 128, 8, 53248)}
# torchtitan's mixture-of-experts flavors (0.2.2 and 0.3.0) (torchtitan/models/deepseek_v3/__init__.py, torchtitan/models/
# qwen3/__init__.py; torchtitan/experiments/ before they moved): dim, n_layers, n_heads, n_kv_heads, hidden_dim /
# inter_dim (dense MLP), num_experts, top_k, moe_inter_dim, num_shared_experts, n_dense_layers, score_func, and
# the attention: qwen3's head_dim, deepseek_v3's latent attention (q_lora_rank or 0, kv_lora_rank, qk_nope_head_dim,
# qk_rope_head_dim, v_head_dim; n_kv_heads = n_heads). Their MoE layers are every layer from n_dense_layers on.
MOE_FLAVORS = {
    "deepseek_v3": {"16B": (2048, 27, 16, 16, 10944, 64, 6, 1408, 2, 1, "softmax", (0, 512, 128, 64, 128)),
                    "236B": (5120, 60, 128, 128, 12288, 160, 6, 1536, 2, 1, "softmax", (1536, 512, 128, 64, 128)),
                    "671B": (7168, 61, 128, 128, 18432, 256, 8, 2048, 1, 3, "sigmoid", (1536, 512, 128, 64, 128))},
    "qwen3": {"30B-A3B": (2048, 48, 32, 4, 6144, 128, 8, 768, 0, 0, "softmax", 128),
              "235B-A22B": (4096, 94, 64, 4, 12288, 128, 8, 1536, 0, 0, "softmax", 128)},
}


def moe_shape(m: ModelConfig) -> tuple:
    """A model with experts in MOE_FLAVORS' terms."""
    e, a = m.moe, m.mla
    attention = m.head_dim if a is None else (a.q_lora_rank or 0, a.kv_lora_rank, a.qk_nope_head_dim,
                                              a.qk_rope_head_dim, a.v_head_dim)
    return (m.hidden, m.n_layers, m.n_heads, m.n_heads if a is not None else m.n_kv_heads, m.ffn_hidden, e.n_experts,
            e.top_k, e.expert_ffn_hidden, e.n_shared_experts, e.first_dense_layers, e.router_scoring, attention)


def llama3_shape(m: ModelConfig) -> tuple:
    """A dense model in LLAMA3_FLAVORS' terms."""
    return m.hidden, m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_hidden
