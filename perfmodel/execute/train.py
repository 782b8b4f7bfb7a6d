"""One plan built and trained on this process's rank: mesh, stages, parallelisms, optimizer, steps.

The build follows torchtitan's order, each step a small function of its own module:
  model on the meta device -> pipeline split (parallel.pipeline) -> tensor/sequence parallel (tensor_parallel)
  -> expert parallel (parallel.expert) -> activation checkpointing (checkpointing) -> materialise and
  initialise -> context parallel (parallel.context) -> data parallel / ZeRO (parallel.data) -> optimizer ->
  pipeline schedule.
Initial values depend only on the seed and each parameter's name (model.initial_value), and every rank sees
the same global batch (data.Batches), so any layout trains the same model on the same data: its losses match
a single process's to rounding.

Not run: dropout (its random masks would differ between layouts; the measurement says so), gradient clipping.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .host import cpu_name
from ..spec.plan.layout import chunk_layers
from ..spec.plan.file import MESH_AXES, PlanFile, megatron_placements
from .parallel.checkpointing import apply_ac, plain_name
from .parallel.context import apply_cp
from .data import local_slice
from .parallel.data import allreduce_gradients, apply_data_parallel, as_param_placement, make_optimizer
from .lora import apply_lora
from .transformer import Transformer, initial_value
from .parallel.pipeline import make_schedule, prune, stage_indices, virtual_stage_layers

LR = 1e-3  # AdamW learning rate: large enough that a few steps move the loss, small enough to stay stable


@torch.no_grad()
def initialise(module: nn.Module, cfg, seed: int, device: torch.device, first_expert: dict | None = None) -> None:
    """Every parameter from its full initial value; a DTensor keeps its local shard of it, an expert-parallel
    weight the rows of its experts (`first_expert`: parallel.expert.apply_ep)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    for name, p in module.named_parameters():
        name = plain_name(name)
        full = initial_value(name, tuple(p.shape), cfg, seed, device, (first_expert or {}).get(name, 0))
        if isinstance(p, DTensor):
            p.to_local().copy_(distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None).to_local())
        else:
            p.copy_(full)


class Trainer:
    """Build `pf`'s plan on the current process group (or on one process without one) and train it."""

    def __init__(self, pf: PlanFile, device: torch.device, seed: int = 0, lr: float = LR):
        self.pf, self.cfg, self.plan, self.device = pf, pf.model, pf.plan, device
        plan, cfg = self.plan, self.cfg
        self.notes: list[str] = []
        placements = pf.placements or megatron_placements(cfg, plan)
        self.mesh = None
        sizes = {a: getattr(plan, a) for a in MESH_AXES}
        if dist.is_initialized() and dist.get_world_size() > 1:
            from torch.distributed.device_mesh import init_device_mesh

            self.mesh = init_device_mesh(device.type, tuple(sizes.values()), mesh_dim_names=MESH_AXES)
        self.rank = {a: (self.mesh.get_local_rank(a) if self.mesh is not None else 0) for a in MESH_AXES}
        tp_mesh = self.mesh["tp"] if plan.tp > 1 else None
        dp_mesh = self.mesh["dp", "cp"]._flatten("dp_cp") if plan.dp * plan.cp > 1 else None
        if plan.dp_replicate > 1:  # hybrid sharding: FSDP2 over (replicate, shard x cp)
            from .parallel.data import hsdp_mesh

            dp_mesh = hsdp_mesh(device.type, plan)
        cp_group = self.mesh["cp"].get_group() if plan.cp > 1 else None
        self.tp_mesh, self.dp_mesh = tp_mesh, dp_mesh
        self.experts = None  # expert parallelism (ep > 1): the experts' mesh and data parallelism
        if cfg.moe is not None and plan.ep > 1:
            from .parallel.expert import ExpertData, expert_mesh

            ep_mesh = expert_mesh(device.type, plan.pp, plan.dp * plan.cp, plan.ep)
            self.experts = ExpertData(ep_mesh["edp"], plan.ep)
            self.mesh_ep_rank = ep_mesh.get_local_rank("ep")

        n_stages = plan.pp * plan.vpp
        ranges = virtual_stage_layers(chunk_layers(plan, cfg.n_layers))
        self.indices = stage_indices(self.rank["pp"], plan.pp, plan.vpp)
        self.modules, self.raw = [], []
        for v in self.indices:
            with torch.device("meta"):
                m = prune(Transformer(cfg), *ranges[v], v == 0, v == n_stages - 1)
                if plan.lora is not None:  # adapters on a frozen base (execute.lora)
                    apply_lora(m, cfg, plan.lora)
            if tp_mesh is not None:
                from .parallel.tensor import apply_tp, stage_input_placement

                apply_tp(m, tp_mesh, placements)
                self._stage_io(m, None if v == 0 else stage_input_placement(placements, ranges[v][0]))
            first_expert = {}
            if self.experts is not None:
                from .parallel.expert import apply_ep

                first_expert = apply_ep(m, ep_mesh["ep"])
            apply_ac(m, plan.recompute, plan.recompute_modules, plan.recompute_num_layers, plan.recompute_method)
            m.to_empty(device=device)
            if cfg.tie_embeddings and m.embedding is not None and m.lm_head is not None:
                m.lm_head.weight = m.embedding.tok.weight  # distributing and to_empty each made their own copy
            initialise(m, cfg, seed, device, first_expert)
            self.positions = apply_cp(m, cp_group, plan.seq_len, device)
            self.raw.append(m)
            m, self.dp_kind, notes = apply_data_parallel(m, dp_mesh, plan.zero, tp_mesh is not None, device,
                                                         pipelined=plan.pp > 1, experts=self.experts,
                                                         compression=plan.grad_compression,
                                                         powersgd_rank=plan.powersgd_rank)
            self.notes += [n for n in notes if n not in self.notes]
            self.modules.append(m)
        self.params = [p for m in self.modules for p in m.parameters() if p.requires_grad]  # LoRA: the adapters
        self.expert_params = [p for m in self.raw for p in self.experts.params(m)] if self.experts else []
        expert_ids = {id(p) for p in self.expert_params}
        self.dense_params = [p for p in self.params if id(p) not in expert_ids]
        self.optimizer = make_optimizer(self.dense_params, plan.zero, self.dp_kind, dp_mesh, lr)
        if self.expert_params:  # (a pipeline rank whose layers are all dense holds none)
            from .parallel.expert import Optimizers

            edp = self.experts.mesh
            self.optimizer = Optimizers(self.optimizer, make_optimizer(
                self.expert_params, plan.zero if edp.size() > 1 else 0, self.dp_kind, edp, lr))
        self.loss_parallel = False
        self.loss_fn = self._make_loss(placements)
        self.schedule = None
        if plan.pp > 1:
            self.schedule = make_schedule(plan.schedule, self.modules, self.indices, n_stages,
                                          plan.num_microbatches, self.loss_fn, device, self.mesh["pp"].get_group())
        self.tie_group = self._tie_group() if plan.pp > 1 and cfg.tie_embeddings else None
        self.holds_first = 0 in self.indices
        self.holds_last = n_stages - 1 in self.indices

    # -- pieces of the build ---------------------------------------------------------------------------
    def _stage_io(self, m: nn.Module, arrives) -> None:
        """Pipeline stages exchange local tensors: re-wrap a received one with the placement it left with,
        and hand out local tensors (the last stage's logits are re-wrapped by the loss)."""
        from torch.distributed.tensor import DTensor

        mesh = self.tp_mesh
        if arrives is not None:
            m.register_forward_pre_hook(lambda mod, args: (DTensor.from_local(args[0], mesh, [arrives],
                                                                              run_check=False),))
        m.register_forward_hook(lambda mod, args, out: out.to_local() if isinstance(out, DTensor) else out)

    def _make_loss(self, placements):
        """Mean cross entropy over the tokens of a micro-batch on this (dp, cp) rank, computed where the plan's
        loss op says: vocabulary-parallel (torch's loss_parallel), on a tp shard of batch or sequence (each tp
        rank its part of the sum), or replicated."""
        if self.tp_mesh is None:
            self.loss_split = False
            return lambda logits, targets: F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        from torch.distributed.tensor import DTensor, Replicate, Shard

        from .parallel.tensor import loss_input

        mesh, tp, tp_rank = self.tp_mesh, self.plan.tp, self.rank["tp"]
        emitted, want = loss_input(placements)
        self.loss_parallel = want == Shard(2)
        self.loss_split = isinstance(want, Shard) and want.dim in (0, 1)

        def loss_fn(logits, targets):
            x = DTensor.from_local(logits, mesh, [emitted], run_check=False)
            if x.placements[0] != want:
                x = x.redistribute(mesh, [want])
            if self.loss_parallel:
                t = DTensor.from_local(targets, mesh, [Replicate()], run_check=False)
                return F.cross_entropy(x.flatten(0, 1), t.flatten(0, 1))
            if not self.loss_split:
                return F.cross_entropy(x.to_local().flatten(0, 1).float(), targets.flatten())
            mine = targets.chunk(tp, dim=want.dim)[tp_rank]
            return F.cross_entropy(x.to_local().flatten(0, 1).float(), mine.flatten(), reduction="sum") / targets.numel()

        return loss_fn

    def _tie_group(self):
        """The (first stage, last stage) rank pairs that hold the two copies of a tied embedding."""
        grid = self.mesh.mesh  # [pp, dp, cp, tp] global ranks
        mine = None
        for a, b in zip(grid[0].flatten().tolist(), grid[-1].flatten().tolist()):
            g = dist.new_group([a, b])
            if dist.get_rank() in (a, b):
                mine = g
        return mine

    # -- one step --------------------------------------------------------------------------------------
    def _autocast(self):
        if self.device.type == "cuda" and self.plan.precision in ("bf16", "fp16"):
            return torch.autocast("cuda", dtype=torch.bfloat16 if self.plan.precision == "bf16" else torch.float16)
        return contextlib.nullcontext()

    def _contexts(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(self._autocast())
        if self.loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            stack.enter_context(loss_parallel())
        return stack

    def step(self, tokens: torch.Tensor) -> float:
        """One optimizer step on the global batch `tokens` [global_batch, seq + 1]; returns this rank's
        share of the step's mean loss (the shares of all ranks sum to it)."""
        plan = self.plan
        x, y = local_slice(tokens, plan.dp, self.rank["dp"], self.positions.cpu())
        x, y = x.to(self.device), y.to(self.device)
        m, mb = plan.num_microbatches, plan.micro_batch
        losses = []
        if self.schedule is not None:
            with self._contexts():
                kw = {"target": y, "losses": losses} if self.holds_last else {}
                self.schedule.step(x, **kw) if self.holds_first else self.schedule.step(**kw)
        else:
            module = self.modules[0]
            for i in range(m):
                sync = contextlib.nullcontext()
                if self.dp_kind == "ddp" and i < m - 1:
                    sync = module.no_sync()
                with sync, self._contexts():
                    loss = self.loss_fn(module(x[i * mb:(i + 1) * mb]), y[i * mb:(i + 1) * mb])
                    (loss / m).backward()
                losses.append(loss.detach())
        if self.tp_mesh is not None and self.dp_kind != "fsdp":
            from .parallel.tensor import reduce_partial_gradients

            reduce_partial_gradients(self.params, self.tp_mesh)
        if self.dp_kind == "allreduce":
            allreduce_gradients(self.dense_params, self.dp_mesh, bf16=plan.grad_compression == "bf16")
        if self.experts is not None:
            self.experts.reduce_gradients(self.expert_params, fsdp=self.dp_kind == "fsdp")
        if self.tie_group is not None:
            self._sync_tied()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return self._share(losses)

    # -- state for checkpoints (execute/checkpoint/resume.py) ---------------------------------------------------------
    def _stateful(self):
        """(one module holding this rank's stages, its local optimizers) for torch's get/set_state_dict. The
        stages sit under their virtual stage index (a pipeline rank may hold several). ZeRO-1's partition
        optimizer stands in for the ZeroRedundancyOptimizer around it, whose state_dict needs a consolidation on
        one rank; the partition's keys are its own parameters' names, so each rank saves its own."""
        if not hasattr(self, "_stages"):
            self._stages = nn.ModuleDict({f"stage{v}": m for v, m in zip(self.indices, self.modules)})
        optimizers = getattr(self.optimizer, "optimizers", (self.optimizer,))  # parallel.expert.Optimizers
        return self._stages, [getattr(o, "optim", o) for o in optimizers]  # ZeroRedundancyOptimizer.optim

    def _disk_key(self, key: str, to_disk: bool) -> str:
        """Expert-parallel weights are plain tensors holding different experts on each ep rank under one name:
        saved under a name with the ep rank in it, or DCP would write one rank's as if all held the same."""
        if self.experts is None:
            return key
        mine = f".experts@ep{self.mesh_ep_rank}."
        return key.replace(".experts.", mine) if to_disk else key.replace(mine, ".experts.")

    def state_dict(self) -> dict:
        """{"model": ..., "optim": ...} with fully qualified names (the optimizer's flattened per parameter, so
        that ranks holding different parameters never share a key), for dcp.save / dcp.load. An optimizer
        without state yet gets it first (torch steps it once with zero gradients and lr 0: the weights stay)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        module, optimizers = self._stateful()
        model, optim = get_state_dict(module, optimizers, options=StateDictOptions(flatten_optimizer_state_dict=True))
        return {part: {self._disk_key(k, True): v for k, v in sd.items()}
                for part, sd in (("model", model), ("optim", optim))}

    def load_state_dict(self, state: dict) -> None:
        """Load what state_dict gave (after dcp.load filled it) into the modules and optimizers."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        module, optimizers = self._stateful()
        model, optim = ({self._disk_key(k, False): v for k, v in state[part].items()} for part in ("model", "optim"))
        set_state_dict(module, optimizers, model_state_dict=model, optim_state_dict=optim,
                       options=StateDictOptions(flatten_optimizer_state_dict=True))

    def _sync_tied(self) -> None:
        """Sum the gradients of the two copies of a tied embedding (Megatron-LM's embedding all-reduce)."""
        from torch.distributed.tensor import DTensor

        for m in self.raw:
            for part in ((m.embedding.tok if m.embedding is not None else None), m.lm_head):
                if part is None or part.weight.grad is None:
                    continue
                g = as_param_placement(part.weight)
                dist.all_reduce(g.to_local() if isinstance(g, DTensor) else g, group=self.tie_group)

    def _share(self, losses: list) -> float:
        if not losses or not self.holds_last:
            return 0.0
        if not self.loss_split and self.rank["tp"] != 0:
            return 0.0
        from torch.distributed.tensor import DTensor

        vals = [float((v.full_tensor() if isinstance(v, DTensor) else v).detach()) for v in losses]
        return sum(vals) / len(vals) / (self.plan.dp * self.plan.cp)


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def check_finite(loss: float, step: int) -> None:
    if not math.isfinite(loss):
        raise FloatingPointError(f"loss is {loss} at step {step}")
