"""The names policy's kv tensor: a MaxText custom remat policy that keeps key_proj and value_proj on
the device and rebuilds query_proj (tpu-recipes' Llama 3.1 405B on TPU7x) keeps k and v, not the whole q/k/v:
counted by hand on Llama 3 8B (32 query heads, 8 key/value heads of 128)."""

from __future__ import annotations

import pytest

from perfmodel import Plan, load_hardware, load_model
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import layer_activation_bytes
from perfmodel.cost.compute.remat_names import names_gemm_share
from perfmodel.export.maxtext.mesh import remat_keys
from perfmodel.spec.plan.layout import resolve

H, KV, T = 4096, 1024, 4096  # Llama 3 8B: hidden (= query width), key/value width (8 x 128); 4096 tokens


def _layer(saved, offloaded=None) -> float:
    model, system = load_model("llama-3-8b"), load_hardware("tpu-v5p")
    plan = resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, stack="maxtext", recompute="names",
                        recompute_saved=saved, recompute_offloaded=offloaded), model, system)
    return float(layer_activation_bytes(model, Layouts.from_plan(plan))[0])


def test_kv_keeps_keys_and_values_alone():
    """Per token: the layer input 2 h; + q, k, v 2 (h + 2 kv) with qkv; + k, v 2 x 2 kv with kv."""
    assert _layer([]) == T * 2 * H
    assert _layer(["qkv"]) == T * (2 * H + 2 * (H + 2 * KV))
    assert _layer(["kv"]) == T * (2 * H + 2 * 2 * KV)
    assert _layer(["qkv", "kv"]) == _layer(["qkv"])  # kv is part of qkv


def test_kv_offloaded_leaves_the_device():
    assert _layer(["kv"], ["kv"]) == T * 2 * H


def test_kv_rebuilds_the_query_projection_alone():
    """The backward re-runs q = x Wq: h x h of the h x (h + 2 kv) qkv weights, 4096 / 6144 = 2/3."""
    model = load_model("llama-3-8b")
    assert names_gemm_share("qkv", ["kv"], model) == pytest.approx(H / (H + 2 * KV))
    assert names_gemm_share("qkv", ["qkv"], model) == 0.0
    assert names_gemm_share("qkv", [], model) == 1.0


def test_kv_exports_as_key_and_value_on_the_device():
    plan = Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, recompute="names", recompute_saved=["kv"],
                recompute_offloaded=["layer_input"])
    keys = remat_keys(plan)
    assert keys["remat_policy"] == "custom"
    assert (keys["key_proj"], keys["value_proj"], keys["query_proj"]) == ("device", "device", "remat")
    assert keys["decoder_layer_input"] == "offload"
