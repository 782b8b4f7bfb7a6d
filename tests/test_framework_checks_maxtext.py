"""MaxText's own config code (perfmodel.export.checks.maxtext_check) on `perfmodel export --to maxtext`: every plan of
the MaxText spread (TPU v5p / v6e / v7 slices and multislice, fsdp x tensor x data, context, stage, expert, fp8, one
GPU job) is accepted by maxtext 0.2.5's pyconfig / types.MaxTextConfig and its mesh check; deliberately wrong
configs are refused with MaxText's own messages.

Needs the MaxText interpreter (Python >= 3.12 with JAX: `python -m perfmodel.export.checks.maxtext_env`, or
PERFMODEL_MAXTEXT_PYTHON); skipped where there is none, unless PERFMODEL_MAXTEXT_TESTS=required (CI), which makes
its absence a failure. Downloads the maxtext 0.2.5 wheel from PyPI once (releases.fetch)."""

from __future__ import annotations

import functools
import os

import pytest

from perfmodel.export.checks.releases import HOW_MAXTEXT, maxtext_env_dir, maxtext_python, run_checks
from perfmodel.export.checks.spread import MAXTEXT_SPREAD, maxtext_plan_file
from perfmodel.export.maxtext.config import VERSIONS
from perfmodel.export.nearest import export_plan

REQUIRED = os.environ.get("PERFMODEL_MAXTEXT_TESTS") == "required"
if maxtext_python() is None:
    if REQUIRED:
        raise RuntimeError(f"MaxText checks required: no interpreter (PERFMODEL_MAXTEXT_PYTHON unset, no "
                           f"{maxtext_env_dir()}); make it with {HOW_MAXTEXT}")
    pytest.skip(f"no MaxText interpreter here ({HOW_MAXTEXT}; PERFMODEL_MAXTEXT_TESTS=required makes this an "
                "error)", allow_module_level=True)
pytestmark = pytest.mark.xdist_group("maxtext")  # one JAX import per batch, one worker
VERSION = "0.2.5"


@functools.cache
def exported(name: str) -> str:
    return export_plan(maxtext_plan_file(name), "maxtext", VERSION)


def check(texts: list[str]):
    return run_checks("maxtext", VERSION, VERSIONS[VERSION], texts)


def test_every_spread_plan_is_accepted():
    names = list(MAXTEXT_SPREAD)
    results = check([exported(n) for n in names])
    refused = {n: r.error for n, r in zip(names, results) if not r.accepted}
    assert not refused, refused
    assert all(len(r.checks) == 3 and r.checks[0].startswith("maxtext.configs.pyconfig") for r in results)
    two_slices = results[names.index("v6e-2-slices-fsdp")]
    assert "compile_topology=v6e-256 compile_topology_num_slices=2" in two_slices.checks[0]


def _bad(name: str, old: str, new: str) -> str:
    text = exported(name)
    assert old in text
    return text.replace(old, new)


def test_wrong_configs_are_refused_with_maxtexts_messages():
    bad = {  # what is wrong -> (config, MaxText's message)
        "ici product != chips in a slice": (_bad("v6e-2-slices-fsdp", "ici_fsdp_parallelism: 64",
                                                 "ici_fsdp_parallelism: 32"),
                                            "Number of devices per slice 256 does not match the product of the ICI "
                                            "parallelism 128"),
        "dcn degree on one slice": (_bad("v5p-fsdp-tp4", "dcn_data_parallelism: 1", "dcn_data_parallelism: 2"),
                                    "DCN parallelism requested but only one slice available."),
        "unknown key": (_bad("v5p-fsdp-tp4", "remat_policy:", "remat_polcy:"), "'remat_polcy' not in"),
        "micro-batches not a multiple of the stages": (
            _bad("v5p-pp4-gpipe", "num_pipeline_microbatches: 16", "num_pipeline_microbatches: 6"),
            "The number of microbatches (6) must be divisible by the number of stages (4)"),
        "fp8 with gradient accumulation": (
            _bad("v7-fp8", "gradient_accumulation_steps: 1", "gradient_accumulation_steps: 2"),
            "FP8 quantization is not compatible with gradient accumulation."),
        "no such TPU slice": (_bad("v5p-fsdp-tp4", "compile_topology=v5p-256", "compile_topology=v5p-250"),
                              "Invalid compile topology: v5p-250"),
    }
    results = check([text for text, _ in bad.values()])
    for (what, (_, message)), r in zip(bad.items(), results):
        assert not r.accepted, what
        assert message in r.error, (what, r.error)
