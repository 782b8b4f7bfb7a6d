"""The 2026 model types from their config.json (fixtures copied from ../shared/data/hf_configs, which ships them as
ai-dynamo/aiconfigurator@095f58a51 does, Apache-2.0): MiniMax-M2.5, Kimi-K2.5 (a wrapper of Kimi-K2's text model),
GLM-5 and DeepSeek-V3.2 (MLA with DeepSeek Sparse Attention), Step-3.7-Flash, MiMo, Qwen3-VL; the architectures
read but not priced yet refused naming their one field; sparse attention's cost checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.cost.compute.flops import attention_flops_per_token
from perfmodel.cost.compute.kernels import Device, mean_keys, model_mean_keys
from perfmodel.errors import InputError
from perfmodel.serve.kv_cache import kv_bytes_per_token
from perfmodel.serve.step_time import decode_attention_s, decode_indexer_s, device
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.hf_config import UNPRICED, from_hf_config
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack

HF = Path(__file__).parent / "fixtures" / "hf"


def _hf(name):
    return load_model(str(HF / name / "config.json"))


def _raw(name):
    return json.loads((HF / name / "config.json").read_text())


# Published sizes (total, active) in billions, each model's own card; the count is checked within 2% of the total,
# and the active count (input embedding and LM head included, ModelConfig.active_params) within the card's
# rounding plus the embedding: MiniMax's "10B activated" leaves the embeddings out (200064 x 3072 x 2 = 1.23B).
PUBLISHED = [
    ("minimax-m2.5", 230, "MiniMaxAI/MiniMax-M2.5 model card: 230B total, 10B activated"),
    ("glm-5", 744, "zai-org/GLM-5 model card: 744B parameters (40B active)"),
    ("kimi-k2.5", 1040, "moonshotai/Kimi-K2.5 model card: 1T total (Kimi-K2's 1.04T text model), 32B activated"),
    ("deepseek-v3.2", 671, "deepseek-ai/DeepSeek-V3.2 (DeepSeek-V3's 671B main model plus the indexers)"),
    ("step-3.7-flash", 196, "stepfun-ai Step-3.5-Flash report: 196B total, 11B active (3.7 keeps the shape)"),
    ("qwen3.5-397b-a17b", 397, "Qwen/Qwen3.5-397B-A17B: 397B total, 17B activated (its name)"),
]


@pytest.mark.parametrize("name,total,source", PUBLISHED)
def test_2026_totals_within_two_percent_of_the_card(name, total, source):
    m = _hf(name)
    assert abs(m.n_params() / 1e9 / total - 1) < 0.02, (name, m.n_params() / 1e9, source)


def test_minimax_m2_fields_and_one_layer_by_hand():
    m = _hf("minimax-m2.5")
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim) == (62, 3072, 48, 8, 128)
    e = m.moe
    assert (e.n_experts, e.top_k, e.expert_ffn_hidden, e.n_shared_experts, e.router_scoring) == (
        256, 8, 1536, 0, "sigmoid")
    assert m.moe_layers() == 62 and m.mtp_layers == 3  # use_mtp, 3 modules of one block
    # one layer: q (48 x 128) + k, v (8 x 128 each) + o from 3072; 256 experts of 3 x 3072 x 1536; the router; 2 norms
    attn = 3072 * (6144 + 2 * 1024) + 6144 * 3072
    assert m.params_per_layer() == attn + 256 * 3 * 3072 * 1536 + 3072 * 256 + 2 * 3072
    # active: 8 experts, and the card's 10B once the 1.23B of embedding and LM head are left out
    assert abs((m.active_params() - 2 * 200064 * 3072) / 1e9 - 10) < 0.5


def test_kimi_k25_is_kimi_k2s_text_model_with_a_longer_context():
    k25, k2 = _hf("kimi-k2.5"), _hf("kimi-k2")
    differ = {k for k, v in k25.model_dump().items() if v != k2.model_dump()[k]}
    assert differ == {"name", "source", "max_seq_len", "fp8_weight_blocks"} and k25.max_seq_len == 262144
    # K2 ships fp8 in 128 x 128 blocks, K2.5 INT4 (compressed-tensors): only K2's fp8 is block-scaled
    assert k2.fp8_weight_blocks and not k25.fp8_weight_blocks
    assert "text_config" in k25.source


def test_glm5_sparse_attention_fields_and_indexer_by_hand():
    m = _hf("glm-5")
    a, s = m.mla, m.sparse_attention
    assert (a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == (
        2048, 512, 192, 64, 256)
    assert (s.topk, s.index_heads, s.index_head_dim) == (2048, 32, 128)
    assert (m.moe.first_dense_layers, m.moe.n_experts, m.moe.top_k, m.mtp_layers) == (3, 256, 8, 1)
    # indexer: wq_b from the 2048-wide query latent to 32 x 128, wk 6144 x 128 with a LayerNorm, weights 6144 x 32
    assert m.indexer_params() == 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32 == 9_371_904
    # DeepSeek-V3.2 has no other change from V3 but the indexer (64 heads, from its 1536-wide latent)
    v32, v3 = _hf("deepseek-v3.2"), _hf("deepseek-v3")
    assert v32.indexer_params() == 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert v32.n_params() - v3.n_params() == 61 * v32.indexer_params()


def test_sparse_attention_flops_keys_and_cache_by_hand():
    m = _hf("glm-5")
    # per layer: 4 x min(s, topk) x heads x the latent's (576 + 512) / 2 (DSA runs MLA's MQA mode), plus the
    # indexer's 2 x s x 32 x 128 over every key
    core = 64 * (576 + 512) / 2
    assert attention_flops_per_token(m, 8192) == 78 * (4 * 2048 * core + 2 * 8192 * 32 * 128)
    assert attention_flops_per_token(m, 1024) == 78 * (4 * 1024 * core + 2 * 1024 * 32 * 128)
    # a causal query at position t reads min(t, 2048) keys: over 8192 positions 2048 x (1 - 2048 / 16384) = 1792
    assert float(model_mean_keys(m, 8192)) == pytest.approx(1792.0)
    assert float(model_mean_keys(m, 1024)) == float(mean_keys(1024, None)) == 512.0
    from perfmodel.cost.compute.attention_kinds import attention_head_width

    assert attention_head_width(m) == (2 * 512 + 64) / 2  # QK^T over the 576-wide latent, PV over 512
    assert attention_head_width(_hf("deepseek-v3")) == (192 + 128) / 2  # dense MLA: per head, unabsorbed
    # the cache keeps every token: the 576-wide latent and rotary key in fp8, and the 128-byte index key + its scale
    plan = ServePlan(tp=8, ep=8, precision="fp8", input_len=8192, output_len=1024)
    assert kv_bytes_per_token(m, plan) == 78 * (576 + 128 + 4)


def test_sparse_decode_reads_topk_keys_and_every_index_key():
    m = _hf("glm-5")
    system = load_hardware("dgx-b200")
    plan = ServePlan(tp=8, ep=8, precision="fp8", input_len=8192, output_len=1024, stack="sglang")
    dev = device(m, system, plan, load_serving_stack("sglang"))
    dense = m.model_copy(update={"sparse_attention": None})
    dense_dev = device(dense, system, plan, load_serving_stack("sglang"))
    seqs, context = 16, 9000.0
    # the main attention as a dense MLA layer over 2048 keys, plus the indexer over all 9000
    assert decode_attention_s(dev, plan, seqs, context) == pytest.approx(
        decode_attention_s(dense_dev, plan, seqs, 2048.0) + decode_indexer_s(dev, seqs, context))
    # the indexer reads 132 B per key per sequence, or computes 2 x 32 x 128 FLOPs per key, whichever is longer
    rate = Device.sustained_peak(dev, "fp8") * system.efficiency.attention_max
    assert decode_indexer_s(dev, seqs, context) == pytest.approx(
        max(dev.memory(seqs * context * 132), 2 * seqs * context * 32 * 128 / rate))
    assert decode_indexer_s(dense_dev, seqs, context) == 0.0
    # shorter than topk: the same keys as dense, plus the indexer
    assert decode_attention_s(dev, plan, seqs, 1000.0) == pytest.approx(
        decode_attention_s(dense_dev, plan, seqs, 1000.0) + decode_indexer_s(dev, seqs, 1000.0))


def test_step_mimo_and_qwen3_vl_read_as_their_base_types():
    st = _hf("step-3.7-flash")
    assert (st.sliding_window, st.sliding_window_layers, st.n_layers) == (512, 33, 45)  # 3 in 4 windowed
    assert (st.moe.first_dense_layers, st.moe.n_experts, st.moe.shared_ffn_hidden, st.mtp_layers) == (
        3, 288, 1280, 3)
    mimo = _hf("mimo-7b")
    assert mimo.linear_bias == "qkv" and mimo.mtp_layers == 1 and mimo.sliding_window is None
    vl = _hf("qwen3-vl-30b-a3b")
    text = _hf("qwen3-30b-a3b")
    # the VL text model is Qwen3-30B-A3B's shape with a longer context (vision tower not priced)
    differ = {k for k, v in vl.model_dump().items() if v != text.model_dump()[k]}
    assert differ <= {"name", "source", "max_seq_len"}


@pytest.mark.parametrize("mt", sorted(UNPRICED))
def test_unpriced_architectures_name_their_field(mt):
    field, _ = UNPRICED[mt]
    with pytest.raises(InputError) as err:
        from_hf_config({"model_type": mt}, "config.json")
    msg = str(err.value)
    assert "\n" not in msg and f"model_type = '{mt}'" in msg and f"field '{field}'" in msg
    assert "valid model types:" in msg and "glm_moe_dsa" in msg


def test_qwen35_gated_deltanet_fields_and_params_by_hand():
    m = _hf("qwen3.5-397b-a17b")
    la = m.linear_attention
    assert (la.layers, m.full_attention_layers, la.key_heads, la.key_head_dim, la.value_heads, la.value_head_dim,
            la.conv_kernel) == (45, 15, 16, 128, 64, 128, 4)
    assert m.attention_output_gate and (m.n_heads, m.n_kv_heads, m.head_dim) == (32, 2, 256)
    assert (m.moe.n_experts, m.moe.top_k, m.moe.shared_ffn_hidden, m.mtp_layers) == (512, 10, 1024, 1)
    # a Gated DeltaNet layer's input side: q, k (16 x 128 each), v, z (64 x 128 each), beta and alpha (64 each),
    # the 4-tap convolution over q, k, v, dt_bias, A_log and the gated norm's 128 scales
    assert m.delta_in_params() == 4096 * (2 * 2048 + 2 * 8192 + 2 * 64) + 4 * (2 * 2048 + 8192) + 2 * 64 + 128
    # the mean layer's projections: 15 gated full-attention layers (q and its gate 2 x 8192, k and v 512 each)
    full = 4096 * (2 * 8192 + 2 * 512)
    assert m.qkv_params() == pytest.approx((15 * full + 45 * m.delta_in_params()) / 60, rel=1e-12)
    assert abs(m.active_params() / 1e9 - 17.35) < 0.05  # embedding and LM head included


def test_qwen35_cache_state_and_decode_by_hand():
    from perfmodel.serve.kv_cache import sequence_kv_bytes, state_bytes_per_sequence
    from perfmodel.serve.step_time import decode_delta_s

    m = _hf("qwen3.5-397b-a17b")
    plan = ServePlan(tp=8, ep=8, precision="fp8", input_len=8192, output_len=1024, stack="sglang")
    # only the 15 full-attention layers keep tokens: K and V of one kv head (2 over 8 ranks: replicated) x 256, fp8
    assert kv_bytes_per_token(m, plan) == 15 * 2 * 256
    # 45 Gated DeltaNet layers keep 8 of 64 fp32 states of 128 x 128 and 3 conv inputs of (2 x 2048 + 8192) / 8
    state = 45 * (8 * 128 * 128 * 4 + 3 * (2 * 2048 + 8192) / 8 * 2)
    assert state_bytes_per_sequence(m, plan) == state
    stack = load_serving_stack("sglang")
    assert sequence_kv_bytes(m, plan, 1000, stack) == 1000 * 15 * 2 * 256 + state
    dev = device(m, load_hardware("dgx-b200"), plan, stack)
    rate = dev.bf16_peak * dev.system.efficiency.attention_max
    want = max(dev.memory(2 * 16 * state / 45), 16 * 64 * 6 * 128 * 128 / 8 / rate)
    assert decode_delta_s(dev, plan, 16) == pytest.approx(want, rel=1e-12)
    # the mean layer: a quarter full attention over the context, three quarters the state's read and write
    dense = m.model_copy(update={"linear_attention": None})
    full = decode_attention_s(device(dense, load_hardware("dgx-b200"), plan, stack), plan, 16, 9000.0)
    assert decode_attention_s(dev, plan, 16, 9000.0) == pytest.approx(0.25 * full + 0.75 * want, rel=1e-9)


def test_qwen35_is_served_but_its_training_is_refused(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_raw("qwen3.5-397b-a17b")))
    assert main(["models", "show", str(p)]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(p), "--hardware", "dgx-b200", "--gpus", "64", "--tp", "2", "--ep", "8",
                 "--pp", "1", "--micro-batch", "1", "--sequence-parallel", "--global-batch", "64", "--seq-len",
                 "4096"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "linear_attention = 45 Gated DeltaNet layers" in err and "perfmodel infer" in err


@pytest.mark.parametrize("name,mutate,expect", [
    ("glm-5", lambda c: c.pop("index_topk"), "field 'index_topk' is required for model_type 'glm_moe_dsa'"),
    ("glm-5", lambda c: c.update(qk_head_dim=192), "qk_head_dim = 192 is not valid; valid: 256"),
    ("minimax-m2.5", lambda c: c.update(mtp_transformer_layers=2), "mtp_transformer_layers = 2 is not valid"),
    ("minimax-m2.5", lambda c: c.pop("head_dim"), "field 'head_dim' is required for model_type 'minimax_m2'"),
    ("kimi-k2.5", lambda c: c.pop("text_config"), "field 'text_config' is required for model_type 'kimi_k25'"),
    # the wrapper's own key is checked even where the text model's wins (found by tests/test_fuzz_files.py)
    ("kimi-k2.5", lambda c: c.update(tie_word_embeddings=0), "tie_word_embeddings = 0 is not valid; valid: true"),
    ("kimi-k2.5", lambda c: c.update(model_type=[]), "model_type = [] is not supported; valid: gpt2"),
    ("step-3.7-flash", lambda c: c.pop("sliding_window"), "field 'sliding_window' is required"),
    ("step-3.7-flash", lambda c: c.pop("layer_types"), "field 'layer_types' is required for model_type 'step3p7'"),
    ("qwen3.5-397b-a17b", lambda c: c["text_config"].update(layer_types=["linear_attention"] * 60),
     "layer_types = ['linear_attention', "),
    ("qwen3.5-397b-a17b", lambda c: c["text_config"].update(linear_num_value_heads=32),
     "linear_attention value_heads x value_head_dim = 4096 differs"),
])
def test_bad_2026_config_names_the_key(tmp_path, name, mutate, expect):
    cfg = _raw(name)
    mutate(cfg)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as err:
        load_model(str(p))
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_fp8_weight_blocks_from_the_quantization_config():
    """A config whose quantization_config names weight_block_size (DeepSeek-style fp8, 128 x 128 blocks) marks the
    model's fp8 as block-scaled; a bf16 release's config, or a per-tensor one, does not."""
    from perfmodel.spec.model.hf_config import from_hf_config

    base = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}
    assert not from_hf_config(base, "plain").fp8_weight_blocks
    block = {**base, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    assert from_hf_config(block, "blocks").fp8_weight_blocks
    tensor = {**base, "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}}
    assert not from_hf_config(tensor, "per-tensor").fp8_weight_blocks
