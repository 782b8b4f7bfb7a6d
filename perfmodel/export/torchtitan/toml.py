"""torchtitan 0.2.2's TOML job config (torchtitan/config/job_config.py JobConfig, read by torchtitan/config/
manager.py ConfigManager.parse_args(["--job.config_file", PATH])): [job], [model], [training], [parallelism],
[activation_checkpoint], [compile] where the plan compiles and, for fp8, the quantize.linear.float8 converter with its [quantize.linear.float8]
table (0.2.2 registers converters by that name: components/quantization/float8.py; the older [float8] table and
"float8" converter name are refused)."""

from __future__ import annotations

import json

from ...spec.plan.file import PlanFile
from ..plan_facts import not_expressed_comments, prediction, summary


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        if v and all(isinstance(x, list) for x in v):
            return "[\n" + "".join(f"    {toml_value(x)},\n" for x in v) + "]"
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def render(pf: PlanFile, s, changes: list[str]) -> str:
    """The TOML text of Settings `s` (perfmodel.export.torchtitan.config.settings)."""
    model = {"name": s.name, "flavor": s.flavor}
    parallelism = dict(s.parallelism, enable_async_tensor_parallel=False, disable_loss_parallel=False)
    ac = {"none": {"mode": "none"}, "full": {"mode": "full"},
          "op": {"mode": "selective", "selective_ac_option": "op"}}.get(s.ac)
    ac = ac or {"mode": "selective", "selective_ac_option": s.ac}
    sections = [("job", {"dump_folder": "./outputs", "description": f"perfmodel plan: {summary(pf)}"}),
                ("model", model), ("training", s.training), ("parallelism", parallelism),
                ("activation_checkpoint", ac)]
    comments = list(s.comments)
    if s.compile:  # job_config.py Compile: enable, components (default model and loss)
        sections.append(("compile", {"enable": True, "components": s.compile}))
    if s.fp8:
        model["converters"] = ["quantize.linear.float8"]
        sections.append(("quantize.linear.float8", {"enable_fsdp_float8_all_gather": False,
                                                    "precompute_float8_dynamic_scale_for_fsdp": False}))
        comments.append("fp8: [model] converters = [\"quantize.linear.float8\"] with [quantize.linear.float8] "
                        "(torchtitan 0.2.x; mid-2025 commits: \"float8\" and [float8]); all-gathers stay bf16 as in "
                        "the plan")
    lines = [f"# torchtitan 0.2.2 TOML job config (torchtitan/config/job_config.py) for: {summary(pf)}",
             f"# {prediction(pf)}",
             *[f"# Plan changed for torchtitan 0.2.2 (then re-predicted): {c}" for c in changes],
             (f"# Launch: torchrun --nproc-per-node {s.per_node} --nnodes {s.nodes} --node-rank $NODE_RANK "
              "--rdzv-endpoint $MASTER_ADDR:29500 -m torchtitan.train --job.config_file THIS_FILE.toml"),
             ("# Not part of the plan (add your own): [optimizer], [lr_scheduler], [training] steps and dataset, "
              "[model] hf_assets_path, [checkpoint]" + ("." if s.compile else ", [compile].")),
             *[f"# {c}" for c in comments]]
    for name, table in sections:
        lines += ["", f"[{name}]", *[f"{k} = {toml_value(v)}" for k, v in table.items()]]
    lines.append("")
    lines += not_expressed_comments("torchtitan 0.2.2", s.notes)
    return "\n".join(lines) + "\n"
