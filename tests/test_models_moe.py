"""Mixture-of-experts and MLA models: presets against published total and active sizes, HuggingFace config.json
of model types mixtral, qwen3_moe, deepseek_v3 / kimi_k2, gpt_oss, llama4 and dense qwen3 parsed into the same
models, hand counts, and bad input (one-line InputError naming the key)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.model.hf_config import from_hf_config
from perfmodel.spec.model.catalogue import load_model

HF = Path(__file__).parent / "fixtures" / "hf"


def _hf(name: str) -> ModelConfig:
    return load_model(str(HF / name / "config.json"))


def _raw(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text())


# ---------------------------------------------------------------------------------------------------------
# Presets vs published sizes
# ---------------------------------------------------------------------------------------------------------
# What counts as "active" differs by family; the formula is not adjusted, the convention is applied here:
# - "with_embedding": ModelConfig.active_params(), every parameter a token touches including the input embedding
#   row table and the LM head (Mixtral, Qwen3, DeepSeek, Kimi, Moonlight, Llama 4). Excluding the embedding
#   would give Mixtral 12.7B and Qwen3-30B-A3B 3.0B, against the published 12.9B and 3.3B.
# - "without_input_embedding": OpenAI's gpt-oss model card counts the unembedding but not the embedding (a
#   lookup, no matmul): active_params() - vocab * hidden gives its 5.13B and 3.61B to the digit, while the
#   embedding included would give 5.71B and 4.19B.
# - "non_embedding": n_params() less the embedding and the LM head (Qwen3 model cards).
def _count(m: ModelConfig, what: str) -> int:
    return {
        "total": m.n_params(),
        "with_embedding": m.active_params(),
        "without_input_embedding": m.active_params() - m.vocab * m.hidden,
        "non_embedding": m.n_params() - m.embedding_params() - m.vocab * m.hidden * (not m.tie_embeddings),
    }[what]


# How the published figure is compared:
# - ("round", unit): quoted to the digit `unit`, the count must round to it (within unit / 2);
# - ("truncate", unit): the figure is the count cut off at the digit `unit` (published <= count < + unit);
# - ("rel", r): the figure is within a relative r of the count (for figures whose convention is unclear).
PUBLISHED_MOE = [
    # Mistral AI, "Mixtral of experts" (2023-12-11 announcement) and Jiang et al. 2024: 46.7B total, 12.9B
    # used per token (46,702,792,704 and 12,879,925,248 here).
    ("mixtral-8x7b", "total", 46.7e9, ("round", 0.1e9)),
    ("mixtral-8x7b", "with_embedding", 12.9e9, ("round", 0.1e9)),
    # Mistral AI, "Cheaper, Better, Faster, Stronger" (Mixtral 8x22B announcement, 2024-04-17): 141B total, 39B
    # active.
    ("mixtral-8x22b", "total", 141e9, ("round", 1e9)),
    ("mixtral-8x22b", "with_embedding", 39e9, ("round", 1e9)),
    # Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated, 29.9B non-embedding. The activated figure is
    # 3.353B cut off, not rounded (the same count reproduces the card's other figures to the digit).
    ("qwen3-30b-a3b", "total", 30.5e9, ("round", 0.1e9)),
    ("qwen3-30b-a3b", "non_embedding", 29.9e9, ("round", 0.1e9)),
    ("qwen3-30b-a3b", "with_embedding", 3.3e9, ("truncate", 0.1e9)),
    # Qwen/Qwen3-235B-A22B model card: 235B total, 22B activated, 234B non-embedding.
    ("qwen3-235b-a22b", "total", 235e9, ("round", 1e9)),
    ("qwen3-235b-a22b", "non_embedding", 234e9, ("round", 1e9)),
    ("qwen3-235b-a22b", "with_embedding", 22e9, ("round", 1e9)),
    # DeepSeek-V3 technical report (arXiv 2412.19437), abstract and Sec. 4.2: 671B total, 37B activated per token,
    # MTP module excluded (671.03B here). The activated count is 37.55B with the embedding (36.63B without): the
    # report's figure is either truncated or leaves out the embedding, so it is checked to 1.5%.
    ("deepseek-v3", "total", 671e9, ("round", 1e9)),
    ("deepseek-v3", "with_embedding", 37e9, ("rel", 0.015)),
    # Kimi K2 technical report (arXiv 2507.20534), Sec. 2.3: 1.04T total; moonshotai/Kimi-K2-Instruct model card:
    # 1T total, 32B activated. The config's shapes give 1.026T (1.3% under 1.04T, and 1T rounded) and 32.86B
    # activated (32B cut off).
    ("kimi-k2", "total", 1.04e12, ("rel", 0.015)),
    ("kimi-k2", "with_embedding", 32e9, ("truncate", 1e9)),
    # moonshotai/Moonlight-16B-A3B model card: 16B total, 3B activated (one significant digit; 15.96B and
    # 2.91B here).
    ("moonlight-16b-a3b", "total", 16e9, ("round", 1e9)),
    ("moonlight-16b-a3b", "with_embedding", 3e9, ("round", 1e9)),
    # gpt-oss-120b & gpt-oss-20b model card (OpenAI 2025), Table 1: 116.83B / 5.13B and 20.91B / 3.61B; active
    # without the input embedding (see above). Attention sinks (64 per layer) are not counted: 2,304 parameters.
    ("gpt-oss-120b", "total", 116.83e9, ("round", 0.01e9)),
    ("gpt-oss-120b", "without_input_embedding", 5.13e9, ("round", 0.01e9)),
    ("gpt-oss-20b", "total", 20.91e9, ("round", 0.01e9)),
    ("gpt-oss-20b", "without_input_embedding", 3.61e9, ("round", 0.01e9)),
    # meta-llama/Llama-4-Scout-17B-16E model card: 109B total, 17B active. The total includes the vision encoder
    # (34 layers of 1408) and its projector, which the text model (107.77B) leaves out: checked to 1.5%.
    ("llama-4-scout", "total", 109e9, ("rel", 0.015)),
    ("llama-4-scout", "with_embedding", 17e9, ("round", 1e9)),
]


@pytest.mark.parametrize("name,what,published,check", PUBLISHED_MOE,
                         ids=[f"{r[0]}-{r[1]}" for r in PUBLISHED_MOE])
def test_moe_preset_matches_published_size(name, what, published, check):
    n = _count(load_model(name), what)
    kind, tol = check
    if kind == "round":
        assert abs(n - published) <= tol / 2, f"{name} {what}: {n:,} does not round to {published:,.0f}"
    elif kind == "truncate":
        assert published <= n < published + tol, f"{name} {what}: {n:,} does not truncate to {published:,.0f}"
    else:
        assert abs(n - published) <= tol * published, \
            f"{name} {what}: {n:,} is not within {tol:.1%} of {published:,.0f}"


def test_every_moe_count_within_two_percent():
    # Whatever the quoting convention, no count is more than 2% from its published figure (the largest gaps:
    # Moonlight's "3B" activated 2.8% and Kimi K2's "32B" 2.7%, both quoted to one significant digit; see above).
    for name, what, published, _ in PUBLISHED_MOE:
        if name in ("moonlight-16b-a3b", "kimi-k2") and what == "with_embedding":
            continue
        n = _count(load_model(name), what)
        assert abs(n / published - 1) < 0.02, (name, what, n)


def test_deepseek_v3_exact_and_with_mtp():
    m = load_model("deepseek-v3")
    h, V, L, H = 7168, 129280, 61, 128
    attn = (h * 1536 + 1536 + 1536 * H * 192) + (h * (512 + 64) + 512 + 512 * H * (128 + 128)) + H * 128 * h
    dense = 3 * h * 18432
    moe = h * 256 + 256 * 3 * h * 2048 + 3 * h * 2048
    total = 2 * V * h + 3 * (attn + dense + 2 * h) + 58 * (attn + moe + 2 * h) + h
    assert m.n_params() == total == 671_026_404_352
    # The MTP module (Sec. 2.2): two norms, the 2h x h projection, one MoE block and its output norm; it shares
    # the embedding and LM head. The HF checkpoint's 685B (deepseek-ai/DeepSeek-V3 README: 671B main model + 14B
    # MTP) stores a copy of both in model.layers.61 (embed_tokens, shared_head.head); with them, 684.49B.
    mtp = 2 * h + 2 * h * h + (attn + moe + 2 * h) + h
    assert m.n_params(mtp=True) == total + mtp
    assert abs(m.n_params(mtp=True) - 671e9 - 14e9) / 685e9 < 0.005
    assert abs(m.n_params(mtp=True) + 2 * V * h - 685e9) / 685e9 < 0.001
    # A dense model has no MTP parameters unless it says so; the MoE rule: first 3 dense, 58 MoE.
    assert (m.dense_layers(), m.moe_layers()) == (3, 58)
    assert load_model("mixtral-8x7b").n_params(mtp=True) == load_model("mixtral-8x7b").n_params()


def test_gpt_oss_120b_components_match_the_model_card():
    # gpt-oss model card, Table 1 by component: MLP 114.71B, attention 0.96B, embed + unembed 1.16B.
    m = load_model("gpt-oss-120b")
    h, E, f = 2880, 128, 2880
    expert = 2 * h * f + 2 * f + f * h + h  # fused gate/up with biases, down with bias
    router = h * E + E
    assert m.expert_params() == expert and m.router_params() == router
    assert round(m.moe_layers() * m.moe_mlp_params() / 1e7) == 11471
    assert round(m.n_layers * m.attention_params() / 1e7) == 96
    attn = h * 64 * 64 + 2 * h * 8 * 64 + 64 * 64 * h + (64 * 64 + 2 * 8 * 64) + h  # q, k, v, o and their biases
    assert m.attention_params() == attn
    assert round(2 * m.vocab * h / 1e7) == 116
    assert m.sliding_window == 128 and m.sliding_window_layers == 18


def test_mixtral_8x7b_exact_hand_count():
    h, kv, f, V, E = 4096, 1024, 14336, 32000, 8
    per_layer = 2 * h * h + 2 * h * kv + h * E + E * 3 * h * f + 2 * h
    assert load_model("mixtral-8x7b").n_params() == 2 * V * h + 32 * per_layer + h == 46_702_792_704
    active_layer = 2 * h * h + 2 * h * kv + h * E + 2 * 3 * h * f + 2 * h
    assert load_model("mixtral-8x7b").active_params() == 2 * V * h + 32 * active_layer + h


# ---------------------------------------------------------------------------------------------------------
# A small MoE + MLA model counted by hand
# ---------------------------------------------------------------------------------------------------------
def test_small_moe_mla_hand_count():
    h, H, V, L = 64, 4, 100, 5
    ql, kvl, nope, rope, vd = 48, 32, 16, 8, 16
    E, k, fe, shared, f = 8, 2, 32, 2, 128
    m = ModelConfig(
        name="tiny", n_layers=L, hidden=h, n_heads=H, ffn_hidden=f, vocab=V, max_seq_len=64, mlp="swiglu",
        norm="rmsnorm", position="rope", mtp_layers=1,
        moe=dict(n_experts=E, top_k=k, expert_ffn_hidden=fe, n_shared_experts=shared, first_dense_layers=1,
                 layer_freq=2, router_scoring="sigmoid"),
        mla=dict(q_lora_rank=ql, kv_lora_rank=kvl, qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=vd))
    # Layers 0..4: layer 0 dense (first_dense_layers), then (i + 1) % 2 == 0: layers 1 and 3 MoE, 2 and 4 dense.
    assert (m.moe_layers(), m.dense_layers()) == (2, 3)
    q = h * ql + ql + ql * H * (nope + rope)  # down-projection, latent RMSNorm, up-projection
    kv = h * (kvl + rope) + kvl + kvl * H * (nope + vd)  # latent and shared rotary key, RMSNorm, up to k_nope and v
    o = H * vd * h
    attn = q + kv + o
    dense_mlp = 3 * h * f
    expert = 3 * h * fe
    moe_all = h * E + E * expert + shared * expert  # router, routed experts, shared experts (2 x fe together)
    moe_active = h * E + k * expert + shared * expert
    norms = 2 * h
    embed, head = V * h, V * h + h  # untied LM head and the final norm
    total = embed + 3 * (attn + dense_mlp + norms) + 2 * (attn + moe_all + norms) + head
    active = embed + 3 * (attn + dense_mlp + norms) + 2 * (attn + moe_active + norms) + head
    mtp = 2 * h + 2 * h * h + (attn + moe_all + norms) + h
    assert m.n_params() == total
    assert m.active_params() == active
    assert m.n_params(mtp=True) == total + mtp
    assert m.qkv_params() == q + kv and m.attention_params() == attn
    # Matmul weights per token, mean layer: without the latents' norms, router over all experts.
    matmul = (attn - ql - kvl) + (3 * dense_mlp + 2 * (h * E + (k + shared) * expert)) / L
    assert m.matmul_params_per_layer() == pytest.approx(matmul)


def test_qwen3_dense_head_dim_apart_from_hidden():
    m = _hf("qwen3-0.6b")
    assert (m.hidden, m.n_heads, m.n_kv_heads, m.head_dim) == (1024, 16, 8, 128)
    assert (m.q_dim, m.kv_dim) == (2048, 1024)  # head_dim 128, not 1024 / 16
    assert m.tie_embeddings and m.linear_bias == "none" and m.sliding_window is None and m.moe is None
    h, q, kv, f, V, L = 1024, 2048, 1024, 3072, 151936, 28
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h
    assert m.n_params() == V * h + L * per_layer + h == 596_042_752
    # Qwen/Qwen3-0.6B: 0.44B non-embedding. Its q_norm/k_norm scales (2 x 128 per layer, 7,168 in all) are not
    # counted: ModelConfig has no field for them (the checkpoint holds 596,049,920).
    assert round((m.n_params() - V * h) / 1e7) == 44


# ---------------------------------------------------------------------------------------------------------
# HuggingFace config.json -> the same model as the preset
# ---------------------------------------------------------------------------------------------------------
FIXTURE_PRESET = [
    ("mixtral-8x7b-v0.1", "mixtral-8x7b"),
    ("mixtral-8x22b-v0.1", "mixtral-8x22b"),
    ("qwen3-30b-a3b", "qwen3-30b-a3b"),
    ("qwen3-235b-a22b", "qwen3-235b-a22b"),
    ("deepseek-v3", "deepseek-v3"),
    ("kimi-k2", "kimi-k2"),
    ("moonlight-16b-a3b", "moonlight-16b-a3b"),
    ("gpt-oss-20b", "gpt-oss-20b"),
    ("gpt-oss-120b", "gpt-oss-120b"),
    ("llama-4-scout-17b-16e", "llama-4-scout"),
]


@pytest.mark.parametrize("fixture,preset", FIXTURE_PRESET)
def test_hf_config_parses_to_the_preset(fixture, preset):
    parsed, expected = _hf(fixture), load_model(preset)
    assert parsed.name == fixture
    skip = {"name", "source"}
    if preset.startswith("qwen3-"):
        # Qwen releases bf16 and FP8 checkpoints apart: the bf16 config.json says nothing of the FP8 one's 128 x 128
        # blocks (Qwen/Qwen3-*-FP8 config.json: weight_block_size), which the preset states
        assert expected.fp8_weight_blocks and not parsed.fp8_weight_blocks
        skip |= {"fp8_weight_blocks"}
    assert parsed.model_dump(exclude=skip) == expected.model_dump(exclude=skip)
    assert parsed.n_params() == expected.n_params() and parsed.active_params() == expected.active_params()


def test_hf_deepseek_v3_fields():
    m = _hf("deepseek-v3")
    assert m.mla.q_lora_rank == 1536 and m.mla.kv_lora_rank == 512 and m.mla.qk_head_dim == 192
    assert (m.q_dim, m.kv_dim, m.qk_dim, m.head_dim) == (128 * 128, 512, 128 * 192, 192)
    assert m.moe.router_scoring == "sigmoid" and m.moe.shared_ffn_hidden == 2048
    assert (m.moe.first_dense_layers, m.moe.layer_freq) == (3, 1) and m.mtp_layers == 1
    assert m.ffn_hidden == 18432 and m.max_seq_len == 163840


def test_hf_moonlight_has_no_query_latent():
    m = _hf("moonlight-16b-a3b")
    assert m.mla.q_lora_rank is None  # "q_lora_rank": null: queries projected straight from the hidden state
    assert m.qkv_params() == 2048 * 16 * 192 + 2048 * (512 + 64) + 512 + 512 * 16 * 256
    assert m.moe.shared_ffn_hidden == 2 * 1408 and m.mtp_layers == 0


def test_hf_kimi_k2_model_type_and_deepseek_v3_alike():
    # Kimi-K2's config.json says model_type "kimi_k2" (architecture DeepseekV3ForCausalLM); the same keys
    # under "deepseek_v3" give the same model.
    cfg = _raw("kimi-k2")
    assert cfg["model_type"] == "kimi_k2"
    cfg["model_type"] = "deepseek_v3"
    assert from_hf_config(cfg, "kimi-k2").model_dump(exclude={"source"}) == _hf("kimi-k2").model_dump(
        exclude={"source"})


def test_hf_gpt_oss_fields():
    m = _hf("gpt-oss-20b")
    assert (m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, m.q_dim) == (2880, 64, 8, 64, 4096)
    assert m.linear_bias == "all" and m.moe.router_bias and m.moe.expert_bias and m.moe.top_k == 4
    assert m.sliding_window == 128 and m.sliding_window_layers == 12  # alternating layer_types, 24 layers
    # Without layer_types, GptOssConfig's default alternation; all layers windowed counts as all (None).
    cfg = _raw("gpt-oss-20b")
    del cfg["layer_types"]
    assert from_hf_config(cfg, "x").sliding_window_layers == 12
    cfg["layer_types"] = ["sliding_attention"] * 24
    assert from_hf_config(cfg, "x").sliding_window_layers is None
    cfg["layer_types"] = ["full_attention"] * 24
    assert from_hf_config(cfg, "x").sliding_window is None
    # Either name of the top-k is read.
    cfg = _raw("gpt-oss-20b")
    del cfg["num_experts_per_tok"]
    assert from_hf_config(cfg, "x").moe.top_k == 4


def test_hf_llama4_text_config():
    m = _hf("llama-4-scout-17b-16e")
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim) == (48, 5120, 40, 8, 128)
    assert m.moe.n_experts == 16 and m.moe.top_k == 1 and m.moe.shared_ffn_hidden == 8192
    assert m.ffn_hidden == 16384 and m.sliding_window is None
    # The text config alone (model_type llama4_text) gives the same model.
    text = _raw("llama-4-scout-17b-16e")["text_config"]
    assert from_hf_config(text, "x").n_params() == m.n_params()
    # Maverick-style interleaving: MoE every 2nd layer (1, 3, ...), by step or by list.
    cfg = _raw("llama-4-scout-17b-16e")
    cfg["text_config"]["interleave_moe_layer_step"] = 2
    m2 = from_hf_config(cfg, "x")
    assert (m2.moe.first_dense_layers, m2.moe.layer_freq, m2.moe_layers()) == (0, 2, 24)
    cfg["text_config"]["moe_layers"] = list(range(1, 48, 2))
    assert from_hf_config(cfg, "x").moe_layers() == 24


def test_hf_qwen3_moe_layouts():
    cfg = _raw("qwen3-30b-a3b")
    cfg["mlp_only_layers"] = [0, 1]
    m = from_hf_config(cfg, "x")
    assert (m.moe.first_dense_layers, m.moe.layer_freq, m.moe_layers(), m.dense_layers()) == (2, 1, 46, 2)
    cfg = _raw("qwen3-30b-a3b")
    cfg["decoder_sparse_step"] = 2  # layers 1, 3, 5, ... sparse: (i + 1) % 2 == 0
    m = from_hf_config(cfg, "x")
    assert (m.moe.first_dense_layers, m.moe.layer_freq, m.moe_layers()) == (0, 2, 24)
    # A dense layer that is already dense by the step changes nothing.
    cfg["mlp_only_layers"] = [0, 2]
    assert from_hf_config(cfg, "x").moe_layers() == 24


def test_hf_deepseek_layer_freq_one_and_trailing_freq():
    # DeepSeek's rule is i % moe_layer_freq == 0 (i >= first_k_dense_replace): with freq 2 and one MoE layer
    # left it is still expressible (layer 4 of 5: first_dense_layers 4).
    cfg = _raw("moonlight-16b-a3b")
    cfg.update(num_hidden_layers=5, first_k_dense_replace=4, moe_layer_freq=2)
    m = from_hf_config(cfg, "x")
    assert m.moe_layers() == 1 and m.moe.first_dense_layers == 4


# ---------------------------------------------------------------------------------------------------------
# Bad input: one-line InputError naming the key
# ---------------------------------------------------------------------------------------------------------
def _one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def _set(**kv):
    return lambda c: c.update(kv)


def _text(**kv):
    return lambda c: c["text_config"].update(kv)


def _drop(key):
    return lambda c: c.pop(key)


BAD = [
    ("qwen3-30b-a3b", _set(num_experts_per_tok=129),
     "num_experts_per_tok = 129 is not valid; valid: 1..128 (num_experts)"),
    ("qwen3-30b-a3b", _set(num_experts="128"), "num_experts = '128' is not valid; valid: a positive integer"),
    ("qwen3-30b-a3b", _set(mlp_only_layers=[5]),
     "mlp_only_layers = [5] is not valid; valid: a layout whose MoE layers"),
    ("qwen3-30b-a3b", _set(mlp_only_layers=[48]),
     "mlp_only_layers = [48] is not valid; valid: a list of distinct layer indices 0..47"),
    ("qwen3-30b-a3b", _set(mlp_only_layers="0,1"), "mlp_only_layers = '0,1' is not valid"),
    ("qwen3-30b-a3b", _set(mlp_only_layers=list(range(48))), "mlp_only_layers = [0, 1,"),
    ("qwen3-30b-a3b", _drop("moe_intermediate_size"),
     "field 'moe_intermediate_size' is required for model_type 'qwen3_moe'"),
    ("qwen3-30b-a3b", _drop("head_dim"), "field 'head_dim' is required for model_type 'qwen3_moe'"),
    ("qwen3-0.6b", _drop("head_dim"), "field 'head_dim' is required for model_type 'qwen3'"),
    ("deepseek-v3", _set(kv_lora_rank="512"), "kv_lora_rank = '512' is not valid; valid: a positive integer"),
    ("deepseek-v3", _set(q_lora_rank=0), "q_lora_rank = 0 is not valid; valid: a positive integer"),
    ("deepseek-v3", _drop("q_lora_rank"), "field 'q_lora_rank' is required for model_type 'deepseek_v3' (null:"),
    ("deepseek-v3", _set(scoring_func="tanh"), "scoring_func = 'tanh' is not valid; valid: softmax, sigmoid"),
    ("deepseek-v3", _set(moe_layer_freq=2),
     "moe_layer_freq = 2 is not valid; valid: a layout whose MoE layers (here: 4, 6,"),
    ("deepseek-v3", _set(first_k_dense_replace=61),
     "first_k_dense_replace = 61 is not valid; valid: a layout whose MoE layers (here: none)"),
    ("deepseek-v3", _set(first_k_dense_replace=-1),
     "first_k_dense_replace = -1 is not valid; valid: a non-negative integer"),
    ("deepseek-v3", _set(num_nextn_predict_layers=True), "num_nextn_predict_layers = True is not valid"),
    ("deepseek-v3", _set(n_shared_experts=1.0), "n_shared_experts = 1.0 is not valid"),
    ("deepseek-v3", _set(num_experts_per_tok=300),
     "num_experts_per_tok = 300 is not valid; valid: 1..256 (n_routed_experts)"),
    ("deepseek-v3", _set(attention_bias=True), "attention_bias = True is not valid; valid: false"),
    ("kimi-k2", _drop("n_routed_experts"), "field 'n_routed_experts' is required for model_type 'kimi_k2'"),
    ("mixtral-8x7b-v0.1", _set(num_local_experts=0), "num_local_experts = 0 is not valid; valid: a positive integer"),
    ("mixtral-8x7b-v0.1", _set(num_experts_per_tok=9),
     "num_experts_per_tok = 9 is not valid; valid: 1..8 (num_local_experts)"),
    ("gpt-oss-20b", _set(layer_types=["sliding_attention"] * 23), "layer_types = ['sliding_attention',"),
    ("gpt-oss-20b", _set(layer_types=["local"] * 24), "each sliding_attention or full_attention"),
    ("gpt-oss-20b", _set(experts_per_token=2),
     "experts_per_token = 2 is not valid; valid: 4 (num_experts_per_tok) or absent"),
    ("gpt-oss-20b", _set(num_experts_per_tok=33),
     "num_experts_per_tok = 33 is not valid; valid: 1..32 (num_local_experts)"),
    ("gpt-oss-20b", _set(sliding_window=-128), "sliding_window = -128 is not valid"),
    ("llama-4-scout-17b-16e", _drop("text_config"), "field 'text_config' is required for model_type 'llama4'"),
    ("llama-4-scout-17b-16e", _text(num_local_experts=None), "text_config: field 'num_local_experts' is required"),
    ("llama-4-scout-17b-16e", _text(moe_layers=[0, 2, 3]), "moe_layers = [0, 2, 3] is not valid; valid: a layout"),
    ("llama-4-scout-17b-16e", _text(interleave_moe_layer_step=0), "interleave_moe_layer_step = 0 is not valid"),
]


@pytest.mark.parametrize("fixture,mutate,expect", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_moe_hf_config(tmp_path, fixture, mutate, expect):
    cfg = copy.deepcopy(_raw(fixture))
    mutate(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as err:
        load_model(str(path))
    msg = _one_line(err)
    assert expect in msg, msg
    assert msg.startswith(str(path))


def test_bad_moe_config_exits_2_with_one_line(tmp_path, capsys):
    cfg = _raw("qwen3-30b-a3b")
    cfg["num_experts_per_tok"] = 200
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["models", "show", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "num_experts_per_tok = 200" in err


def test_unsupported_model_type_lists_the_moe_types():
    with pytest.raises(InputError) as err:
        from_hf_config({"model_type": "qwen2_moe"}, "x")
    msg = _one_line(err)
    for t in ("mixtral", "qwen3_moe", "deepseek_v3", "kimi_k2", "gpt_oss", "llama4", "qwen3"):
        assert t in msg


def test_from_hf_config_lives_in_hf_config_and_the_catalogue_reads_through_it():
    # spec.model.hf_config holds the HuggingFace reader; it builds spec.model.config's ModelConfig, and spec.model.catalogue
    # (load_model) reads config.json files through it: model <- spec.model.hf_config <- model_catalogue, one way.
    import perfmodel.spec.model.hf_config as hf
    import perfmodel.spec.model.config as models
    import perfmodel.spec.model.catalogue as catalogue

    assert catalogue.from_hf_config is hf.from_hf_config and catalogue.HF_MODEL_TYPES is hf.HF_MODEL_TYPES
    with pytest.raises(AttributeError):
        models.from_hf_config  # noqa: B018
