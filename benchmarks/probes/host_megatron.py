"""Megatron-Core's host time per layer and micro-batch, measured on this machine (one GPU, no Transformer Engine).

    PYTHONPATH=<megatron-core 0.14 unpacked> python -m benchmarks.probes.host_megatron --out megatron.json

Builds Megatron-Core's GPTModel with its local layer spec (get_gpt_layer_local_spec: torch norms,
ColumnParallelLinear / RowParallelLinear, the unfused DotProductAttention with FusedScaleMaskSoftmax, bias-dropout-
add; what Megatron runs where Transformer Engine and apex are absent), wraps it in Megatron-Core's
DistributedDataParallel (its gradient buffer and per-parameter hooks) and its optimizer, and trains through its
forward_backward_no_pipelining schedule, bf16, dropout 0.1 (Megatron's default), tp = pp = 1 on a one-rank
process group.

What it measures: the host seconds per layer per micro-batch, from tiny-tensor twins (hidden 64, 64 tokens) of
2 and 12 layers, whose steps are all host: (t12 - t2) / 10 / micro-batches (medians of --repeats interleaved runs), without and with full recompute
(--recompute-granularity full --recompute-method uniform); and the wall time of GPT-2 124M-shaped steps (hidden
768, 12 heads, 1024 tokens) at micro-batch 1 and 4, with kernels per step from torch.profiler.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist


def build(layers: int, hidden: int, heads: int, vocab: int, seq: int, recompute: bool, device):
    """Megatron-Core's GPTModel in its DDP wrapper with its optimizer; off CUDA (where its gradient buffer cannot
    live) the bare model with torch's AdamW, so that the forward-backward schedule can be tried on a CPU."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    extra = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1) if recompute else {}
    cfg = TransformerConfig(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, bf16=True,
                            params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, hidden_dropout=0.1,
                            attention_dropout=0.1, use_cpu_initialization=device.type != "cuda", **extra)
    model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=vocab,
                     max_sequence_length=seq, position_embedding_type="learned_absolute")
    model = Float16Module(cfg, model).to(device)  # as megatron.training.get_model wraps it for bf16
    if device.type != "cuda":
        return model, _BareOptimizer(model)
    ddp = DistributedDataParallel(config=cfg, ddp_config=DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=False), module=model)
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True, clip_grad=1.0,
                                                 use_distributed_optimizer=False), [ddp])
    return ddp, opt


class _BareOptimizer:
    def __init__(self, model):
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model.zero_grad_buffer = lambda: None

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)

    def step(self):
        self.opt.step()


def trainer(layers, hidden, heads, vocab, seq, mb, accum, recompute, device):
    from megatron.core.pipeline_parallel import get_forward_backward_func

    model, opt = build(layers, hidden, heads, vocab, seq, recompute, device)
    tokens = torch.randint(0, vocab, (8, mb, seq + 1), device=device)
    pos = torch.arange(seq, device=device).unsqueeze(0).expand(mb, -1)
    mask = torch.triu(torch.ones(seq, seq, device=device), diagonal=1).bool()[None, None]  # True: masked out
    fb = get_forward_backward_func()
    counter = [0]

    def loss_func(loss_mask, output):
        loss = (output.float() * loss_mask).sum() / loss_mask.sum()
        return loss, {"lm loss": loss.detach()}

    def forward_step(data_iterator, model):
        batch = tokens[counter[0] % len(tokens)]
        counter[0] += 1
        out = model(batch[:, :-1], pos, mask, labels=batch[:, 1:])
        return out, partial(loss_func, torch.ones(mb, seq, device=device))

    def step():
        model.zero_grad_buffer()
        opt.zero_grad()
        if device.type == "cuda":
            losses = fb(forward_step_func=forward_step, data_iterator=None, model=[model], num_microbatches=accum,
                        seq_length=seq, micro_batch_size=mb, forward_only=False)
        else:  # the schedule allocates on CUDA: the same calls in a plain loop
            losses = []
            for _ in range(accum):
                out, loss_fn = forward_step(None, model)
                loss, logged = loss_fn(out)
                (loss / accum).backward()
                losses.append(logged)
        opt.step()
        return losses[-1]["lm loss"]

    return step


def timed(step, device, steps=10, warmup=4) -> float:
    walls = []
    for i in range(warmup + steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step().item()
        if i >= warmup:
            walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def kernels(step, device, steps=2) -> dict:
    """Kernels, device busy seconds and synchronisations per step (host_launch.trace_counts); {} off CUDA."""
    if device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.probes.host_launch import trace_counts

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step().item()
    return trace_counts(prof, steps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="times each twin is measured (medians kept)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    import megatron.core
    from megatron.core import parallel_state, tensor_parallel

    backend = "nccl" if device.type == "cuda" else "gloo"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if device.type == "cuda":
        torch.cuda.set_device(0)
    else:  # a CPU try-out: Megatron's attention buffer and schedule name torch.cuda.current_device()
        torch.cuda.current_device = lambda: "cpu"
    dist.init_process_group(backend, rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    if device.type == "cuda":
        tensor_parallel.model_parallel_cuda_manual_seed(0)
    else:
        torch.manual_seed(0)
    out = {"megatron_core": megatron.core.__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None, "host_per_layer": {}, "steps": []}
    echo = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    for recompute in (False, True):
        t = {2: [], 12: []}
        for _ in range(a.repeats):  # interleaved, each a fresh model: a shared VM's host speed drifts
            for layers in t:
                t[layers].append(timed(trainer(layers, 64, 2, 128, 64, 1, 4, recompute, device), device, a.steps))
        med = {k: statistics.median(v) for k, v in t.items()}
        per = (med[12] - med[2]) / 10 / 4
        key = "full_recompute" if recompute else "no_recompute"
        out["host_per_layer"][key] = {"per_layer_per_microbatch_s": per, "twin_2_layers_s": med[2],
                                      "twin_12_layers_s": med[12], "microbatches": 4,
                                      "repeats_2_layers_s": t[2], "repeats_12_layers_s": t[12]}
        t = med
        echo(f"{key}: {per * 1e3:.3f} ms per layer per micro-batch (twins: {t[2] * 1e3:.1f} / {t[12] * 1e3:.1f} ms)")
        if a.out:
            a.out.write_text(json.dumps(out, indent=1))
    if device.type == "cuda":
        for recompute in (False, True):
            for mb in (1, 4):
                step = trainer(12, 768, 12, 50304, 1024, mb, 1, recompute, device)
                row = {"micro_batch": mb, "recompute": recompute, "wall_s": timed(step, device, a.steps),
                       **kernels(step, device)}
                out["steps"].append(row)
                echo(f"gpt2-124m mb {mb} recompute {recompute}: {row}")
                del step
                torch.cuda.empty_cache()
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
