"""Command line: parse, call the Python API, format. No modelling here.

Bad input of any kind ends with one line on stderr naming the field, the value and what is valid, and exit
code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from .cost.estimate import estimate
from .errors import InputError
from .hardware import hardware_json_schema, list_systems, load_hardware
from .models import list_models, load_model
from .plan import Plan
from .report import estimate_table, hardware_table, model_table

# `perfmodel predict` with no flags: the question the tool exists for.
EXAMPLE = ["--model", "llama-3-70b", "--hardware", "dgx-h100", "--gpus", "512", "--tp", "8", "--pp", "4",
           "--micro-batch", "1", "--global-batch", "1024", "--seq-len", "8192", "--sequence-parallel",
           "--zero", "1", "--recompute", "selective"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints usage + message by default)
        print(f"error: {self.prog}: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


def _positive(name):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {v}")
        return v
    return parse


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="perfmodel", description="Predict LLM training step time and memory on GPU/TPU clusters.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    pr = sub.add_parser("predict", help="predict one training step of a plan (no flags: a built-in example)",
                        description="Predict one training step. With no flags, runs the built-in example: "
                                    + " ".join(EXAMPLE))
    pr.add_argument("--model", required=True, help="preset name (perfmodel models list), or path to a HF config.json or a ModelConfig YAML/JSON")
    pr.add_argument("--hardware", required=True, help="preset name (perfmodel hardware list) or path to a spec YAML")
    pr.add_argument("--gpus", type=_positive("--gpus"), required=True)
    pr.add_argument("--tp", type=_positive("--tp"), required=True)
    pr.add_argument("--pp", type=_positive("--pp"), required=True)
    pr.add_argument("--dp", type=_positive("--dp"), help="default: gpus / (tp*pp*cp)")
    pr.add_argument("--cp", type=_positive("--cp"), default=1)
    pr.add_argument("--vpp", type=_positive("--vpp"), default=1)
    pr.add_argument("--micro-batch", type=_positive("--micro-batch"), required=True)
    pr.add_argument("--global-batch", type=_positive("--global-batch"), required=True)
    pr.add_argument("--seq-len", type=_positive("--seq-len"), required=True)
    pr.add_argument("--recompute", choices=["none", "selective", "full"], default="none")
    pr.add_argument("--sequence-parallel", action="store_true")
    pr.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0)
    pr.add_argument("--precision", choices=["bf16", "fp16", "fp8", "fp4"], default="bf16")
    pr.add_argument("--schedule", choices=["1f1b", "interleaved", "gpipe"], help="default: interleaved if vpp > 1 else 1f1b")
    pr.add_argument("--attention", choices=["flash", "unfused"], default="flash")
    pr.add_argument("--grad-dtype", choices=["fp32", "bf16"], default="fp32")
    pr.add_argument("--no-overlap-dp-comm", action="store_true", help="data-parallel collectives do not overlap compute")
    pr.add_argument("--format", choices=["table", "json"], default="table")

    hw = sub.add_parser("hardware", help="list or show hardware presets, or print the spec JSON schema")
    hws = hw.add_subparsers(dest="action", required=True, parser_class=_Parser)
    hws.add_parser("list")
    hws.add_parser("show").add_argument("name")
    hws.add_parser("schema")

    md = sub.add_parser("models", help="list or show model presets")
    mds = md.add_subparsers(dest="action", required=True, parser_class=_Parser)
    mds.add_parser("list")
    mds.add_parser("show").add_argument("name")
    return ap


def _predict(a) -> str:
    plan = Plan(gpus=a.gpus, tp=a.tp, pp=a.pp, dp=a.dp, cp=a.cp, vpp=a.vpp, micro_batch=a.micro_batch,
                global_batch=a.global_batch, seq_len=a.seq_len, recompute=a.recompute,
                sequence_parallel=a.sequence_parallel, zero=a.zero, precision=a.precision, schedule=a.schedule,
                attention=a.attention, grad_dtype=a.grad_dtype, overlap_dp_comm=not a.no_overlap_dp_comm)
    est = estimate(load_model(a.model), load_hardware(a.hardware), plan)
    return est.model_dump_json(indent=2) if a.format == "json" else estimate_table(est)


def run(argv: list[str]) -> str:
    if argv == ["predict"]:
        argv = ["predict", *EXAMPLE]
    a = build_parser().parse_args(argv)
    if a.cmd == "predict":
        return _predict(a)
    if a.cmd == "hardware":
        if a.action == "list":
            rows = []
            for name in list_systems():
                s = load_hardware(name)
                bw = " > ".join(f"{t.name} {t.bandwidth_gbps:g} GB/s" for t in s.tiers)
                rows.append(f"{name:<16}{s.accelerator.name:<18}{s.accelerator.peak_tflops['bf16']:>8g} TF bf16  "
                            f"{s.accelerator.hbm_capacity_gib:>5g} GiB  {bw}")
            return "\n".join(rows)
        if a.action == "schema":
            return json.dumps(hardware_json_schema(), indent=2)
        return hardware_table(load_hardware(a.name))
    if a.action == "list":
        rows = []
        for name in list_models():
            m = load_model(name)
            rows.append(f"{name:<16}{m.n_params() / 1e9:>9.2f}B  layers {m.n_layers:<4} hidden {m.hidden:<6} "
                        f"heads {m.n_heads}/{m.n_kv_heads:<4} vocab {m.vocab}")
        return "\n".join(rows)
    return model_table(load_model(a.name))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        out = run(argv)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        print(out)
    except BrokenPipeError:  # e.g. `perfmodel predict | head`
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
