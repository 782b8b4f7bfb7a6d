"""torchtitan's own config loading and validation on an exported config (stdin), for torchtitan 0.3.0 (a Python
config module) or 0.2.2 (a TOML job config). Run with PYTHONPATH starting at the unpacked release:
`python -m perfmodel.export.checks.torchtitan_check VERSION`. Prints one JSON line {"accepted", "error",
"checks"}; exits 0 either way.

What runs (torchtitan's functions, in order):
- 0.3.0: ConfigManager().parse_args(["--module", ..., "--config", ...]) (torchtitan/config/manager.py: imports
  the module, calls the config function, tyro, Trainer.Config.__post_init__); ParallelDims.from_config with the
  launch line's world size; the model config's update_from_config and build on the meta device (what
  Trainer.__init__ does before any GPU work); _get_pipeline_metadata and get_schedule_class; every
  module_fqns_per_model_part name against the built model; ParallelDims.build_mesh over torch's "fake" process
  group (init_fake_mode, the dry-run backend torchtitan ships), which checks the ep / efsdp mesh sizes.
- 0.2.2: ConfigManager().parse_args(["--job.config_file", PATH]) (JobConfig, tyro, _validate_config);
  get_train_spec(name).model_args[flavor]; ParallelDims; model_args.update_from_config; the model built on meta;
  pipelining_fn present when pp > 1; module names; build_mesh over the fake process group; the model converters.
The trainer's batch assertions (trainer.py: global_batch_size % (local_batch_size x dp) == 0, seq_len divisible
by the sequence / context parallel degrees) sit inside Trainer.__init__ with distributed setup around them; they
are restated here from that source, named "trainer batch arithmetic".
Float8 conversion checks the GPU's compute capability (SM89+); on a machine without one that check is answered
as an SM89+ GPU would (has_cuda_capability), since it is about the hardware, not the config.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import traceback


def check(text: str, version: str) -> dict:
    """{"accepted", "error", "checks"} for one exported config at `version` (perfmodel.export.checks.batch)."""
    checks: list[str] = []
    sys.modules.pop("perfmodel_plan", None)  # a batch imports one exported module after another under this name
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            (_check_030 if version == "0.3.0" else _check_022)(text, checks)
        return {"accepted": True, "error": "", "checks": checks}
    except BaseException as e:  # the framework's message, whatever it raised (tyro exits with SystemExit)
        msg = f"{type(e).__name__}: {e}".strip()
        if isinstance(e, SystemExit):
            msg = f"tyro/argparse refused the config (exit {e.code})"
        return {"accepted": False, "error": msg or traceback.format_exc(limit=2), "checks": checks}


def main() -> None:
    print(json.dumps(check(sys.stdin.read(), sys.argv[1])))


def world_size(text: str) -> int:
    """Processes of the launch line: --nproc-per-node x --nnodes."""
    m = re.search(r"--nproc-per-node (\d+) --nnodes (\d+)", text)
    if not m:
        raise ValueError("no launch line (--nproc-per-node N --nnodes M) in the config")
    return int(m.group(1)) * int(m.group(2))


def _assume_sm89() -> None:
    import torchtitan.tools.utils as tools
    tools.has_cuda_capability = lambda major, minor: True
    for mod in ("torchtitan.components.quantization.float8",):
        with contextlib.suppress(ImportError):
            __import__(mod, fromlist=["x"]).has_cuda_capability = lambda major, minor: True


def _batch(training, dp: int, tp: int, cp: int, sp: bool, checks: list[str]) -> None:
    checks.append("trainer batch arithmetic")
    local, glob = training.local_batch_size, training.global_batch_size
    if glob > 0 and glob % (local * dp):
        raise AssertionError(f"global batch size must be multiple of local batch size times data-parallel degree "
                             f"({glob} % ({local} * {dp}) != 0)")
    divisor = (tp if sp else 1) * (2 * cp if cp > 1 else 1)
    if training.seq_len % divisor:
        raise ValueError(f"Training sequence length ({training.seq_len}) must be divisible by {divisor}")


def _fqns(model, parts, pp: int, checks: list[str]) -> None:
    checks.append("module_fqns_per_model_part vs model.get_submodule")
    if parts is None:
        return
    for part in parts:
        for name in part:
            model.get_submodule(name)  # AttributeError names the missing module
    named = [n for part in parts for n in part if n.startswith("layers.")]
    if len(named) != len(model.layers):
        raise ValueError(f"module_fqns_per_model_part names {len(named)} of the model's {len(model.layers)} layers")
    if len(parts) % pp:
        raise ValueError(f"{len(parts)} model parts is not a multiple of pipeline_parallel_degree {pp}")


def _mesh(parallel_dims, world: int, checks: list[str]) -> None:
    import torch.distributed as dist
    from torchtitan.distributed.utils import init_fake_mode

    init_fake_mode(world)
    checks.append("init_fake_mode")
    try:
        parallel_dims.build_mesh()
        checks.append("ParallelDims.build_mesh")
    finally:
        dist.destroy_process_group()


def _check_030(text: str, checks: list[str]) -> None:
    import torch
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.pipeline_parallel import _get_pipeline_metadata
    from torch.distributed.pipelining.schedules import get_schedule_class

    _assume_sm89()
    world = world_size(text)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "perfmodel_plan.py"), "w") as f:
            f.write(text)
        sys.path.insert(0, tmp)
        cfg = ConfigManager().parse_args(["--module", "perfmodel_plan", "--config", "perfmodel_plan"])
    checks.append("ConfigManager.parse_args")
    par = cfg.parallelism
    dims = ParallelDims.from_config(par, world)
    checks.append("ParallelDims.from_config")
    _batch(cfg.training, dims.dp_replicate * dims.dp_shard, dims.tp, dims.cp, par.enable_sequence_parallel, checks)
    model_config = cfg.model_spec.model
    model_config.update_from_config(config=cfg)
    checks.append("model_config.update_from_config")
    with torch.device("meta"):
        model = model_config.build()
    checks.append("model_config.build (meta)")
    if dims.pp > 1:
        get_schedule_class(par.pipeline_parallel_schedule)
        _get_pipeline_metadata(dims, par, model_config)
        checks += ["get_schedule_class", "_get_pipeline_metadata"]
        if cfg.model_spec.pipelining_fn is None:
            raise RuntimeError(f"Pipeline Parallel is enabled but {cfg.model_spec.name} does not support pipelining")
        _fqns(model, par.module_fqns_per_model_part, dims.pp, checks)
    _mesh(dims, world, checks)


def _check_022(text: str, checks: list[str]) -> None:
    import torch
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec
    from torch.distributed.pipelining.schedules import get_schedule_class

    _assume_sm89()
    world = world_size(text)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    try:
        cfg = ConfigManager().parse_args(["--job.config_file", f.name])
    finally:
        os.unlink(f.name)
    checks.append("ConfigManager.parse_args")
    spec = get_train_spec(cfg.model.name)
    model_args = spec.model_args[cfg.model.flavor]
    checks.append("get_train_spec().model_args[flavor]")
    par = cfg.parallelism
    dims = ParallelDims(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
                        cp=par.context_parallel_degree, tp=par.tensor_parallel_degree,
                        pp=par.pipeline_parallel_degree, ep=par.expert_parallel_degree,
                        etp=par.expert_tensor_parallel_degree, world_size=world)
    checks.append("ParallelDims")
    _batch(cfg.training, dims.dp_replicate * dims.dp_shard, dims.tp, dims.cp, dims.tp > 1, checks)
    model_args.update_from_config(cfg)
    checks.append("model_args.update_from_config")
    with torch.device("meta"):
        model = spec.model_cls(model_args)
    checks.append("model_cls (meta)")
    if dims.pp > 1:
        if spec.pipelining_fn is None:
            raise RuntimeError(f"Pipeline Parallel is enabled but {cfg.model.name} does not support pipelining")
        get_schedule_class(par.pipeline_parallel_schedule)
        checks.append("get_schedule_class")
        _fqns(model, par.module_fqns_per_model_part, dims.pp, checks)
    _mesh(dims, world, checks)
    if cfg.model.converters:
        from torchtitan.protocols.model_converter import build_model_converters
        converters = build_model_converters(cfg, dims)
        converters.convert(model)
        checks.append("build_model_converters + convert")


if __name__ == "__main__":
    main()
