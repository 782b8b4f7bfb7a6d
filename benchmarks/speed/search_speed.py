"""How fast the searches are: whole-process wall time of `perfmodel search` (Python start-up and imports
included) for three large jobs, the PaSE DP for one mesh of Llama 3 405B, and how the cost grows with layers,
devices and candidates per vertex.

    python -m benchmarks.speed.search_speed            # prints the tables
    python -m benchmarks.speed.search_speed --quick    # the three jobs and the PaSE case only

Targets (on the 2-core CI machine): each of the three layout searches under 0.8 s whole-process (first
asked at 1.0 s); the PaSE DP for Llama 3.1 405B's graph under 0.5 s. Each process runs `--repeat` times (default 3; a
shared machine's timings vary by +-15%): the table shows the median and the fastest.

Python writes no bytecode cache where PYTHONDONTWRITEBYTECODE is set (these sandboxes set it), so there every
process compiles perfmodel's sources again (about 0.1 s of each search); `--bytecode` compiles them first, as an
installed package or any second run elsewhere has them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import pandas as pd

JOBS = [  # (name, model, hardware, gpus, global batch, sequence)
    ("GPT-3 175B, 1024 A100", "gpt3-175b", "dgx-a100-80gb", 1024, 1536, 2048),
    ("1T (Megatron), 4096 H100", "megatron-1t", "dgx-h100", 4096, 3072, 2048),
    ("Llama 3 405B, 16384 H100", "llama-3.1-405b", "dgx-h100", 16384, 2048, 8192),
]


def run_search(model, hardware, gpus, gb, seq, repeat: int = 3) -> dict:
    """`repeat` `perfmodel search` processes: wall seconds from fork to exit (median, fastest), and the counts and
    in-process search seconds (median) it reports (json)."""
    argv = [sys.executable, "-m", "perfmodel", "search", "--model", model, "--hardware", hardware, "--gpus",
            str(gpus), "--global-batch", str(gb), "--seq-len", str(seq), "--format", "json", "--top", "1"]
    walls, inside = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - t0)
        summary = json.loads(out.stdout)["summary"]
        inside.append(summary["seconds"])
    return {"wall_s": statistics.median(walls), "fastest_s": min(walls), "enumerated": summary["enumerated"],
            "feasible": summary["feasible"], "in_process_s": statistics.median(inside)}


def pase_case(layers: int | None = None, tp=8, dp=2048, cp=1, gpus=16384) -> dict:
    """The PaSE DP (graph, cost tables, order, DP) for Llama 3 405B's graph on one mesh, in-process seconds."""
    import perfmodel as pm
    from perfmodel.spec.plan.layout import Plan, resolve
    from perfmodel.search.pase import solver as pase

    model = pm.load_model("llama-3.1-405b")
    if layers:
        model = model.model_copy(update={"n_layers": layers})
    system = pm.load_hardware("dgx-h100")
    plan = resolve(Plan(gpus=gpus, tp=tp, cp=cp, dp=dp, pp=gpus // (tp * cp * dp), micro_batch=1,
                        global_batch=2048, seq_len=8192, sequence_parallel=tp > 1, zero=1), model, system)
    t0 = time.perf_counter()
    res = pase.solve(model, system, plan)
    wall = time.perf_counter() - t0
    d = res.diagnostics
    return {"layers": model.n_layers, "mesh": f"dp{dp} cp{cp} tp{tp}", "seconds": wall,
            "vertices": d.vertices, "max_candidates": d.max_candidates, "max_dependent_set": d.max_dependent_set}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="processes per job (median and fastest reported)")
    ap.add_argument("--bytecode", action="store_true", help="compile perfmodel's bytecode first (module docstring)")
    a = ap.parse_args(argv)
    if a.bytecode:
        import compileall
        from pathlib import Path

        import perfmodel

        compileall.compile_dir(Path(perfmodel.__file__).parent, quiet=1)
    cached = "bytecode cached" if a.bytecode else "bytecode as the environment leaves it"
    rows = [{"job": name, **run_search(*job, repeat=a.repeat)} for name, *job in JOBS]
    print(f"Layout search, whole process (python -m perfmodel search ... --format json), {a.repeat} runs each, "
          f"{cached}:")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    pase_rows = [pase_case()]
    print("\nPaSE DP, Llama 3.1 405B (126 layers), one mesh, in-process:")
    print(pd.DataFrame(pase_rows).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if a.quick:
        return 0
    grow = [{"gpus": g, **run_search("llama-3.1-405b", "dgx-h100", g, 2048, 8192, a.repeat)}
            for g in (1024, 4096, 16384)]
    print("\nLayout search vs. devices (Llama 3.1 405B, H100, batch 2048 x 8192):")
    print(pd.DataFrame(grow).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print("\nPaSE DP vs. layers (mesh dp2048 tp8):")
    print(pd.DataFrame([pase_case(layers=n) for n in (32, 64, 126)]).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print("\nPaSE DP vs. mesh axes / candidates per vertex (126 layers):")
    meshes = [dict(tp=1, dp=2048, cp=1, gpus=2048), dict(tp=8, dp=256, cp=1, gpus=2048),
              dict(tp=8, dp=128, cp=2, gpus=2048)]
    print(pd.DataFrame([pase_case(**m) for m in meshes]).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
