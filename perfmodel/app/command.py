"""`perfmodel app`: serve the planner page (perfmodel.app) on this machine; the optional extra `.[app]`."""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys

from ..cli.argtypes import integer
from ..errors import InputError

HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def loopback(host_: str) -> bool:
    """This machine only: localhost or a loopback address (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host_).is_loopback
    except ValueError:
        return host_ == "localhost"


def host(text: str) -> str:
    """An IP address or a host name (RFC 1123 letters, digits, dots and hyphens)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        if HOSTNAME.fullmatch(text):
            return text
    raise argparse.ArgumentTypeError(f"--host must be an IP address or a host name, got {text!r}")


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description="Serve the planner page: predict, search, export, forecast, "
                                                     "serve and a sweep's report in a browser, answered by the same "
                                                     "functions as the CLI.")
    p.add_argument("--host", type=host, default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only; "
                                                       "another address serves the network, with a warning)")
    p.add_argument("--port", type=integer("--port", 0, 65535), default=8765, help="default 8765 (0: any free port)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    return p


def run(a: argparse.Namespace) -> str:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise InputError(f"perfmodel app needs the app extra ({err.name} is not installed); valid: "
                         "pip install -e \".[app]\"") from None
    if not loopback(a.host):
        print(f"warning: --host {a.host} serves the planner to every machine that can reach this one; it has no "
              "login (default 127.0.0.1: this machine only)", file=sys.stderr)
    serve(a.host, a.port, a.open)
    return "perfmodel app: stopped"


def serve(host: str, port: int, open_page: bool) -> None:
    """Serve the page until Ctrl-C; say where once it listens (the port bound, for --port 0) and, with
    `open_page`, open it in the default browser."""
    import threading
    import time

    import uvicorn

    from .server import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(), host=host, port=port, log_level="warning"))

    def announce():
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.05)
        bound = server.servers[0].sockets[0].getsockname()[1]
        shown = "127.0.0.1" if loopback(host) else f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/"
        print(f"perfmodel app: serving on {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
        if open_page:
            import webbrowser

            webbrowser.open(url)
    threading.Thread(target=announce, daemon=True).start()
    server.run()
