"""`perfmodel hardware list|show NAME|schema|hosts [HOST]`, `perfmodel models list|show NAME` and `perfmodel stacks
list|show NAME[@VERSION]`: the catalogues of systems, model presets, software stacks and their releases."""

from __future__ import annotations

import argparse
import json

from ..argtypes import Parser


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help)
    actions = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    actions.add_parser("list")
    actions.add_parser("show").add_argument("name")
    if name == "hardware":
        actions.add_parser("schema")
        actions.add_parser("hosts", help="the hosts (CPUs that launch the kernels) and their per-call costs").add_argument(
            "host", nargs="?", help="one host's costs and sources")
    return p


def run(a: argparse.Namespace) -> str:
    from ..report import hardware_row, hardware_table, model_row, model_table

    if a.cmd == "hardware":
        from ...spec.hardware.system import hardware_json_schema, list_systems, load_hardware

        if a.action == "list":
            return "\n".join(hardware_row(name, load_hardware(name)) for name in list_systems())
        if a.action == "schema":
            return json.dumps(hardware_json_schema(), indent=2)
        if a.action == "hosts":
            from ...spec.host.cpu import list_hosts, load_host
            from ..report import host_table

            if a.host is not None:
                return "\n".join(host_table(load_host(a.host)))
            return "\n".join(f"{n:<16}{h.sockets}x {h.cpu:<28} eager op {h.calls.eager_op_s * 1e6:5.2f} us, "
                             f"nn.Linear {h.calls.module_call_s * 1e6:5.2f} us  ({h.description})"
                             for n, h in ((n, load_host(n)) for n in list_hosts()))
        return hardware_table(load_hardware(a.name))
    if a.cmd == "stacks":
        return stacks_text(a.action, getattr(a, "name", None))
    from ...spec.model.catalogue import list_models, load_model

    if a.action == "list":
        return "\n".join(model_row(name, load_model(name)) for name in list_models())
    return model_table(load_model(a.name))


def stacks_text(action: str, name: str | None) -> str:
    """`stacks list`: every stack profile and release line (with its versions); `stacks show NAME[@VERSION]`: a
    profile's description, or a release's recipes (where each applies, what it sets, its source)."""
    from ...spec.stack.profile import STACKS, load_stack
    from ...spec.stack.release import is_release, load_line, release_label, release_lines, split_stack

    if action == "list":
        out = [f"{n:<17}{load_stack(n).description}" for n in STACKS]
        for n in release_lines():
            line = load_line(n)
            out.append(f"{n:<17}release line over {line.profile} (bare {n}: the newest; stacks show "
                       f"{n}@VERSION: its recipes)")
            out += [f"  {n}@{r.version:<10}{release_label(line, r)}; source: {r.source}" for r in line.releases]
        return "\n".join(out)
    if not is_release(name):
        s = load_stack(name)
        return f"{s.name}: {s.description}\nversions: {s.versions}"
    base, version = split_stack(name)
    r = load_line(base).release(version)
    line = load_line(base)
    out = [f"{base}@{r.version}: {release_label(line, r)}; runs the "
           f"{line.profile} profile with these MoE recipes (first match wins)", f"source: {r.source}"]
    if r.defaults is not None:
        d = r.defaults
        grad = "profile's" if d.grad_dtype is None else d.grad_dtype + (
            f" at {', '.join(d.grad_dtype_precisions)} (else the profile's)" if d.grad_dtype_precisions else "")
        tpo = "profile's" if d.dense_tp_comm_overlap is None else ("on" if d.dense_tp_comm_overlap else "off") + (
            f", off at {', '.join(d.tp_overlap_off_precisions)}" if d.tp_overlap_off_precisions else "")
        out.append(f"every model: gradients reduced in {grad}; a dense model's TP overlap {tpo}  ({d.source})")
    if line.profile_fields:
        out.append(f"profile fields it runs differently: "
                   f"{', '.join(f'{k}={v}' for k, v in line.profile_fields.items())} (sources in "
                   f"hardware_specs/stacks/releases/{base}.yaml)")
    for x in r.recipes:
        where = " ".join(f"{k}={','.join(v)}" for k, v in (("models", x.models), ("gpus", x.gpus),
                                                             ("precisions", x.precisions)) if v) or "any other plan"
        rec = "full" if x.recompute_full else "-" if x.recompute_modules is None else (
            ",".join(x.recompute_modules) or "none")
        out.append(f"  {where:<58} dispatcher={x.moe_dispatcher:<8} overlap={'on' if x.moe_overlap else 'off':<3} "
                   f"graphs={x.cuda_graphs:<4} recompute={rec}"
                   + ("" if x.moe_capacity_factor is None else
                      f" capacity={x.moe_capacity_factor:g}{' padded' if x.moe_pad_to_capacity else ''}")
                   + f"  ({x.source})")
    return "\n".join(out)
