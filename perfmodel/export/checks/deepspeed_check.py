"""DeepSpeed's own checks of an exported config (`perfmodel export --to deepspeed`), for one DeepSpeed release.

Runs with PYTHONPATH starting with the unpacked DeepSpeed sdist (export.checks.releases.run_checks), as
`check(text, VERSION)` or `python -m perfmodel.export.checks.deepspeed_check VERSION` with the JSON on stdin.
Two stages, both DeepSpeed's code (deepspeed/runtime/config.py, runtime/engine.py, runtime/pipe/engine.py of
0.16.9 and 0.19.8):

1. At the launch's scale ("_perfmodel_launch"): DeepSpeedConfig(<the file>, mpu) as deepspeed.initialize builds
   it, so its batch assertion (train_batch_size = micro x accumulation x data-parallel size) and
   _do_sanity_check run with the data-parallel size DeepSpeed derives. With a pipeline, initialize passes
   PipelineModule.mpu(), whose data size is that of the launch's PipeModelDataParallelTopology (built here with
   DeepSpeed's class). A Megatron-DeepSpeed launch passes its own mpu: a stand-in with the launch's
   data_parallel_size. With neither, initialize passes no mpu and DeepSpeedConfig counts every rank of
   dist.get_world_size() as data-parallel, AutoTP included; that world size is the launch's, given to
   deepspeed.comm for the call (one process cannot own 512 ranks).
2. At world size 1 on CPU (gloo): deepspeed.initialize of a tiny model (a PipelineModule when the launch has a
   pipeline) with the same config, its batch rescaled to one rank, so DeepSpeedEngine._do_sanity_check,
   _do_optimizer_sanity_check (the precision / ZeRO stage / grad_accum_dtype mix) and PipelineEngine's ZeRO
   assertion run for real. The AutoTP section is dropped there (AutoTP's mesh needs autotp_size ranks); its
   section is validated by stage 1 (get_tensor_parallel_config).

The accelerator reports fp16 support and the CPU shared-memory all-reduce kernel is not built (the exports
target GPUs; neither holds a config check, and the kernel's JIT build takes minutes).
`check(text, version)` returns {"accepted", "error", "checks"} (perfmodel.export.checks.batch calls it); run
as a module it prints that as one JSON line and exits 0 either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile

_CHECKS: list[str] = []


def _launch(cfg: dict) -> tuple[int, int, int]:
    """World size, pipeline stages and model-parallel ranks per stage from "_perfmodel_launch"."""
    launch = cfg.get("_perfmodel_launch")
    if not isinstance(launch, dict):
        raise ValueError("the config has no \"_perfmodel_launch\" object (world_size, pipeline_stages): "
                         "the launch it was written for is unknown")
    return (int(launch["world_size"]), int(launch.get("pipeline_stages", 1)),
            int(launch.get("model_parallel_size", 1)))


class _MegatronMpu:
    """The one size DeepSpeedConfig asks of a Megatron-DeepSpeed mpu (not DeepSpeed code: the launch's sizes)."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


class _GridSizes:
    """The sizes PipelineParallelGrid (deepspeed/runtime/pipe/topology.py) reads off its topology; the grid
    itself would create a process group per rank of the launch."""

    def __init__(self, topo):
        self.topo = topo

    def get_data_parallel_world_size(self):
        return self.topo.get_dim("data")

    def get_model_parallel_world_size(self):
        return self.topo.get_dim("model") if "model" in self.topo.get_axis_names() else 1

    def get_pipe_parallel_world_size(self):
        return self.topo.get_dim("pipe")


@contextlib.contextmanager
def _world(size: int):
    """deepspeed.comm reporting the launch's world size, rank 0, while DeepSpeedConfig reads it."""
    from deepspeed import comm
    saved = comm.get_world_size, comm.get_rank
    comm.get_world_size, comm.get_rank = (lambda group=None: size), (lambda group=None: 0)
    try:
        yield
    finally:
        comm.get_world_size, comm.get_rank = saved


def check_at_scale(path: str, cfg: dict) -> None:
    """Stage 1: DeepSpeedConfig at the launch's world size and pipeline topology."""
    from deepspeed.runtime.config import DeepSpeedConfig
    world, pp, mp = _launch(cfg)
    mpu = None
    if pp > 1:
        from deepspeed.runtime.pipe.topology import PipeDataParallelTopology, PipeModelDataParallelTopology
        if world % (pp * mp):
            raise ValueError(f"world_size {world} is not a multiple of pipeline_stages x model_parallel_size")
        dp = world // (pp * mp)
        topo = (PipeModelDataParallelTopology(num_pp=pp, num_mp=mp, num_dp=dp) if mp > 1
                else PipeDataParallelTopology(num_pp=pp, num_dp=dp))
        mpu = _GridSizes(topo)
        _CHECKS.append(f"deepspeed.runtime.pipe.topology.{type(topo).__name__}")
    elif "data_parallel_size" in cfg["_perfmodel_launch"]:
        mpu = _MegatronMpu(int(cfg["_perfmodel_launch"]["data_parallel_size"]))
    with _world(world):
        DeepSpeedConfig(path, mpu=mpu)
    _CHECKS.extend(["deepspeed.runtime.config.DeepSpeedConfig._configure_train_batch_size (_batch_assertion)",
                    "deepspeed.runtime.config.DeepSpeedConfig._do_sanity_check",
                    "deepspeed.runtime.tensor_parallel.get_tensor_parallel_config"])


def _one_rank(cfg: dict) -> dict:
    """The config at world size 1: the batch of one data-parallel rank, no AutoTP mesh."""
    one = {k: v for k, v in cfg.items() if k != "tensor_parallel"}
    micro, gas = cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]
    one["train_batch_size"] = micro * gas
    return one


def check_engine(cfg: dict) -> None:
    """Stage 2: deepspeed.initialize on CPU, world size 1, a tiny model and a torch AdamW."""
    import torch
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    get_accelerator().is_fp16_supported = lambda: True
    import deepspeed.comm.torch  # noqa: F401 (deepspeed.comm's attribute `torch` is torch itself)
    # a JIT-compiled CPU all-reduce kernel, with no check in it
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    _, pp, _ = _launch(cfg)
    deepspeed.init_distributed(dist_backend="gloo")  # PipelineModule asks for the world size when built
    if pp > 1:
        from deepspeed.pipe import PipelineModule
        model = PipelineModule(layers=[torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)], num_stages=1,
                               loss_fn=torch.nn.MSELoss())
    else:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    deepspeed.initialize(model=model, optimizer=opt, config=_one_rank(cfg), dist_init_required=True)
    _CHECKS.extend(["deepspeed.initialize", "deepspeed.runtime.engine.DeepSpeedEngine._do_sanity_check",
                    "deepspeed.runtime.engine.DeepSpeedEngine._do_optimizer_sanity_check"])
    if pp > 1:
        _CHECKS.append("deepspeed.runtime.pipe.engine.PipelineEngine.__init__ (ZeRO stage < 2)")


def _setup() -> None:
    """One CPU process of world size 1 (set once: batch.py runs many checks in one interpreter)."""
    if os.environ.get("PERFMODEL_DS_CHECK_WORLD") == "1":
        return
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=_free_port(), PERFMODEL_DS_CHECK_WORLD="1")


def check(text: str, version: str) -> dict:
    """`text` (an export for DeepSpeed `version`) through the DeepSpeed on PYTHONPATH: {accepted, error, checks}."""
    _CHECKS.clear()
    _setup()
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout
        try:
            import deepspeed
            if deepspeed.__version__.strip() != version:
                raise RuntimeError(f"the DeepSpeed on PYTHONPATH is {deepspeed.__version__}, not {version}")
            cfg = json.loads(text)
            _CHECKS.append("json.loads")
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                f.write(text)  # DeepSpeedConfig reads a path with hjson, rejecting duplicate keys
            try:
                check_at_scale(f.name, cfg)
            finally:
                os.unlink(f.name)
            check_engine(cfg)
        except Exception as e:  # the framework's refusal, in its own words
            return {"accepted": False, "error": f"{type(e).__name__}: {e}", "checks": list(_CHECKS)}
    return {"accepted": True, "error": "", "checks": list(_CHECKS)}


if __name__ == "__main__":
    print(json.dumps(check(sys.stdin.read(), sys.argv[1])), flush=True)
    os._exit(0)  # as batch.py: no interpreter teardown once the answer is out
