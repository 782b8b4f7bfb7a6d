"""The keys older torchtitan TOML job configs spell otherwise, read under today's names (the ledger keeps the key as
written and says which it is today), and what those versions did otherwise with the same words.

torchtitan's JobConfig moved its keys twice in 2025 (pytorch/torchtitan history):
- 785c34c9 (2025-03-18, #980): the data / tensor parallel degrees, loss parallelism and FSDP resharding moved from
  [training] to [parallelism], and pipeline / context parallelism and async tensor parallelism from [experimental];
  3cabf56b (2025-02-20) torchtitan/config_manager.py is the older spelling.
- 8570415c (2025-06-05, #1238, gradient accumulation): training.batch_size became training.local_batch_size (one dp
  rank's batch, then split into accumulation steps by global_batch_size); before, batch_size was one dp rank's batch
  per step, and with pipelining experimental.pipeline_parallel_microbatches counted its micro-batches (default: the
  number of pipeline stages).
- training.compile (a switch) compiled each transformer block; bbb1b616 (2025-04-02, #1033) compiled the loss with it
  too (components/loss.py build_cross_entropy_loss); 08b8b244 (2025-08-20, #1608) made it [compile] enable /
  components.
- [model] converters was a comma-separated string (3cabf56b config_manager.py string_list) before it was a list.
"""

from __future__ import annotations

from dataclasses import replace

_MOVED = {  # as written -> today's key (785c34c9 and 8570415c)
    **{f"training.{k}": f"parallelism.{k}" for k in (
        "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
        "disable_loss_parallel", "fsdp_reshard_after_forward")},
    **{f"experimental.{k}": f"parallelism.{k}" for k in (
        "enable_async_tensor_parallel", "pipeline_parallel_degree", "pipeline_parallel_split_points",
        "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatches",
        "context_parallel_degree", "context_parallel_rotate_method", "enable_compiled_autograd")},
    "training.batch_size": "training.local_batch_size",
    "training.compile": "compile.enable",
}


def respell(entries: list) -> tuple[list, dict]:
    """The entries under today's keys (Entry.stated: the key as written), and how this version differs in what the
    keys mean: {"compile_parts": the components training.compile compiled, "microbatch_count": True where pipeline
    micro-batches are counted (experimental.pipeline_parallel_microbatches) rather than sized, "stale": an old
    spelling stated beside today's (a version that has today's key reads only that one) -> today's key}."""
    written = {e.key for e in entries}
    before_parallelism = any(k in _MOVED and _MOVED[k].startswith("parallelism.") for k in written)
    era: dict = {"stale": {k: _MOVED[k] for k in written if k in _MOVED and _MOVED[k] in written}}
    if "training.compile" in written and "training.compile" not in era["stale"]:
        era["compile_parts"] = (["model"], "training.compile before bbb1b616 (2025-04-02) compiled the blocks only") \
            if before_parallelism else (["model", "loss"], "training.compile from bbb1b616 (2025-04-02) to 08b8b244 "
                                        "(2025-08-20) compiled the blocks and the loss")
    if "training.batch_size" in written and "training.batch_size" not in era["stale"]:
        era["microbatch_count"] = True
    out = []
    for e in entries:
        if e.key in _MOVED and e.key not in era["stale"]:
            e = replace(e, key=_MOVED[e.key], stated=e.key)
        if e.key == "model.converters" and isinstance(e.value, str):
            e = replace(e, value=[s.strip() for s in e.value.split(",") if s.strip()], written=e.value)
        out.append(e)
    return out, era
