"""Megatron-Bridge's Muon recipes (Kimi K2): the base recipe's optimizer is Bridge's distributed Muon, which
Megatron-Core runs under its layer-wise distributed optimizer, so the optimizer state is sharded over data parallel
although the base sets ddp.use_distributed_optimizer = False (recipes/kimi/h100/kimi_k2.py:74-79 at 067f987)."""

from __future__ import annotations

from pathlib import Path

from perfmodel.ingest import plan_of, read_config

KIMI_GB200 = Path(__file__).parent / "fixtures" / "fit_labels" / "bridge" / "perf_recipes" / "kimi" / "gb200" / "kimi_k2.py"


def test_kimi_k2_dist_muon_shards_the_optimizer_state():
    # kimi_k2.py (gb200):26-79 calls kimi_k2_pretrain_config() (not among the files) and sets no optimizer or
    # ddp.use_distributed_optimizer of its own: the base's _apply_kimi_k2_optimizer(cfg, "muon") decides
    imp = read_config([KIMI_GB200], "bridge", "kimi_k2_pretrain_256gpu_gb200_bf16_config")
    keys = {k.key: k for k in imp.keys}
    opt = keys["optimizer"]
    assert opt.fate == "default" and "kimi_k2.py:79" in opt.why and "LayerWiseDistributedOptimizer" in opt.why
    assert "ddp.use_distributed_optimizer" not in keys or keys["ddp.use_distributed_optimizer"].fate != "mapped"
    _, _, plan = plan_of(imp)
    # 256 GPUs, TP 1, PP 4 (kimi_k2.py:38-40): dp 64, the state sharded over it (ZeRO-1)
    assert (plan.tp, plan.pp, plan.vpp, plan.ep, plan.dp, plan.zero) == (1, 4, 4, 64, 64, 1)
