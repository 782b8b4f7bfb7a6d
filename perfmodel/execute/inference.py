"""Serve a plan for real on this process's rank: prefill a static batch, then decode it with a KV cache.

The model is the one the executor trains (execute.transformer), built on the meta device, placed over the `tp`
axis exactly as training places it without sequence parallelism (tensor_parallel.apply_tp with Megatron-LM's
placements: column-split qkv and MLP input, row-split projections whose outputs are all-reduced, a
vocabulary-split embedding and LM head), then initialised from the seed. The `dp` axis holds independent
replicas, each with its own requests. The KV cache enters through the attention core's one hook
(`AttentionCore.context`, which context parallelism also uses): a `KVCache` per layer says where the new queries
sit and returns every key and value so far, so the model itself is unchanged.

Per round, each replica prefills its B prompts of I tokens in one forward (logits of the last position only, as
serving engines compute them), samples greedily, then runs O - 1 decode steps of one token per sequence. Every
rank times each step; a step's time is the slowest rank's (`spec.measurement.job_step_times`). Rank 0 writes the
measurement beside the plan (`spec.serving.files.ServeMeasurement`).
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from ..files import relative_ref
from ..spec.measurement import job_step_times
from ..spec.plan.layout import Plan
from ..spec.plan.file import megatron_placements
from ..spec.hardware.kernel_tables import write_with_tables
from ..spec.serving.files import ServeMeasurement, load_serve_plan
from ..spec.stack.profile import EXECUTOR_STACK
from .parallel.context import point_embedding
from .train import device_name, initialise
from .transformer import Transformer


class KVCache:
    """One layer's keys and values [batch, local kv heads, capacity, head_dim] for this replica's sequences,
    allocated at the first forward for `capacity` positions (input + output: what the serving cost reserves,
    `ServingStack.reserves_whole_sequence`). `positions` (set before each forward) are where the new tokens sit."""

    def __init__(self, capacity: int):
        self.capacity, self.length = capacity, 0
        self.k = self.v = None
        self.positions: torch.Tensor | None = None
        self.causal: bool | None = None  # what the attention core needs after the last gather (AttentionCore)

    def reset(self) -> None:
        self.length = 0

    def gather(self, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor):
        """Store the new keys and values (already rotated at their positions) and return all of them so far,
        with their positions (AttentionCore masks keys after each query's position)."""
        b, h, s, d = k.shape
        if self.k is None:
            self.k = torch.empty(b, h, self.capacity, d, dtype=k.dtype, device=k.device)
            self.v = torch.empty_like(self.k)
        end = self.length + s
        # into an empty cache the queries are the keys (causal from 0); one new token sees every key (no mask);
        # anything else (a later chunk of a prompt) is masked by position
        self.causal = True if self.length == 0 else (False if s == 1 else None)
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end], torch.arange(end, device=k.device)


def placement_plan(pf) -> Plan:
    """The training plan whose Megatron-LM placements the serving layout takes: the same tp and dp, no sequence
    parallelism, one micro-batch of the replica's sequences."""
    p = pf.plan
    return Plan(stack=EXECUTOR_STACK, gpus=p.tp * p.dp, tp=p.tp, dp=p.dp, micro_batch=pf.batch,
                global_batch=pf.batch * p.dp, seq_len=p.input_len + p.output_len)


class Server:
    """`pf`'s model on this rank, placed over its replica's tp ranks, with a KV cache per layer."""

    def __init__(self, pf, device: torch.device, seed: int = 0):
        self.pf, self.cfg, self.device, self.seed = pf, pf.model, device, seed
        plan = pf.plan
        self.tp_mesh, self.replica = None, 0
        if dist.is_initialized() and dist.get_world_size() > 1:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(device.type, (plan.dp, plan.tp), mesh_dim_names=("dp", "tp"))
            self.replica = mesh.get_local_rank("dp")
            self.tp_mesh = mesh["tp"] if plan.tp > 1 else None
        with torch.device("meta"):
            m = Transformer(self.cfg)
        if self.tp_mesh is not None:
            from .parallel.tensor import apply_tp

            apply_tp(m, self.tp_mesh, megatron_placements(self.cfg, placement_plan(pf)))
        m.to_empty(device=device)
        if self.cfg.tie_embeddings:
            m.lm_head.weight = m.embedding.tok.weight  # distributing and to_empty each made their own copy
        initialise(m, self.cfg, seed, device)
        if device.type == "cuda":
            m.to(torch.bfloat16 if plan.precision == "bf16" else torch.float16)
        self.model = m.eval()
        self.caches = [KVCache(plan.input_len + plan.output_len) for _ in m.layers]
        for layer, cache in zip(m.layers.values(), self.caches):
            layer.attention.core.context = cache

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next tokens [batch] after `tokens` [batch, s] (the prompts, or the last sampled tokens): embedding,
        the layers through their caches, the final norm and LM head on the last position, greedy sampling."""
        m, start = self.model, self.caches[0].length
        pos = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        for cache in self.caches:
            cache.positions = pos
        point_embedding(m.embedding, pos)
        x = m.embedding(tokens)
        for layer in m.layers.values():
            x = layer(x)
        logits = m.lm_head(m.final_norm(x[:, -1:]))
        if self.tp_mesh is not None:
            logits = logits.full_tensor()  # the vocabulary-split logits, gathered for sampling
        return logits[:, -1].argmax(-1)

    def prompts(self, round_: int) -> torch.Tensor:
        """This replica's B prompts of I tokens: drawn from a generator seeded by the seed, the round and the
        replica (within int64, as torch.Generator takes it)."""
        plan = self.pf.plan
        gen = torch.Generator().manual_seed(((self.seed * 1_000_003 + round_) * 4096 + self.replica) % 2**63)
        return torch.randint(0, self.cfg.vocab, (self.pf.batch, plan.input_len), generator=gen).to(self.device)

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor) -> tuple[list[float], list[int]]:
        """Seconds of the prefill and of every decode step (this rank's), and the first sequence's tokens."""
        for cache in self.caches:
            cache.reset()
        times, out, x = [], [], prompts
        for _ in range(self.pf.plan.output_len):
            self._sync()
            t0 = _now()
            x = self.forward(x)
            self._sync()
            times.append(_now() - t0)
            out.append(int(x[0]))
            x = x[:, None]
        return times, out

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _now() -> float:
    import time

    return time.perf_counter()


def serve_job(job: dict, device: torch.device, rank: int, at, say) -> None:
    """Every serving plan of `job`, `rounds` times over; rank 0 writes each plan's measurement. `at(place)`
    reports where this rank is, `say(text)` prints a line for the user (execute.worker)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    for entry in job["plans"]:
        pf, name = load_serve_plan(entry["plan"]), os.path.basename(entry["plan"])
        at(f"building {name}")
        server = Server(pf, device, job["seed"])
        prefill, decode, tokens = [], [], []
        for r in range(job["rounds"]):
            at(f"round {r + 1} of {name}")
            if dist.is_initialized():
                dist.barrier()  # the replicas start together: on a shared host they compete for the cores
            times, first = server.generate(server.prompts(r))
            every = [times]
            if dist.is_initialized():
                every = [None] * world
                dist.all_gather_object(every, times)
            steps = job_step_times(every)
            prefill.append(steps[0])
            decode.append(steps[1:])
            tokens.append(first)
        if rank == 0:
            m = ServeMeasurement(
                plan_file=relative_ref(entry["plan"], entry["output"]), device_type=device.type, device=device_name(device),
                backend=dist.get_backend() if dist.is_initialized() else "none", torch_version=torch.__version__,
                nproc=world, batch=pf.batch, rounds=job["rounds"], warmup=job["warmup"], prefill_s=prefill,
                decode_s=decode, tokens=tokens,
                notes=[] if device.type == "cuda" else ["computed in fp32 (the CPU executor's dtype); the plan's "
                                                        f"{pf.plan.precision} is priced at the spec's rates"],
                created_at=datetime.datetime.now().isoformat(timespec="seconds"))
            write_with_tables(m, entry["output"], "serving measurement")
            say(f"{name}: prefill {m.prefill_time_s * 1e3:.1f} ms, decode step {m.decode_time_s * 1e3:.2f} ms "
                f"(medians of {job['rounds'] - job['warmup']} rounds), tokens {first[:4]}...")
        del server
