"""plain-torch: perfmodel's own executor (perfmodel/execute/transformer.py built and stepped by train.py's Trainer
for a one-process plan), GPT-2 and Llama."""

from __future__ import annotations

import torch

from benchmarks import ROOT
from benchmarks.tools.host_counts import counter
from benchmarks.tools.host_counts.counter import BATCH, SEQ, Counter, in_region, make_rules, region_counts, summarize

PLAIN_RULES = make_rules(r"layers\.(\d+)", {
    "norm1": ("norm1", None), "attention": ("qkv", "residual1"), "attention.wq": ("qkv", None),
    "attention.wk": ("qkv", None), "attention.wv": ("qkv", None), "attention.core": ("attention", "out_proj"),
    "attention.wo": ("out_proj", None), "residual1": ("residual1", None), "norm2": ("norm2", None),
    "mlp": ("mlp_in", "residual2"), "mlp.w1": ("mlp_in", None), "mlp.w3": ("mlp_in", None),
    "mlp.act": ("activation", "mlp_out"), "mlp.w2": ("mlp_out", None), "residual2": ("residual2", None),
}, {
    "": ("_model", "loss", "embedding"), "embedding": ("embedding", "embedding_output"),
    "embedding.tok": ("embedding", "embedding_output"), "embedding.pos": ("embedding_output", None),
    "final_norm": ("final_norm", None), "lm_head": ("lm_head", "loss"),
})
SOURCE = (
    "counted: perfmodel/execute/transformer.py Transformer as perfmodel/execute/train.py's Trainer builds "
    "and steps it for a one-process plan (Trainer.step counted whole), bf16 autocast as on CUDA; main: GPT-2 "
    "(layernorm, learned positions, biases, tied embeddings, tanh-GeLU); _variants.llama: RMSNorm, RoPE (the "
    "executor's rotate(): cos/sin recomputed per call), GQA, SwiGLU; optimizer: fused AdamW "
    "(data_parallel.adamw)")


def executor_config(arch: str, n_layers: int = 2):
    from perfmodel.spec.model.config import ModelConfig

    if arch == "llama":
        return ModelConfig(name="tiny-llama", n_layers=n_layers, hidden=64, n_heads=4, n_kv_heads=2, ffn_hidden=128,
                           vocab=128, max_seq_len=64, mlp="swiglu", norm="rmsnorm", position="rope")
    return ModelConfig(name="tiny-gpt", n_layers=n_layers, hidden=64, n_heads=2, ffn_hidden=256, vocab=128,
                       max_seq_len=64, mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True,
                       linear_bias="all")


def executor_trainer(arch: str, n_layers: int = 2, micro_batches: int = 1):
    """perfmodel's Trainer for a one-process plan (no parallelism), as tests/test_execute.py builds one, with the bf16
    autocast a CUDA run enters (train.py's _autocast, CPU autocast here)."""
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.plan.layout import Plan, resolve, split_of
    from perfmodel.spec.plan.file import PlanFile, Prediction, mesh_of

    cfg = executor_config(arch, n_layers)
    hw = load_hardware(ROOT / "tests" / "fixtures" / "cpu-test.yaml")
    plan = resolve(Plan(gpus=1, micro_batch=BATCH, global_batch=BATCH * micro_batches, seq_len=SEQ), cfg, hw)
    pred = Prediction(step_time_s=0.1, tokens_per_s=1.0, mfu=0.1, memory_bytes=1.0, memory_capacity_bytes=2.0,
                      fits_in_memory=True)
    pf = PlanFile(version=1, model=cfg, hardware=hw, plan=plan, mesh=mesh_of(plan),
                  stage_layers=split_of(plan, n_layers), placements=[], prediction=pred,
                  created_by="benchmarks.tools.host_counts")
    trainer = Trainer(pf, counter.DEVICE, seed=0)
    if counter.DEVICE.type == "cpu":  # (on CUDA the Trainer enters bf16 autocast itself)
        trainer._autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return trainer, Batches(cfg.vocab, plan.global_batch, plan.seq_len, seed=0)


def plain_torch(arch: str = "gpt2", n_layers: int = 2) -> dict:
    """One Trainer.step counted whole: the model's operators, the loop's own calls ("_step": slicing, the loss's
    division, backward(), the loss's read-back), the optimizer's step and zero_grad ("_optimizer")."""
    trainer, batches = executor_trainer(arch, n_layers)
    trainer.step(batches.step(0))  # optimizer state, caches
    model = trainer.modules[0]
    c = Counter(model, *PLAIN_RULES, start="_step")
    loss_fn, opt = trainer.loss_fn, trainer.optimizer
    trainer.loss_fn = in_region(c, "loss", loss_fn, after="_step")
    opt_step, opt_zero = opt.step, opt.zero_grad
    opt.step, opt.zero_grad = in_region(c, "_optimizer", opt_step), in_region(c, "_zero_grad", opt_zero)
    tok = batches.step(1)
    with c.active():
        c.set("_step")
        trainer.step(tok)
    opt.step, opt.zero_grad, trainer.loss_fn = opt_step, opt_zero, loss_fn
    res = summarize(c, n_layers)
    res["_step"] = region_counts(c, "_step")
    res["_step"]["optimizer"] = region_counts(c, "_optimizer")
    res["_step"]["zero_grad"] = region_counts(c, "_zero_grad")
    res["_step"]["parameter_tensors"] = len(trainer.params)
    # on CUDA x.to(device), y.to(device) are host-to-device copies (eager ops; no-ops on this CPU: meta here), and
    # self.positions.cpu() in Trainer.step a device-to-host copy that waits for the device
    if counter.DEVICE.type == "cpu":
        res["_step"]["forward"]["eager_op"] = res["_step"]["forward"].get("eager_op", 0) + 3
    res["_step"]["cuda_adjustment"] = ("+3 eager_op: x.to(cuda), y.to(cuda) (host-to-device copies) and "
                                       "positions.cpu() (a device-to-host copy and sync) are no-ops on a CPU")
    res["_step"]["note"] = ("Trainer.step of a one-process plan, one micro-batch: local_slice, the copies to the "
                            "device, the micro-batch slices, autocast, the loss's division, backward() (counted as "
                            "one eager_op), loss.detach(), optimizer.step() (fused AdamW), zero_grad(set_to_none), the "
                            "loss's float() (one device sync)")
    return res

