"""torchtitan: the plan as the configuration a named torchtitan release reads, then the plan settings it cannot
express. torchtitan 0.3.0 reads a Python config module (a function returning torchtitan.trainer.Trainer.Config,
loaded by torchtitan/config/manager.py ConfigManager with --module / --config); torchtitan 0.2.2 reads a TOML job
config (torchtitan/config/job_config.py JobConfig, loaded by ConfigManager with --job.config_file).

`nearest_plan` (torchtitan.nearest.py) changes what a version cannot run; `torchtitan` writes the rest. The values
both formats share are computed here (`settings`); torchtitan.toml.py and torchtitan.python.py write them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import InputError
from ...spec.plan.file import PlanFile
from ..plan_facts import devices_per_node, hardware_notes, placement_deviations, virtual_stages
from .model import _PARALLELIZE, expert_notes, flavor_layers, llama3_flavor, titan_model
from .nearest import nearest_plan, nth_block

# version label -> the PyPI release whose config code checks it (perfmodel.export.checks.torchtitan_check)
VERSIONS: dict[str, str] = {"0.3.0": "torchtitan==0.3.0", "0.2.2": "torchtitan==0.2.2"}
__all__ = ["VERSIONS", "nearest_plan", "torchtitan", "settings"]


@dataclass
class Settings:
    """The plan in torchtitan's terms, shared by both formats (names as in 0.2.2's JobConfig; 0.3.0's
    ParallelismConfig / TrainingConfig keep them unless torchtitan.python says otherwise)."""

    version: str
    name: str  # model family: llama3, qwen3, deepseek_v3
    flavor: str  # the flavor written (0.3.0 dense without an exact flavor: the base of the "perfmodel" flavor)
    custom_shape: bool  # 0.3.0 dense model written with the plan's own sizes
    parallelism: dict
    training: dict
    ac: str  # none | full | op | an integer N (0.2.2: every Nth block)
    fp8: bool
    per_node: int
    compile: list[str]  # [compile] components ("model", "loss"); empty: not compiled
    nodes: int
    loss_chunks: int = 1  # 0.3.0: ChunkedLossWrapper's num_chunks (1: the loss in one piece)
    comments: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def torchtitan(pf: PlanFile, version: str | None = None, changes: Sequence[str] = ()) -> str:
    """The config text for torchtitan `version` (default the newest): a Python config module for 0.3.0, a TOML
    job config for 0.2.2. `changes` (what nearest_plan changed) are written as comments near the top."""
    version = version or next(iter(VERSIONS))
    s = settings(pf, version)
    if version == "0.3.0":
        from .python import render
    else:
        from .toml import render
    return render(pf, s, list(changes))


def settings(pf: PlanFile, version: str) -> Settings:
    p = pf.plan
    name, flavor, comments, notes = titan_model(pf, version)
    custom = version == "0.3.0" and name == "llama3" and llama3_flavor(pf) is None
    per_node, nodes, launch_notes = devices_per_node(pf)
    s = Settings(version=version, name=name, flavor=flavor, custom_shape=custom, parallelism={}, training={},
                 ac="none", fp8=p.precision in ("fp8", "fp4"), per_node=per_node, nodes=nodes,
                 compile=[] if p.compile == "none" else p.compile.split("+"), loss_chunks=p.loss_chunks,
                 comments=comments, notes=hardware_notes(pf) + notes + launch_notes)
    _data_parallel(pf, s)
    s.parallelism.update(tensor_parallel_degree=p.tp, context_parallel_degree=p.cp, pipeline_parallel_degree=p.pp)
    if pf.model.moe is not None:
        s.parallelism["expert_parallel_degree"] = p.ep
        if version == "0.2.2":
            s.parallelism["expert_tensor_parallel_degree"] = p.etp
        more_comments, more_notes = expert_notes(pf, name, flavor, s.parallelism["data_parallel_shard_degree"],
                                                 version)
        s.comments += more_comments
        s.notes += more_notes
    _pipeline(pf, s)
    _batch(pf, s)
    _ac(pf, s)
    _leftovers(pf, s)
    return s


def _data_parallel(pf: PlanFile, s: Settings) -> None:
    """ZeRO level -> (replicate, shard, reshard_after_forward). zero 0 is data_parallel_replicate_degree = dp:
    0.2.2 applies DDP (replicate()) on a 1-D mesh; 0.3.0 always calls fully_shard, over the (dp_replicate, fsdp)
    mesh, which with shard degree 1 is HSDP with nothing sharded: parameters, gradients and optimizer state
    replicated, gradients all-reduced (models/llama3/parallelize.py). zero 2 / 3 is FSDP2 over dp, resharding
    parameters after forward never (ZeRO-2) or always (ZeRO-3). nearest_plan left no ZeRO-1, and ZeRO-0 only
    where the version replicates."""
    p = pf.plan
    replicate, shard = (p.dp, 1) if p.zero == 0 else (p.dp_replicate, p.dp // p.dp_replicate)
    if p.zero and replicate > 1:
        s.comments.append(f"dp_replicate={replicate}: HSDP, fully_shard over the (dp_replicate {replicate}, "
                          f"dp_shard {shard}) mesh: sharded within a group, gradients all-reduced across groups")
    reshard = {3: "always"}.get(p.zero, "never" if shard > 1 else "default")
    if p.zero == 0 and replicate > 1:
        s.comments.append(f"zero=0: data_parallel_replicate_degree = {replicate}, shard degree 1: plain data "
                          "parallelism" + (" (DDP)" if s.version == "0.2.2" else " (fully_shard over a "
                                           f"({replicate}, 1) mesh: HSDP that shards nothing, gradients all-reduced)"))
    elif p.zero == 2:
        s.comments.append("zero=2: FSDP2 with fsdp_reshard_after_forward = \"never\" keeps parameters gathered "
                          "from forward to backward (ZeRO-2)")
    s.parallelism.update(data_parallel_replicate_degree=replicate, data_parallel_shard_degree=shard,
                         fsdp_reshard_after_forward=reshard)


def _pipeline(pf: PlanFile, s: Settings) -> None:
    """Schedule, micro-batch and the modules of every model part: part c*pp + r runs on pipeline rank r
    (torchtitan/distributed/pipeline_parallel.py, 'loop' stage order). Layer names must exist in the model
    torchtitan builds: a flavor with another layer count gets the plan's split scaled onto its layers."""
    p = pf.plan
    if p.pp == 1:
        return
    s.parallelism["pipeline_parallel_schedule"] = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B",
                                                   "gpipe": "GPipe"}[p.schedule]
    s.parallelism["pipeline_parallel_microbatch_size"] = p.micro_batch
    stages = virtual_stages(pf)
    have = pf.model.n_layers if s.custom_shape else flavor_layers(s.name, s.flavor)
    named = stages if have == pf.model.n_layers else scale_split(stages, have)
    s.parallelism["module_fqns_per_model_part"] = module_fqns(named, "lm_head" if s.version == "0.3.0" else "output")
    s.comments.append(f"module_fqns_per_model_part: {len(named)} model parts (pp={p.pp} x vpp={p.vpp}, part "
                      f"c*pp + r on pipeline rank r), layers per part {named} from stage_layers {pf.stage_layers}")
    if named != stages:
        s.notes.append(f"pipeline split {stages} of {pf.model.n_layers} layers: {s.name} {s.flavor} has {have} "
                       f"layers, so its layers are split in the same proportions, {named} (torchtitan silently "
                       "drops names of layers the model lacks, which would unbalance the stages)")


def scale_split(sizes: list[int], total: int) -> list[int]:
    """`sizes` scaled to sum to `total`: cumulative boundaries rounded, each part at least one layer."""
    k, whole = len(sizes), sum(sizes)
    if total < k:
        raise InputError(f"{total} layers cannot fill {k} pipeline parts")
    bounds, run = [0], 0
    for i, n in enumerate(sizes[:-1], start=1):
        run += n
        b = round(run * total / whole)
        bounds.append(min(max(b, bounds[-1] + 1), total - (k - i)))
    bounds.append(total)
    return [b - a for a, b in zip(bounds, bounds[1:])]


def module_fqns(sizes: list[int], output: str) -> list[list[str]]:
    """Module names of each part: the embedding with the first, final norm and output projection with the last."""
    parts, start = [], 0
    for i, n in enumerate(sizes):
        part = [f"layers.{j}" for j in range(start, start + n)]
        start += n
        parts.append((["tok_embeddings"] if i == 0 else []) + part + (["norm", output] if i == len(sizes) - 1
                                                                       else []))
    return parts


def _batch(pf: PlanFile, s: Settings) -> None:
    """local_batch_size is the batch of one data-parallel rank per gradient-accumulation step: with pp it is the
    rank's whole share (global / dp), split into local / micro_batch pipeline micro-batches; without pp it is
    the micro-batch, and torchtitan accumulates global / (local x dp) steps (trainer.py)."""
    p = pf.plan
    local = p.global_batch // p.dp if p.pp > 1 else p.micro_batch
    accumulation = p.global_batch // (local * p.dp)
    s.training.update(local_batch_size=local, global_batch_size=p.global_batch, seq_len=p.seq_len,
                      mixed_precision_param="bfloat16", mixed_precision_reduce="float32")
    s.comments.append(f"local_batch_size {local} x dp {p.dp} x gradient accumulation {accumulation} = "
                      f"global_batch_size {p.global_batch}"
                      + (f"; {local // p.micro_batch} pipeline micro-batches of {p.micro_batch}" if p.pp > 1 else "")
                      + f"; tokens per micro-batch {p.micro_batch} x {p.seq_len} = {p.micro_batch * p.seq_len}")


def _ac(pf: PlanFile, s: Settings) -> None:
    """Recompute policy -> torchtitan's activation checkpointing (distributed/activation_checkpoint.py): none;
    per-op selective (perfmodel's per-op); full (every block its own checkpoint), or 0.2.2's selective "N" (every
    Nth block of a chunk whole, the others not at all) for Megatron's block method. nearest_plan left only these."""
    p = pf.plan
    if p.recompute == "per-op":
        s.ac = "op"
    elif p.recompute == "full":
        n, chunks = p.recompute_num_layers or 1, virtual_stages(pf)
        every = nth_block(chunks, n, s.version) if p.recompute_method == "block" and max(chunks) > n else None
        s.ac = str(every) if every else "full"
        if every:
            s.comments.append(f"selective_ac_option = \"{every}\": every {every}th block whole, {n} of each chunk's "
                              f"{chunks[0]}: the plan's count (Megatron-LM --recompute-method block), other blocks")


def _leftovers(pf: PlanFile, s: Settings) -> None:
    """Placements no torchtitan setting carries (nearest_plan changed every plan setting it cannot express)."""
    s.notes += [f"per-operator placement of {d} is not torchtitan's {'llama' if s.name == 'llama3' else s.name} "
                f"tensor-parallel plan ({_PARALLELIZE[s.name]} applies a fixed plan)"
                for d in placement_deviations(pf)]
