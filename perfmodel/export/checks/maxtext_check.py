"""MaxText's own config loading and validation on an exported config (stdin), for maxtext 0.2.5. Run under a
Python >= 3.12 with JAX (checks.maxtext_env) and PYTHONPATH starting at the unpacked maxtext wheel:
`python -m perfmodel.export.checks.maxtext_check VERSION`. Prints one JSON line {"accepted", "error", "checks"};
exits 0 either way.

What runs (MaxText's functions, in order), on CPU, with no TPU:
- maxtext.configs.pyconfig: the export's YAML loaded over base.yml (_load_config, base_config), with the
  ahead-of-time arguments of its "# aot:" line (compile_topology=v5p-256 compile_topology_num_slices=2, as
  `maxtext.trainers.pre_train.train_compile` takes them), into types.MaxTextConfig: every key known and typed,
  and its validators (the slice looked up in accelerator_to_spec_map, devices = its devices x slices, batch sizes,
  the pipeline asserts, dcn degrees need slices, ZeRO-1 not with fsdp, fp8 not with gradient accumulation, ...).
  pyconfig.initialize catches errors to sys.exit(2) outside tests; the check calls its _initialize_pydantic and
  HyperParameters, which initialize wraps, to read the message instead.
- maxtext.utils.max_utils.fill_unspecified_mesh_axes on the config's ici_parallelism (devices per slice) and
  dcn_parallelism (slices): what maxtext_utils.create_device_mesh calls first, before it asks for devices.
Not run: the mesh from the TPU topology's devices and the model's compile (train_compile.get_topology_mesh and
onwards need libtpu), and remat_policy, which only the decoder reads (layers/nnx_decoders.py get_remat_policy).
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

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported: no accelerator probing


def aot_args(text: str) -> list[str]:
    """The key=value arguments of the export's "# aot: ... train_compile THIS_FILE.yml k=v ..." line."""
    m = re.search(r"^# aot: .*?THIS_FILE\.yml((?: \S+=\S+)+)\s*$", text, re.M)
    if not m:
        raise ValueError("no '# aot: ... THIS_FILE.yml compile_topology=...' line in the config")
    return m.group(1).split()


def _check(text: str, checks: list[str]) -> None:
    from maxtext.configs import pyconfig
    from maxtext.utils import max_utils

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "perfmodel.yml")
        with open(path, "w") as f:
            f.write(text)
        here = os.getcwd()
        os.chdir(tmp)  # base_output_directory defaults to ./maxtext_output
        try:
            checks.append("maxtext.configs.pyconfig._initialize_pydantic (base.yml + the export + "
                          + " ".join(aot_args(text)) + ": types.MaxTextConfig)")
            config = pyconfig.HyperParameters(pyconfig._initialize_pydantic(["", path, *aot_args(text)]))
        finally:
            os.chdir(here)
    checks.append("maxtext.utils.max_utils.fill_unspecified_mesh_axes (ICI, devices per slice)")
    max_utils.fill_unspecified_mesh_axes(list(config.ici_parallelism), config.num_target_devices //
                                         config.num_slices, "ICI")
    checks.append("maxtext.utils.max_utils.fill_unspecified_mesh_axes (DCN, slices)")
    max_utils.fill_unspecified_mesh_axes(list(config.dcn_parallelism), config.num_slices, "DCN")


def _message(e: BaseException) -> str:
    """The framework's message: pydantic's ValidationError reduced to its validator's words."""
    msg = f"{type(e).__name__}: {e}".strip()
    found = re.search(r"Value error, (.*?) \[type=", msg, re.S)
    if found:
        return f"ValidationError: {found.group(1).strip()}"
    return " ".join(msg.split())[:2000]


def check(text: str, version: str) -> dict:
    """{"accepted", "error", "checks"} for one exported config at `version` (perfmodel.export.checks.batch)."""
    checks: list[str] = []
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            _check(text, checks)
        return {"accepted": True, "error": "", "checks": checks}
    except BaseException as e:  # the framework's message, whatever it raised (asserts included)
        return {"accepted": False, "error": _message(e) or traceback.format_exc(limit=2), "checks": checks}


if __name__ == "__main__":
    print(json.dumps(check(sys.stdin.read(), sys.argv[1])))
