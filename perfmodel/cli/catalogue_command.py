"""`perfmodel hardware list|show NAME|schema|hosts [HOST]` and `perfmodel models list|show NAME`: the catalogues of systems
and model presets."""

from __future__ import annotations

import argparse
import json

from .argtypes import Parser


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
    from .report import hardware_row, hardware_table, model_row, model_table

    if a.cmd == "hardware":
        from ..spec.hardware import hardware_json_schema, list_systems, load_hardware

        if a.action == "list":
            return "\n".join(hardware_row(name, load_hardware(name)) for name in list_systems())
        if a.action == "schema":
            return json.dumps(hardware_json_schema(), indent=2)
        if a.action == "hosts":
            from ..spec.host_cpu import list_hosts, load_host
            from .report import host_table

            if a.host is not None:
                return "\n".join(host_table(load_host(a.host)))
            return "\n".join(f"{n:<16}{h.sockets}x {h.cpu:<28} eager op {h.calls.eager_op_s * 1e6:5.2f} us, "
                             f"nn.Linear {h.calls.module_call_s * 1e6:5.2f} us  ({h.description})"
                             for n, h in ((n, load_host(n)) for n in list_hosts()))
        return hardware_table(load_hardware(a.name))
    from ..spec.model_catalogue import list_models, load_model

    if a.action == "list":
        return "\n".join(model_row(name, load_model(name)) for name in list_models())
    return model_table(load_model(a.name))
