"""FLOPs and memory against the published closed forms.

- Model FLOPs: 6N + 12 l s h per token (Chowdhery et al. 2022, App. B; N = matmul weights incl. LM head).
- Hardware FLOPs with full recompute: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (Narayanan et al. 2021, Eq. 3).
- Activations per layer: Korthikanti et al. 2022, Sec. 4 (Eq. 1-2, Table 2).
- Mixed-precision Adam state: 2 + 2 + 12 bytes per parameter (Rajbhandari et al. 2020, ZeRO, Sec. 3.1).
"""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.cost.compute.flops import attention_flops_per_token, matmul_params, model_flops_per_token
from perfmodel.cost.memory.footprint import layer_activation_bytes
from perfmodel.cost.memory.states import state_bytes
from perfmodel.spec.model.config import ModelConfig

GPT_PRESETS = ["gpt2-124m", "gpt2-1.5b", "gpt3-125m", "gpt3-1.3b", "gpt3-6.7b", "gpt3-175b"]


def gpt_model(l=96, h=12288, a=96, V=50257, max_seq=2048, dropout=0.1) -> ModelConfig:
    """A GPT-3-shaped model: ffn 4h, multi-head attention, LayerNorm, GeLU MLP, biases, dropout."""
    return ModelConfig(name="gpt-test", n_layers=l, hidden=h, n_heads=a, n_kv_heads=a, ffn_hidden=4 * h, vocab=V,
                       max_seq_len=max_seq, mlp="gelu", norm="layernorm", position="learned",
                       tie_embeddings=True, linear_bias="all", dropout=dropout)


# ---------------------------------------------------------------------------------------------------------
# (a) FLOPs
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", GPT_PRESETS)
@pytest.mark.parametrize("s", [512, 1024, 2048])
def test_model_flops_per_token_is_6N_plus_12lsh(name, s):
    m = load_model(name)
    l, h, V = m.n_layers, m.hidden, m.vocab
    if m.q_dim == h:
        n_matmul = 12 * l * h * h + V * h  # QKV 3h^2 + out h^2 + MLP 8h^2, plus the LM head
        assert matmul_params(m) == n_matmul
    else:  # gpt3-13b style: attention width differs from hidden
        n_matmul = l * (4 * h * m.q_dim + 8 * h * h) + V * h
    attn = 12 * l * s * m.q_dim
    assert model_flops_per_token(m, s) == pytest.approx(6 * n_matmul + attn, rel=1e-12)


def test_model_flops_gqa_swiglu_llama3_8b():
    # Matmul weights: N_params - embedding (lookup, not a matmul) - norms; untied head is a matmul.
    m = load_model("llama-3-8b")
    h, L, V = 4096, 32, 128256
    norms = (2 * L + 1) * h
    n_matmul = m.n_params() - V * h - norms
    assert matmul_params(m) == n_matmul
    s = 8192
    assert model_flops_per_token(m, s) == pytest.approx(6 * n_matmul + 12 * L * s * 4096, rel=1e-12)
    assert attention_flops_per_token(m, s) == 4 * L * s * 4096


@pytest.mark.parametrize("gb,s,tp,pp", [(64, 2048, 8, 8), (1536, 2048, 8, 16), (32, 1024, 4, 2)])
def test_hardware_flops_full_recompute_matches_narayanan(gb, s, tp, pp):
    l, h, a, V = 96, 12288, 96, 50257
    m = gpt_model(l, h, a, V)
    gpus = tp * pp * 4
    plan = Plan(gpus=gpus, tp=tp, pp=pp, micro_batch=1, global_batch=gb, seq_len=s, recompute="full")
    est = estimate(m, "dgx-h100", plan)
    B = gb
    narayanan = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert est.hardware_flops_per_step == pytest.approx(narayanan, rel=1e-3)
    # Without recompute: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) (Narayanan et al. 2021, 3 passes).
    model_flops = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))
    assert est.model_flops_per_step == pytest.approx(model_flops, rel=1e-3)
    # MFU/HFU consistent with those FLOPs and the dense bf16 peak (989.4 TF on H100).
    assert est.mfu == pytest.approx(model_flops / (est.step_time_s * gpus * 989.4e12), rel=1e-9)
    assert est.hfu == pytest.approx(narayanan / (est.step_time_s * gpus * 989.4e12), rel=1e-9)
    assert est.model_tflops_per_gpu == pytest.approx(model_flops / est.step_time_s / gpus / 1e12, rel=1e-9)


def test_hardware_flops_selective_adds_attention_core_only():
    # Korthikanti et al. 2022: selective recompute re-runs QK^T and AV: + 4 B s^2 l h per step (forward only).
    l, h, a, V, s, B = 24, 2048, 16, 50257, 2048, 64
    m = gpt_model(l, h, a, V)
    est = estimate(m, "dgx-h100", Plan(gpus=8, tp=1, micro_batch=1, global_batch=B, seq_len=s, recompute="selective"))
    assert est.hardware_flops_per_step - est.model_flops_per_step == pytest.approx(4 * B * s * s * l * h, rel=1e-9)


# ---------------------------------------------------------------------------------------------------------
# (b) Activation memory per layer: Korthikanti et al. 2022
# ---------------------------------------------------------------------------------------------------------
KORT = [  # (h, a, s, b)
    (12288, 96, 2048, 1),  # GPT-3 175B, as in the paper's Table 3 setting
    (4096, 32, 2048, 2),
    (2048, 16, 1024, 4),
]


def kplan(s, b, tp=1, sp=False, recompute="none", attention="unfused", cp=1):
    return Plan(gpus=tp * cp, tp=tp, cp=cp, micro_batch=b, global_batch=b, seq_len=s, sequence_parallel=sp,
                recompute=recompute, attention=attention)


@pytest.mark.parametrize("h,a,s,b", KORT)
def test_activation_no_parallelism(h, a, s, b):
    m = gpt_model(4, h, a, max_seq=s)
    got = layer_activation_bytes(m, kplan(s, b))
    assert got == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", KORT)
@pytest.mark.parametrize("t", [2, 4, 8])
def test_activation_tensor_parallel_without_sp(h, a, s, b, t):
    m = gpt_model(4, h, a, max_seq=s)
    got = layer_activation_bytes(m, kplan(s, b, tp=t))
    assert got == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", KORT)
@pytest.mark.parametrize("t", [2, 4, 8])
def test_activation_tensor_parallel_with_sp(h, a, s, b, t):
    m = gpt_model(4, h, a, max_seq=s)
    got = layer_activation_bytes(m, kplan(s, b, tp=t, sp=True))
    assert got == pytest.approx(s * b * h / t * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", KORT)
@pytest.mark.parametrize("t", [1, 2, 8])
def test_activation_selective_recompute_with_sp(h, a, s, b, t):
    m = gpt_model(4, h, a, max_seq=s)
    got = layer_activation_bytes(m, kplan(s, b, tp=t, sp=t > 1, recompute="selective"))
    assert got == pytest.approx(34 * s * b * h / t, rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", KORT)
def test_activation_selective_recompute_without_sp(h, a, s, b):
    # Korthikanti Table 2, "tensor parallel + selective": sbh(10 + 24/t).
    m = gpt_model(4, h, a, max_seq=s)
    got = layer_activation_bytes(m, kplan(s, b, tp=8, recompute="selective"))
    assert got == pytest.approx(s * b * h * (10 + 24 / 8), rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", KORT)
@pytest.mark.parametrize("t,sp", [(1, False), (8, False), (8, True), (4, True)])
def test_activation_full_recompute(h, a, s, b, t, sp):
    m = gpt_model(4, h, a, max_seq=s)
    got = layer_activation_bytes(m, kplan(s, b, tp=t, sp=sp, recompute="full"))
    assert got == pytest.approx(2 * s * b * h / (t if sp else 1), rel=1e-12)


def test_activation_recompute_argument_overrides_plan():
    m = gpt_model(4, 4096, 32, max_seq=2048)
    p = kplan(2048, 1, recompute="full")
    assert layer_activation_bytes(m, p, "none") == pytest.approx(2048 * 4096 * (34 + 5 * 32 * 2048 / 4096))


def test_activation_context_parallel_splits_tokens_not_keys():
    # cp splits queries (tokens) by cp; the unfused score matrix per token still spans all s keys.
    h, a, s, b, cp = 4096, 32, 4096, 1, 4
    m = gpt_model(4, h, a, max_seq=s)
    got = layer_activation_bytes(m, kplan(s, b, cp=cp))
    assert got == pytest.approx(s / cp * b * (34 * h + 5 * a * s), rel=1e-12)


def test_activation_no_dropout_drops_masks():
    # Without dropout: no attention-dropout mask/output (as^2 + 2as^2 per b) and no two sbh masks: 32sbh + 2as^2b.
    h, a, s, b = 4096, 32, 2048, 1
    m = gpt_model(4, h, a, max_seq=s, dropout=0.0)
    got = layer_activation_bytes(m, kplan(s, b))
    assert got == pytest.approx(s * b * (32 * h + 2 * a * s), rel=1e-12)


def test_activation_gqa_swiglu_rmsnorm_llama3_8b():
    # Llama-3-8B (no dropout, GQA 8 kv heads, SwiGLU f = 14336), flash: per token
    #   outside TP: 2 norm inputs 4h, QKV input 2h, MLP input 2h = 8h
    #   inside: Q 2h, K 2kv, V 2kv, attention output 2h, gate 2f, up 2f, silu(gate)*up 2f; LSE 4a (fp32)
    m = load_model("llama-3-8b")
    h, kv, f, a, s, b, t = 4096, 1024, 14336, 32, 8192, 1, 8
    per_tok = 8 * h / t + (4 * h + 4 * kv + 6 * f + 4 * a) / t
    got = layer_activation_bytes(m, kplan(s, b, tp=t, sp=True, attention="flash"))
    assert got == pytest.approx(s * b * per_tok, rel=1e-12)
    # GQA saves exactly the smaller K and V: 4 (h - kv) bytes per token / t against MHA.
    mha = m.model_copy(update={"n_kv_heads": 32})
    got_mha = layer_activation_bytes(mha, kplan(s, b, tp=t, sp=True, attention="flash"))
    assert got_mha - got == pytest.approx(s * b * 4 * (h - kv) / t, rel=1e-12)


# ---------------------------------------------------------------------------------------------------------
# (d) flash vs unfused: only the attention-core term changes
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("h,a,s,b", KORT)
@pytest.mark.parametrize("t,sp", [(1, False), (4, False), (8, True)])
def test_flash_differs_from_unfused_by_the_5as_term(h, a, s, b, t, sp):
    m = gpt_model(4, h, a, max_seq=s)
    unfused = layer_activation_bytes(m, kplan(s, b, tp=t, sp=sp, attention="unfused"))
    flash = layer_activation_bytes(m, kplan(s, b, tp=t, sp=sp, attention="flash"))
    # Unfused keeps softmax out 2as^2b, dropout mask as^2b, dropout out 2as^2b (/t); flash keeps only the
    # fp32 softmax log-sum-exp, 4 bytes per (token, head): 4 a s b / t.
    assert unfused - flash == pytest.approx((5 * a * s * s * b - 4 * a * s * b) / t, rel=1e-12)
    # And flash is the "34 sbh" part plus the LSE.
    base = s * b * h * (10 + 24 / t) if not sp else 34 * s * b * h / t
    assert flash == pytest.approx(base + 4 * a * s * b / t, rel=1e-12)


def test_selective_recompute_is_the_same_for_flash_and_unfused():
    m = gpt_model(4, 4096, 32, max_seq=2048)
    a = layer_activation_bytes(m, kplan(2048, 1, tp=4, sp=True, recompute="selective", attention="flash"))
    b = layer_activation_bytes(m, kplan(2048, 1, tp=4, sp=True, recompute="selective", attention="unfused"))
    assert a == b == pytest.approx(34 * 2048 * 4096 / 4)


# ---------------------------------------------------------------------------------------------------------
# (c) ZeRO
# ---------------------------------------------------------------------------------------------------------
def zplan(zero, dp=8, cp=1, grad="bf16"):
    return Plan(dp=dp, cp=cp, micro_batch=1, global_batch=dp, seq_len=1024, zero=zero, grad_dtype=grad)


def test_zero0_is_2_2_12_bytes_per_param():
    st = state_bytes(1.0, zplan(0))
    assert (st["weights"], st["gradients"], st["optimizer"]) == (2.0, 2.0, 12.0)
    assert sum(st.values()) == 16.0  # Rajbhandari et al. 2020: 2 + 2 + K=12 = 16 bytes / parameter
    st = state_bytes(1.0, zplan(0, grad="fp32"))
    assert st["gradients"] == 4.0


@pytest.mark.parametrize("dp", [2, 8, 64])
def test_zero_stages_divide_by_dp(dp):
    psi = 7.5e9  # Rajbhandari et al. 2020 Fig. 1 example, Psi = 7.5B, N_d = 64
    s0, s1, s2, s3 = (state_bytes(psi, zplan(z, dp=dp)) for z in (0, 1, 2, 3))
    tot = lambda d: sum(d.values())
    assert tot(s0) == pytest.approx(16 * psi)
    assert tot(s1) == pytest.approx(2 * psi + 2 * psi + 12 * psi / dp)
    assert tot(s2) == pytest.approx(2 * psi + (2 + 12) * psi / dp)
    assert tot(s3) == pytest.approx(16 * psi / dp)
    if dp == 64:  # the paper's figure: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
        assert tot(s0) / 1e9 == pytest.approx(120, abs=0.05)
        assert tot(s1) / 1e9 == pytest.approx(31.4, abs=0.05)
        assert tot(s2) / 1e9 == pytest.approx(16.6, abs=0.05)
        assert tot(s3) / 1e9 == pytest.approx(1.9, abs=0.05)


def test_zero_shards_over_dp_times_cp():
    st = state_bytes(1.0, zplan(3, dp=4, cp=2))
    assert st == pytest.approx({"weights": 2 / 8, "gradients": 2 / 8, "optimizer": 12 / 8})


def test_estimate_memory_states_match_zero_formula():
    # pp = 1, tp = 8: params per device = layer params /8 (norms replicated) + embedding/8 (+positions) + final norm.
    m = load_model("gpt3-1.3b")
    h, l, V = 2048, 24, 50257
    plan = Plan(gpus=64, tp=8, micro_batch=1, global_batch=64, seq_len=2048, zero=1, grad_dtype="bf16")
    est = estimate(m, "dgx-h100", plan)
    norms = 4 * h
    per_layer = (12 * h * h + 13 * h - norms) / 8 + norms
    params = l * per_layer + V * h / 8 + 2048 * h + 2 * h
    dp = 8
    assert est.memory_bytes.weights == pytest.approx(2 * params, rel=1e-12)
    assert est.memory_bytes.gradients == pytest.approx(2 * params, rel=1e-12)
    assert est.memory_bytes.optimizer == pytest.approx(12 * params / dp, rel=1e-12)
    mb = est.memory_bytes
    assert mb.allocated == pytest.approx(mb.weights + mb.gradients + mb.optimizer + mb.activations + mb.transient)
    assert mb.runtime == pytest.approx(3.0 * 2**30)  # dgx-h100 memory_overhead_gib
    assert mb.device == pytest.approx(mb.allocated + mb.fragmentation + mb.runtime)
    assert mb.between_steps == pytest.approx(mb.weights + mb.gradients + mb.optimizer)


def test_estimate_activation_memory_matches_korthikanti_pp1():
    # pp = 1, 1F1B with one stage: one micro-batch's activations: l layers + embedding dropout mask + head.
    h, a, s, b, l, V, t = 2048, 16, 2048, 2, 24, 50257, 8
    m = gpt_model(l, h, a, V)
    est = estimate(m, "dgx-h100", Plan(gpus=8, tp=t, micro_batch=b, global_batch=8, seq_len=s,
                                       sequence_parallel=True, attention="unfused"))
    layers = l * s * b * h / t * (34 + 5 * a * s / h)
    emb = s * b * h / t  # dropout mask, 1 byte
    import math
    # final-norm input and LM-head input, both kept sequence-sharded (Korthikanti Sec. 4.3: 4sbh/t with SP),
    # and the fp32 logits 4sbV/t
    head = s * b * (2 * h / t + 2 * h / t + 4 * math.ceil(V / t))
    assert est.memory_bytes.activations == pytest.approx(layers + emb + head, rel=1e-12)


def test_public_api():
    assert perfmodel.estimate is estimate and perfmodel.load_hardware is load_hardware


# ---------------------------------------------------------------------------------------------------------
# Kernel times and executed FLOPs of the ops (cost/compute/kernel_time.py, cost/ops.py)
# ---------------------------------------------------------------------------------------------------------
def test_gemm_time_compute_bound_hand_numbers():
    from perfmodel.cost.compute.kernel_time import gemm_time
    # 4096^3 on 132 SMs with 128x256 tiles: 32*16 = 512 tiles -> 4 waves of 132; useful fraction
    # 4096^2 / (4*132*128*256) = 0.9696970; 2*4096^3 / (1e15 * 0.8 * 0.9696970) = 1.771674e-4 s.
    # Memory: (2 * 4096^2 * 2 + 4096^2 * 2) B / 3e12 = 3.36e-5 s, so compute bound.
    t = gemm_time(4096, 4096, 4096, 1e15, 0.8, 128, 256, 132, 3e12)
    assert t == pytest.approx(1.771674e-4, rel=1e-6)


def test_gemm_time_memory_bound_hand_numbers():
    from perfmodel.cost.compute.kernel_time import gemm_time
    # m=8192, n=128, k=8192, slow memory: bytes (m k + k n) * 2 + m n * 2
    # = (67,108,864 + 1,048,576) * 2 + 2,097,152 = 138,412,032 B at 1e11 B/s = 1.38412032e-3 s; compute
    # 2*8192*128*8192 / (1e15 * 1.0 * useful) with 64 x 1 tiles -> 1 wave of 64 units, useful = 1: 1.718e-5 s.
    t = gemm_time(8192, 128, 8192, 1e15, 1.0, 128, 128, 64, 1e11)
    assert t == pytest.approx(1.38412032e-3, rel=1e-12)
    assert gemm_time(8192, 128, 8192, 1e15, 1.0, 128, 128, 64, 1e11, batch=3) == pytest.approx(3 * t)


def test_flash_attention_efficiency_curve():
    from perfmodel.cost.compute.kernel_time import attention_efficiency, flash_attention_time
    assert attention_efficiency(423, 0.35, 423) == pytest.approx(0.175)  # half of max at half_seq
    assert attention_efficiency(4096, 0.35, 423) == pytest.approx(0.35 * 4096 / 4519)
    assert flash_attention_time(1e12, 4096, 1e15, 0.35, 423) == pytest.approx(1e12 / (1e15 * 0.35 * 4096 / 4519))


def test_mean_keys_causal_and_sliding_window():
    from perfmodel.cost.compute.kernels import mean_keys
    assert mean_keys(8192, None) == 4096
    # window w < s: queries 1..w see i keys, the rest w: (w^2/2 + (s - w) w) / s = w (1 - w / (2s))
    assert mean_keys(8192, 4096) == pytest.approx(3072)
    assert mean_keys(2048, 4096) == pytest.approx(1024)  # window wider than the sequence: plain causal


def test_layer_op_flops_match_the_flops_convention():
    # One layer on one tp rank, one micro-batch of T tokens: weight GEMMs 2 * T * (matmul weights per layer)/tp;
    # the flash kernel executes the causal half of the 4 s (n_heads head_dim) per-token convention.
    from perfmodel.cost.compute.units import unit_ops
    from perfmodel.spec.plan.layout import resolve
    m = load_model("llama-3-8b")
    hw = load_hardware("dgx-h100")
    plan = resolve(Plan(gpus=8, tp=8, micro_batch=2, global_batch=16, seq_len=4096), m, hw)
    ops = unit_ops(m, hw, plan)["layer"]
    T, t = 2 * 4096, 8
    per_layer_weights = (matmul_params(m) - m.vocab * m.hidden) / m.n_layers
    gemm = sum(o.fwd_flops for o in ops if o.kind == "gemm")
    assert gemm == pytest.approx(2 * T * per_layer_weights / t, rel=1e-12)
    assert sum(o.bwd_flops for o in ops if o.kind == "gemm") == pytest.approx(2 * gemm, rel=1e-12)
    attn = sum(o.fwd_flops for o in ops if o.kind == "attention")
    assert attn == pytest.approx(0.5 * T * attention_flops_per_token(m, 4096) / m.n_layers / t, rel=1e-12)


def test_estimate_op_list_reports_executed_flops_for_a_gpt_layer():
    # GPT-3 1.3B, tp=2, unfused attention: QK^T and AV are full (no causal skipping): 2 * s * s * d per head.
    m = load_model("gpt3-1.3b")
    est = estimate(m, "dgx-a100-80gb", Plan(gpus=2, tp=2, micro_batch=1, global_batch=1, seq_len=2048,
                                             attention="unfused"))
    ops = {o.name: o for o in est.ops if o.where == "layer"}
    s, h, t = 2048, 2048, 2
    assert ops["qkv"].fwd_flops == pytest.approx(2 * s * 3 * h / t * h)
    assert ops["out_proj"].fwd_flops == pytest.approx(2 * s * h * h / t)
    assert ops["mlp_in"].fwd_flops == pytest.approx(2 * s * 4 * h / t * h)
    assert ops["mlp_out"].fwd_flops == pytest.approx(2 * s * h * 4 * h / t)
    assert ops["attn_scores"].fwd_flops == pytest.approx(2 * s * s * 128 * 16 / t)
    assert ops["attn_context"].fwd_flops == pytest.approx(2 * s * s * 128 * 16 / t)
    assert ops["qkv"].count == 24
