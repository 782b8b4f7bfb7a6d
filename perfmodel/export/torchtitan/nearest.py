"""The nearest plan torchtitan can run: plan settings a torchtitan version has no way to express, changed to what
it does instead (the orchestrator re-predicts the changed plan). Model-level facts are not changed here; the
exporter lists them as not expressed.

Sources: torchtitan 0.2.2 (torchtitan/config/job_config.py, distributed/parallel_dims.py, models/llama3/infra/
parallelize.py, models/qwen3/__init__.py) and torchtitan 0.3.0 (torchtitan/config/configs.py, distributed/
parallel_dims.py, distributed/activation_checkpoint.py, models/llama3/parallelize.py)."""

from __future__ import annotations

from ...spec.plan.file import PlanFile
from ..plan_facts import grouped_dispatch, plan_change, virtual_stages
from .model import family


def nearest_plan(pf: PlanFile, version: str) -> tuple[dict, list[str]]:
    """(plan-field updates, one line per change) that make the plan expressible by torchtitan `version`."""
    updates: dict = {}
    lines: list[str] = []
    for rule in (_zero, _recompute, _loss, _offload, _precision, _tensor_parallel, _experts, _pipeline):
        rule(pf, version, updates, lines)
    return updates, lines


def _loss(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """torchtitan 0.2.2's trainer computes the LM head and loss over the whole micro-batch (no chunked loss setting);
    0.3.0 has ChunkedLossWrapper (num_chunks), which the export writes."""
    if pf.plan.loss_chunks > 1 and version == "0.2.2":
        updates["loss_chunks"] = 1
        lines.append(f"loss_chunks {pf.plan.loss_chunks} -> 1: torchtitan {version} computes the LM head and loss "
                     "in one piece")


def _offload(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """torchtitan's enable_cpu_offload (FSDP2's CPUOffloadPolicy) keeps parameters, gradients and the optimizer
    state on the host and steps Adam on its CPUs, which this model does not price."""
    if pf.plan.optimizer_offload:
        plan_change(pf, updates, lines, "optimizer_offload", False, f"torchtitan {version}'s enable_cpu_offload (FSDP2 "
                    "CPUOffloadPolicy) runs Adam on the host's CPUs, which this model does not price "
                    "(Plan.optimizer_offload copies the state to the device for the update); the state stays on the "
                    "device")


def _zero(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """FSDP2 (fully_shard) always shards gradients with the parameters, so ZeRO-1 has no torchtitan form; ZeRO-0
    is DDP, which 0.2.2 applies only on a 1-D mesh (parallelize_llama: 'DDP has not supported > 1D parallelism')
    and 0.3.0 as HSDP with shard degree 1 (data_parallel_replicate_degree = dp), except that cp ranks always
    shard (ParallelDims.build_mesh: fsdp = dp_shard x cp) and ep borrows its ranks from dp_shard."""
    p = pf.plan
    if p.zero == 1:
        updates["zero"] = 2
        lines.append("zero 1 -> 2: torchtitan's FSDP2 shards gradients together with the optimizer state (no "
                     "ZeRO-1); fsdp_reshard_after_forward = \"never\" keeps the parameters gathered from forward to "
                     "backward, which is ZeRO-2")
        return
    if p.zero != 0:
        return
    blockers = replicate_blockers(pf, version)
    why = ("0.2.2 applies DDP (data_parallel_replicate_degree) only on a 1-D data-parallel mesh" if version == "0.2.2"
           else "0.3.0 always shards over the cp ranks (fsdp = dp_shard x cp) and takes ep's ranks from dp_shard")
    if blockers:
        updates["zero"] = 2
        lines.append(f"zero 0 -> 2 with {', '.join(blockers)}: torchtitan {why}; FSDP2 with "
                     "fsdp_reshard_after_forward = \"never\" (ZeRO-2) is the nearest")


def replicate_blockers(pf: PlanFile, version: str) -> list[str]:
    """The plan's degrees that keep torchtitan `version` from replicating (ZeRO-0) rather than sharding: tp, pp, cp
    and ep on 0.2.2 (DDP on a 1-D mesh only), cp and ep on 0.3.0; e.g. ["tp=2"]."""
    p = pf.plan
    axes = ("tp", "pp", "cp", "ep") if version == "0.2.2" else ("cp", "ep")
    return [f"{k}={getattr(p, k)}" for k in axes if getattr(p, k) > 1]


def nth_block(chunks: list[int], n: int, version: str) -> int | None:
    """0.2.2's selective_ac_option = "N" (every Nth block of a chunk checkpointed whole) that recomputes n blocks
    of every chunk, as Megatron's --recompute-method block n does: N = chunk / n for equal chunks a multiple of n;
    None when there is none (0.3.0 has no such option)."""
    if version == "0.2.2" and len(set(chunks)) == 1 and chunks[0] % n == 0:
        return chunks[0] // n
    return None


def _recompute(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """torchtitan's policies (distributed/activation_checkpoint.py): per-op selective AC (perfmodel's per-op),
    full AC of every block; 0.2.2 also checkpoints every Nth block whole (selective_ac_option = "N")."""
    p = pf.plan
    if p.recompute == "selective":
        updates["recompute"] = "per-op"
        updates["recompute_modules"] = None
        lines.append(f"recompute selective ({', '.join(p.recompute_modules or ['core_attn'])}) -> per-op: "
                     "torchtitan checkpoints whole blocks or per operator, not chosen submodules; its per-op "
                     "policy (SelectiveAC) saves matmul, attention and reduce-scatter outputs, recomputing every "
                     "second matmul")
    if p.recompute == "names":
        updates.update(recompute="per-op" if p.recompute_saved else "full", recompute_saved=None,
                       recompute_offloaded=None)
        lines.append(f"recompute names (saved {p.recompute_saved or []}) -> {updates['recompute']}: torchtitan has no "
                     "per-tensor save policy; " + ("its per-op policy saves matmul and attention outputs"
                                                   if p.recompute_saved else "nothing saved is full recompute")
                     + (f"; nothing offloaded to the host ({', '.join(p.recompute_offloaded)} stay on the device)"
                        if p.recompute_offloaded else ""))
        return
    if p.recompute != "full":
        return
    n = p.recompute_num_layers or 1
    if p.recompute_method == "uniform" and n > 1:
        updates["recompute_num_layers"] = None
        lines.append(f"recompute_num_layers {n} -> 1 (uniform): torchtitan's full AC checkpoints each block on its "
                     f"own, not {n} consecutive blocks as one")
    if p.recompute_method == "block":
        chunks = virtual_stages(pf)
        if not (all(c <= n for c in chunks) or nth_block(chunks, n, version)):
            updates.update(recompute_method="uniform", recompute_num_layers=None)
            lines.append(f"recompute block {n} -> every block: torchtitan {version} cannot checkpoint the first {n} "
                         f"blocks of each pipeline chunk (chunks {chunks})"
                         + ("; selective_ac_option = \"N\" (every Nth block) matches only equal chunks a multiple "
                            f"of {n}" if version == "0.2.2" else "; 0.3.0 has full or per-op AC only"))


def _precision(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """mixed_precision_param is Literal["bfloat16", "float32"] (both versions); low precision is a converter:
    float8 (0.2.2 quantize.linear.float8, 0.3.0 Float8LinearConverter). mixed_precision_reduce is
    Literal["float32"]; FSDP2 / replicate overlap their collectives always; the models call fused attention."""
    p = pf.plan
    for when, field, new, why in (
            (p.precision == "fp16", "precision", "bf16", "torchtitan's mixed_precision_param is bfloat16 or float32 "
             "(no fp16 loss scaling)"),
            (p.precision == "fp4", "precision", "fp8", "this exporter writes torchtitan's float8 converter (no FP4 "
             "recipe mapped)"),
            (p.precision == "int8", "precision", "bf16", "torchtitan trains no int8 GEMMs (int8 training is JAX's "
             "AQT); bfloat16 is its unquantised recipe"),
            (p.grad_dtype == "bf16", "grad_dtype", "fp32", "torchtitan's mixed_precision_reduce accepts only float32"),
            (p.weight_dtype == "bf16", "weight_dtype", "fp32", "torchtitan builds the model in float32 (train.py "
             "to_empty, v0.2.2 73a0e69); FSDP2's MixedPrecisionPolicy param_dtype (mixed_precision_param) casts only "
             "the gathered copy, so the sharded float32 parameter is the master"),
            (p.moment_dtype == "bf16", "moment_dtype", "fp32", "torchtitan's AdamW keeps its moments in the "
             "parameters' dtype (torch.optim.AdamW: zeros_like the float32 parameter); no setting narrows them"),
            (p.grad_compression != "none", "grad_compression", "none", "torchtitan reduces gradients in float32, "
             "uncompressed"),
            (not p.overlap_dp_comm, "overlap_dp_comm", True, "torchtitan's FSDP2 overlaps its collectives with "
             "compute (no setting turns that off)"),
            (p.attention == "unfused", "attention", "flash", "torchtitan's models call fused attention kernels "
             "(SDPA / FlexAttention)")):
        if when:
            plan_change(pf, updates, lines, field, new, why)


def _tensor_parallel(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """0.2.2 applies sequence parallelism whenever tp > 1; 0.3.0 has parallelism.enable_sequence_parallel."""
    p = pf.plan
    if version == "0.2.2" and p.tp > 1 and not p.sequence_parallel:
        updates["sequence_parallel"] = True
        lines.append(f"sequence_parallel false -> true with tp={p.tp}: torchtitan 0.2.2 always applies sequence "
                     "parallelism with tensor parallelism (0.3.0: enable_sequence_parallel)")


def _experts(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """0.2.2: expert_tensor_parallel_degree is 1 or tp (ParallelDims._validate); at ep = 1 experts split over tp.
    0.3.0 has no expert tensor parallelism setting: experts are whole on their ep rank (etp = 1), and split over
    tp at ep = 1. Tokens travel by all-to-all; no setting overlaps them with another micro-batch."""
    p = pf.plan
    if pf.model.moe is None:
        return
    grouped_dispatch(pf, updates, lines, f"torchtitan {version}")
    want = p.tp if p.ep == 1 else (1 if version == "0.3.0" or p.etp not in (1, p.tp) else p.etp)
    if p.etp != want:
        updates["etp"] = want
        lines.append(f"etp {p.etp} -> {want}: torchtitan {version} splits experts over tp at ep = 1"
                     + (" and keeps each expert whole at ep > 1 (no expert_tensor_parallel_degree)" if
                        version == "0.3.0" else " and takes expert_tensor_parallel_degree 1 or tp at ep > 1"))
    if p.moe_dispatcher != "alltoall":
        plan_change(pf, updates, lines, "moe_dispatcher", "alltoall", "torchtitan sends tokens to experts by "
                    "all-to-all")
    if p.moe_overlap:
        plan_change(pf, updates, lines, "moe_overlap", False, "torchtitan has no setting that runs one "
                    "micro-batch's all-to-alls beside another's compute")


def _pipeline(pf: PlanFile, version: str, updates: dict, lines: list[str]) -> None:
    """torchtitan 0.2.2's qwen3 TrainSpec has pipelining_fn = None: it refuses pipeline_parallel_degree > 1;
    the pipeline's ranks go to data parallelism instead."""
    p = pf.plan
    if version == "0.2.2" and p.pp > 1 and family(pf) == "qwen3":
        updates.update(pp=1, vpp=1, dp=p.dp * p.pp, schedule=None, stage_layers=None, first_stage_layers=None,
                       last_stage_layers=None)
        lines.append(f"pp {p.pp} -> 1 (dp {p.dp} -> {p.dp * p.pp}): torchtitan 0.2.2's qwen3 cannot pipeline "
                     "(its TrainSpec's pipelining_fn is None)")
