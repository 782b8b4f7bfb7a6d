"""Every valid layout of one job, as `Layouts` columns.

A job is (model, system, gpus, global batch, sequence length, precision). Its layouts are every
(tp, pp, cp, dp, vpp, micro_batch, recompute, sequence_parallel, zero) that `spec.plan.layout.resolve` accepts, with the
search's choices for what resolve leaves open:
  - tp divides gcd(n_heads, n_kv_heads, ffn_hidden); pp <= n_layers; cp divides seq_len; tp*pp*cp*dp = gpus;
  - dp * micro_batch divides global_batch (every divisor is a micro-batch candidate);
  - vpp: 1, and every v >= 2 for which n_layers splits into pp * v equal chunks (what Megatron-LM's
    --num-layers-per-virtual-pipeline-stage and torchtitan can run; `predict` also takes uneven chunks), with
    the interleaved schedule, which needs the micro-batch count to be a multiple of pp;
  - schedule: 1F1B for vpp = 1 (GPipe runs as fast in this model and holds more activations, so it is never
    better and is not enumerated);
  - sequence parallel with every tp > 1 that divides each cp rank's tokens, and only there (without it where tp
    does not divide them): Megatron's sequence parallelism replaces each pair of
    all-reduces by four all-gathers / reduce-scatters of the same total bytes (equal time on a tier's ring values)
    and divides norm, dropout and residual work, their activations and the pipeline sends by tp, so a plan
    without it is never smaller and, on ring values, never faster (tests/test_search.py checks this). Where a tier
    quotes measured NCCL fits the all-reduce can run faster than its all-gather + reduce-scatter (H100, 8 GPUs:
    392 against 305 GB/s) and a plan without it a few percent faster in time, at more memory; `Space(
    sequence_parallel=[False, True])` enumerates both;
  - ZeRO 1-3 only with dp*cp > 1;
  - for a mixture-of-experts model, tp > 1 only with sequence parallelism, and every (ep, etp) with ep dividing n_experts, etp dividing expert_ffn_hidden and
    ep*etp dividing the stage's tp*cp*dp ranks (MoE parallel folding; dense models: ep = etp = 1).
  - recompute: none, selective (Megatron-Core's default module list, core_attn) and full (every layer its own
    checkpoint); per-op (torchtitan's per-op checkpointing) and names (JAX's save_only_these_names, with nothing
    saved: the layer input alone) only where `Space.recompute` names them (`search --only recompute=per-op`), and
    module lists, saved tensors or grouped full recompute only through `predict`'s flags.
`Space` narrows any axis (e.g. zero=[1], recompute=["selective"]).
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import numpy as np

from ..cost.layouts import Layouts
from ..errors import InputError
from ..types import Count, Flag, Schema
from ..spec.plan.finetune import LoRA
from ..spec.hardware.system import System
from ..spec.model.global_attention import kv_head_counts
from ..spec.model.config import ModelConfig
from ..spec.plan.layout import Dispatcher, Imbalance, POWERSGD_LAYOUT, Plan, Precision, Recompute, divisors, resolve
from ..spec.plan.moe_rules import moe_overlap_applies, moe_overlap_refusal
from ..spec.plan.megatron_split import megatron_slots
from ..spec.plan.recompute import MAXTEXT_OFFLOADED, MAXTEXT_REMAT, OffloadTensor, SavedTensor, check_names_model
from ..spec.plan.fp8_recipes import Fp8Recipe
from ..spec.stack.profile import DEFAULT_STACK, check_graphs
from ..spec.stack.release import CAPACITY_FIELDS, GraphScope, release_defaults, release_fields


DEFAULT_RECOMPUTES = ("none", "selective", "full")  # what a search tries without --only recompute=... (per-op: asked)


class Space(Schema):
    """Optional limits on the searched values of each plan field (None: every valid value)."""

    tp: list[Count] | None = None
    pp: list[Count] | None = None
    cp: list[Count] | None = None
    vpp: list[Count] | None = None
    micro_batch: list[Count] | None = None
    recompute: list[Recompute] | None = None
    sequence_parallel: list[Flag] | None = None
    zero: list[Literal[0, 1, 2, 3]] | None = None
    ep: list[Count] | None = None
    etp: list[Count] | None = None
    dp_replicate: list[Count] | None = None  # hybrid sharding's replicas (Plan.dp_replicate); None: 1 only
    # MaxText's named remat policies, each tried as recompute names with its tensors (`remat_jobs`); None: the job's
    remat_policy: list[Literal[tuple(MAXTEXT_REMAT)]] | None = None


class Job(Schema):
    """What a search holds fixed: the workload and the kernels."""

    gpus: Count
    global_batch: Count
    seq_len: Count
    precision: Precision = "bf16"
    attention: Literal["flash", "unfused"] = "flash"
    grad_dtype: Literal["fp32", "bf16"] | None = None  # None: the stack's
    weight_dtype: Literal["fp32", "bf16"] | None = None  # Plan.weight_dtype (None: the stack's)
    moment_dtype: Literal["fp32", "bf16"] | None = None  # Plan.moment_dtype (None: the stack's)
    grad_compression: Literal["none", "bf16", "powersgd"] = "none"
    powersgd_rank: Count = 1
    overlap_dp_comm: Flag = True
    tp_comm_overlap: Flag | None = None
    stack: str = DEFAULT_STACK
    expert_imbalance: Imbalance = 1.0
    moe_capacity_factor: float | Literal["none"] | None = None  # Plan's ("none": dropless; None: the release's, else dropless)
    moe_pad_to_capacity: Flag | None = None  # Plan.moe_pad_to_capacity (None: the release's recipe, else off)
    moe_dispatcher: Dispatcher | None = None  # None: the stack release's recipe (with_release), else alltoall
    moe_overlap: Flag = False
    cuda_graphs: GraphScope | None = None  # Plan.cuda_graphs (None: the release's recipe, else the stack profile's)
    fp8_recipe: Fp8Recipe | None = None  # Plan.fp8_recipe (None: the release's on Blackwell, else tensorwise)
    compile: Literal["none", "model", "model+loss"] = "none"  # Plan.compile: memory only
    lora: LoRA | None = None  # Plan.lora: adapters on a frozen base
    # recompute = names (MaxText's remat policies): the tensors its layouts keep and offload (Plan.recompute_saved,
    # recompute_offloaded; the layouts of other modes ignore them), and the tiled loss (Plan.loss_chunks)
    recompute_saved: list[SavedTensor] | None = None
    recompute_offloaded: list[OffloadTensor] | None = None
    loss_chunks: Count = 1
    optimizer_offload: Flag = False  # Plan.optimizer_offload for every layout


def capacity_of(job: Job) -> float | None:
    """The job's capacity factor as a plan takes it: None for dropless ('none' given, or none set)."""
    return None if job.moe_capacity_factor == "none" else job.moe_capacity_factor


def with_release(job: Job, model: ModelConfig, system: System) -> tuple[Job, str]:
    """(the job with its stack release's recipe in the fields it leaves unset, a note or ''): the ones that hold for
    every layout (spec.stack.release.release_defaults: gradient dtype, a dense model's TP overlap; release_fields:
    dispatcher, CUDA graphs, fp8 recipe); the recipe's EP overlap
    depends on the layout (moe_overlap_applies), so a search prices its layouts without it unless asked."""
    acc = system.accelerator
    job = job.model_copy(update={k: v for k, v in release_defaults(job.stack, model.moe is not None,
                                                                   job.precision).items() if getattr(job, k) is None})
    user_capacity = any(getattr(job, k) is not None for k in CAPACITY_FIELDS)
    found = release_fields(job.stack, model.name, acc.name, acc.generation_name, job.precision,
                           user_capacity) if model.moe else None
    if found is None:
        return job.model_copy(update={"moe_dispatcher": job.moe_dispatcher or "alltoall"}), ""
    r, fields = found
    update = {k: v for k, v in fields.items() if getattr(job, k) is None}
    extra = [what for what, on in (("EP overlap where the layout allows it", r.moe_overlap and not job.moe_overlap),
                                    (f"recompute modules {r.recompute_modules}", bool(r.recompute_modules)),
                                    ("full recompute", r.recompute_full)) if on]
    note = (f"{job.stack}'s recipe for {model.name} also sets {' and '.join(extra)}; the search ranks without "
            "the overlap (--moe-overlap: the layouts that run it) and with its own recompute choices; predict a "
            "chosen plan with --stack to price the recipe's" if extra else "")
    return job.model_copy(update=update), note


def remat_jobs(job: Job, space: Space) -> list[tuple[Job, Space, str]]:
    """(job, space, remat policy or '') of each search a job runs: itself; with space.remat_policy (MaxText's
    named policies, spec.plan.recompute.MAXTEXT_REMAT / MAXTEXT_OFFLOADED) its other recompute modes, and per policy
    the names layouts keeping (and offloading) that policy's tensors. Layouts store one set of tensors for all
    (Layouts.recompute_saved), so each policy is a search of its own."""
    if not space.remat_policy:
        return [(job, space, "")]
    rcs = space.recompute or list(DEFAULT_RECOMPUTES)
    if space.recompute and "names" not in rcs:
        raise InputError(f"remat_policy = {space.remat_policy} tries recompute = names layouts, which --only "
                         f"recompute={','.join(rcs)} leaves out; valid: add names to it, or no remat_policy")
    if job.recompute_saved is not None or job.recompute_offloaded is not None:
        raise InputError("remat_policy gives the names policy's tensors itself; valid: --only remat_policy=... or "
                         "--recompute-saved / --recompute-offloaded, not both")
    others = [r for r in rcs if r != "names"]
    out = [(job, space.model_copy(update={"recompute": others, "remat_policy": None}), "")] if others else []
    names = space.model_copy(update={"recompute": ["names"], "remat_policy": None})
    return out + [(job.model_copy(update={"recompute_saved": MAXTEXT_REMAT[p],
                                          "recompute_offloaded": MAXTEXT_OFFLOADED.get(p)}), names, p)
                  for p in dict.fromkeys(space.remat_policy)]


def _allowed(values: list[int], limit: list | None) -> list:
    return values if limit is None else [v for v in values if v in limit]


def vpp_candidates(n_layers: int, pp: int) -> list[int]:
    """1, and every v >= 2 with n_layers divisible by pp * v (equal chunks, as Megatron-LM's interleaving needs)."""
    if pp == 1:
        return [1]
    return [1] + [v for v in range(2, n_layers // pp + 1) if n_layers % (pp * v) == 0]


def pipeline_candidates(n_layers: int, pp: int) -> list[tuple[int, bool]]:
    """(vpp, Megatron-LM's accounting of embedding and loss as layers) pairs: `vpp_candidates` without it, and
    with it every split that only the two extra slots make even (spec.plan.megatron_split.megatron_chunks): n_layers + 2 divisible
    by pp * vpp where n_layers is not (Llama 3.1 405B's 126 layers at pp 16 x vpp 8)."""
    plain = [(v, False) for v in vpp_candidates(n_layers, pp)]
    if pp == 1:
        return plain
    slots = megatron_slots(n_layers, True, True)
    # vpp 1 is left out: with one chunk per stage the accounting gives the default split (spec.plan.layout.default_stage_layers)
    return plain + [(v, True) for v in range(2, slots // pp + 1) if slots % (pp * v) == 0 and n_layers % (pp * v)]


def expert_candidates(model: ModelConfig, stage_ranks: int, space: Space) -> list[tuple[int, int]]:
    """(ep, etp) pairs a stage of `stage_ranks` (tp*cp*dp) can fold the experts over: ep divides n_experts, etp
    expert_ffn_hidden, ep*etp the stage's ranks (spec.plan.moe_rules.check_experts); (1, 1) for a dense model."""
    if model.moe is None:
        return [(1, 1)]
    eps = _allowed(divisors(model.moe.n_experts), space.ep)
    etps = _allowed(divisors(model.moe.expert_ffn_hidden), space.etp)
    return [(e, t) for e in eps for t in etps if stage_ranks % (e * t) == 0]


def check_job(model: ModelConfig, system: System, job: Job) -> None:
    """Refuse a job no layout can run, before enumerating: one line naming the field and what is valid."""
    # gpus the system allows, a sequence the model allows, a precision the system has (resolve's checks)
    names = job.recompute_saved is not None or job.recompute_offloaded is not None
    resolve(Plan(gpus=job.gpus, micro_batch=1, global_batch=job.gpus, seq_len=job.seq_len,
                 precision=job.precision, fp8_recipe=job.fp8_recipe, lora=job.lora, grad_compression=job.grad_compression,
                 recompute="names" if names else "none", recompute_saved=job.recompute_saved,
                 recompute_offloaded=job.recompute_offloaded, optimizer_offload=job.optimizer_offload,
                 moe_capacity_factor=capacity_of(job), moe_pad_to_capacity=bool(job.moe_pad_to_capacity)),
            model, system)
    check_graphs(job.stack, job.cuda_graphs)
    why = moe_overlap_refusal(model, job.moe_dispatcher or "alltoall") if job.moe_overlap else None
    if why:
        raise InputError(why)


def meshes(model: ModelConfig, job: Job, space: Space) -> list[tuple[int, int, int, int]]:
    """(tp, pp, cp, dp) with tp*pp*cp*dp = gpus that the model, sequence and batch allow."""
    g = job.gpus
    tps = _allowed([t for t in divisors(math.gcd(model.n_heads, *kv_head_counts(model), model.ffn_hidden)) if g % t == 0],
                   space.tp)
    pps = _allowed([p for p in divisors(g) if p <= model.n_layers], space.pp)
    cps = _allowed([c for c in divisors(job.seq_len) if g % c == 0], space.cp)
    out = []
    for t, p, c in itertools.product(tps, pps, cps):
        if g % (t * p * c) == 0 and job.global_batch % (g // (t * p * c)) == 0:
            out.append((t, p, c, g // (t * p * c)))
    return out


def no_mesh_message(model: ModelConfig, job: Job, space: Space) -> str:
    """Why no (tp, pp, cp, dp) exists, and the nearest GPU counts that have one."""
    near = []
    for d in range(1, min(job.gpus, 4096) + 1):  # the nearest counts below and above that have a layout
        near += [n for n in (job.gpus - d, job.gpus + d) if n > 0 and meshes(model, job.model_copy(update={"gpus": n}), space)]
        if len(near) >= 2:
            break
    tp_ok = math.gcd(model.n_heads, *kv_head_counts(model), model.ffn_hidden)
    return (f"gpus = {job.gpus} has no valid layout: no tp*pp*cp*dp = {job.gpus} with tp dividing "
            f"gcd(n_heads, n_kv_heads, ffn_hidden) = {tp_ok}, pp <= n_layers = {model.n_layers}, cp dividing "
            f"seq_len = {job.seq_len} and dp dividing global_batch = {job.global_batch}"
            + (" within the --only limits" if any(v is not None for v in space.model_dump().values()) else "")
            + (f"; valid gpus nearby: {', '.join(map(str, sorted(near[:2])))}" if near else ""))


def _ragged(tables: list[list[tuple[int, ...]]], width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lists of equal-width tuples as one (rows, width) array, each list's offset into it and its length."""
    lengths = np.array([len(t) for t in tables], np.int64)
    flat = np.array([row for t in tables for row in t], np.int64).reshape(-1, width)
    return flat, np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64), lengths


def _mesh_rows(model: ModelConfig, job: Job, space: Space, found: list[tuple[int, int, int, int]]) -> np.ndarray:
    """Rows (tp, pp, cp, dp, vpp, micro_batch, accounting, ep, etp): each mesh with every (vpp, accounting) x
    micro_batch x (ep, etp) it allows, in that order, mesh by mesh; interleaving needs pp | micro-batches. Built
    as index arithmetic over all meshes at once (a search has hundreds of meshes)."""
    mesh = np.array(found, np.int64).reshape(-1, 4)
    t, p, c, d = mesh.T
    pipes, pipe_at, P = _ragged([[(v, acc) for v, acc in pipeline_candidates(model.n_layers, int(pp))
                                  if space.vpp is None or v in space.vpp] for pp in p], 2)
    mbs, mb_at, M = _ragged([[(mb,) for mb in _allowed(divisors(job.global_batch // int(dd)), space.micro_batch)]
                             for dd in d], 1)
    experts, ex_at, E = _ragged([expert_candidates(model, int(r), space) for r in t * c * d], 2)
    count = P * M * E
    k = np.repeat(np.arange(len(mesh)), count)  # each row's mesh
    local = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)  # its place in the block
    me = (M * E)[k]
    pipe = pipes[pipe_at[k] + local // me]
    mb = mbs[mb_at[k] + (local // E[k]) % M[k], 0]
    ex = experts[ex_at[k] + local % E[k]]
    keep = (pipe[:, 0] == 1) | ((job.global_batch // (d[k] * mb)) % p[k] == 0)
    return np.column_stack([mesh[k], pipe[:, 0], mb, pipe[:, 1], ex])[keep]


def enumerate_layouts(model: ModelConfig, system: System, job: Job, space: Space | None = None) -> Layouts:
    """All valid layouts of `job` as Layouts columns (length 0 never: raises InputError instead)."""
    space = space or Space()
    if job.grad_compression == "powersgd":  # torch DDP's hook: whole replicas only (spec.plan.layout._check_compression)
        if model.moe is not None:
            raise InputError(f"grad_compression = powersgd: {model.name} is a MoE model; PowerSGD (torch DDP's hook) "
                             "runs on dense models; valid: none, bf16")
        narrowed = {}
        for k, v in POWERSGD_LAYOUT.items():
            narrowed[k] = [x for x in (getattr(space, k) or [v]) if x == v]
            if not narrowed[k]:
                raise InputError(f"--only {k}={','.join(map(str, getattr(space, k)))} with grad_compression = "
                                 f"powersgd: PowerSGD (torch DDP's hook) needs {k}={v}; valid: --only {k}={v}, or "
                                 "another grad_compression")
        space = space.model_copy(update=narrowed)
    check_job(model, system, job)
    found = meshes(model, job, space)
    if not found:
        raise InputError(no_mesh_message(model, job, space))
    rcs = space.recompute or list(DEFAULT_RECOMPUTES)
    if "names" in rcs:  # with the job's saved tensors (Plan.recompute_saved: one set for the search)
        check_names_model(model, job.recompute_saved or ())
    elif job.recompute_saved is not None or job.recompute_offloaded is not None:
        raise InputError("recompute_saved / recompute_offloaded are the names policy's, which this search does not "
                         f"try (recompute {', '.join(rcs)}); valid: --only recompute=names (with others if wanted), "
                         "or neither")
    too_narrow = InputError(f"no layout of gpus = {job.gpus} satisfies the --only limits {space.model_dump(exclude_none=True)}")
    base = _mesh_rows(model, job, space, found)
    if not len(base):
        raise too_narrow
    cols = []
    want_sp = set(space.sequence_parallel or [True])
    # sequence parallelism splits each cp rank's tokens over tp, which tp must divide (spec.plan.layout.resolve)
    divides = (job.seq_len // base[:, 2]) % base[:, 0] == 0
    for rc, sp, z, r in itertools.product(rcs, (False, True), space.zero or [0, 1, 2, 3], space.dp_replicate or [1]):
        # tp = 1 has no sequence parallelism to choose: it is always sp=False
        keep = ((base[:, 0] > 1) & divides & (sp in want_sp) if sp
                else (base[:, 0] == 1) | ~divides | (False in want_sp))
        if z > 0:
            keep &= base[:, 3] * base[:, 2] > 1
        keep &= (base[:, 5] * job.seq_len // base[:, 2]) % job.loss_chunks == 0  # the chunks split a micro-batch
        if r > 1:  # hybrid sharding: replicas of a ZeRO group of more than one rank (spec.plan.layout._check_replicate)
            keep &= (z > 0) & (base[:, 3] % r == 0) & (base[:, 3] * base[:, 2] > r)
        if model.moe is not None and not sp:  # experts with tp need sequence parallelism (spec.plan.moe_rules.check_experts)
            keep &= base[:, 0] == 1
        if job.moe_overlap:  # the layouts Megatron-Core overlaps expert-parallel communication in
            keep &= moe_overlap_applies(base[:, 7], base[:, 1], base[:, 4], rc)
        sel = base[keep]
        cols.append((sel, np.full(len(sel), rc), np.full(len(sel), sp), np.full(len(sel), z), np.full(len(sel), r)))
    if sum(len(c[0]) for c in cols) == 0:
        if job.moe_overlap:
            raise InputError(f"no layout of gpus = {job.gpus} runs moe_overlap (it needs ep > 1, vpp > 1 where pp > 1 "
                             "and no full recompute) within the --only limits; valid: other limits, or no moe_overlap")
        raise too_narrow
    sel = np.concatenate([c[0] for c in cols])
    vpp = sel[:, 4]
    return Layouts(tp=sel[:, 0], pp=sel[:, 1], cp=sel[:, 2], dp=sel[:, 3], vpp=vpp, ep=sel[:, 7], etp=sel[:, 8],
                   micro_batch=sel[:, 5], expert_imbalance=job.expert_imbalance,
                   moe_capacity_factor=capacity_of(job), moe_pad_to_capacity=bool(job.moe_pad_to_capacity),
                   moe_dispatcher=job.moe_dispatcher or "alltoall",
                   moe_overlap=job.moe_overlap, cuda_graphs=job.cuda_graphs, fp8_recipe=job.fp8_recipe,
                   recompute=np.concatenate([c[1] for c in cols]), sequence_parallel=np.concatenate([c[2] for c in cols]),
                   zero=np.concatenate([c[3] for c in cols]), schedule=np.where(vpp > 1, "interleaved", "1f1b"),
                   dp_replicate=np.concatenate([c[4] for c in cols]),
                   gpus=job.gpus, global_batch=job.global_batch, seq_len=job.seq_len, precision=job.precision,
                   attention=job.attention, grad_dtype=job.grad_dtype, grad_compression=job.grad_compression,
                   weight_dtype=job.weight_dtype, moment_dtype=job.moment_dtype,
                   powersgd_rank=job.powersgd_rank, overlap_dp_comm=job.overlap_dp_comm,
                   tp_comm_overlap=job.tp_comm_overlap, stack=job.stack, compile=job.compile, lora=job.lora,
                   recompute_saved=job.recompute_saved, recompute_offloaded=job.recompute_offloaded,
                   loss_chunks=job.loss_chunks, optimizer_offload=job.optimizer_offload,
                   account_for_embedding=sel[:, 6] == 1,
                   account_for_loss=sel[:, 6] == 1)
