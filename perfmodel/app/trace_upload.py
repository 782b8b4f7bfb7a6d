"""Profiler traces uploaded to the page: what they measured (`perfmodel calibrate --from-trace FILES
--format json`'s fields) beside the form's plan priced on the spec they calibrate, as `perfmodel predict ... --trace
FILES` prices it (the same parse and function: `actions.predict` with --trace).

The page sends each Kineto trace (one per rank, plain or gzipped JSON) base64-encoded; each is written into a private
temporary folder under its own base name (letters, digits, dots, hyphens and underscores; .json or .json.gz),
size-capped before and after decompression, read as data by the trace reader, and the folder is gone when the
answer is. A trace the reader refuses (empty, truncated gzip, not JSON, no kernels) answers its one line, the
folder's path taken out so that it names the file the page sent. A trace that reads but cannot calibrate a spec (no
GEMM with recorded shapes, say) answers what it measured and why no prediction could be made.

The GPU trace's base system: the catalogue's system of the trace's GPU, or with `base` = "form" the form's
--hardware (as `predict --trace --hardware H` takes it); a CPU trace builds its spec from the trace alone.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from pathlib import Path

from ..errors import InputError
from .config_upload import scrub, scrub_all
from .uploads import check_count, upload_path

MAX_TRACES = 16  # one file per rank of the step the user traced
MAX_TRACE_BYTES = 32 << 20  # bytes per file as sent (a gzipped trace of one step is a few MiB)
MAX_JSON_BYTES = 512 << 20  # bytes per file once gunzipped: a larger one is refused before it is parsed
MAX_BODY = (MAX_TRACES * MAX_TRACE_BYTES) // 3 * 4 + (1 << 20)  # base64 of the files, and the form
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.json(\.gz)?")


def gunzipped_size(data: bytes, limit: int) -> int:
    """Bytes of `data` once gunzipped (streamed, stopping past `limit`); len(data) when it is not gzip."""
    if data[:2] != b"\x1f\x8b":
        return len(data)
    d, size = zlib.decompressobj(16 + zlib.MAX_WBITS), 0
    try:
        while data and size <= limit:
            size += len(d.decompress(data, 1 << 20))
            data = d.unconsumed_tail
    except zlib.error:
        return size  # a damaged file: the trace reader refuses it in its own words
    return size


def write_traces(files, folder: Path) -> list[Path]:
    """Each {name, data (base64)} of `files` written into `folder` under its base name, in order; InputError in one
    line for no file, too many, a name the folder cannot hold as is or not a trace's, a repeated name, data that is
    not base64, or a file too large (sent, or gunzipped)."""
    check_count(files, "trace upload", MAX_TRACES, "one or more Kineto traces (.json or .json.gz, one per rank)")
    out: list[Path] = []
    for up in files:
        if not isinstance(up, dict) or not isinstance(up.get("data"), str):
            raise InputError("trace upload: each file is {name, data}, data base64; valid: a trace file")
        path = upload_path(str(up.get("name") or ""), folder, out, "trace upload", FILE_NAME,
                           "a .json or .json.gz trace named with letters, digits and . _ - (up to 128, not starting "
                           "with a dot)")
        name = path.name
        if len(up["data"]) > MAX_TRACE_BYTES // 3 * 4 + 4:
            raise InputError(f"trace upload: {name!r} is over {MAX_TRACE_BYTES} bytes; valid: up to "
                             f"{MAX_TRACE_BYTES} bytes a file")
        try:
            data = base64.b64decode(up["data"], validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"trace upload: {name!r} is not base64 data; valid: the file's bytes, base64") from None
        if len(data) > MAX_TRACE_BYTES:
            raise InputError(f"trace upload: {name!r} is {len(data)} bytes; valid: up to {MAX_TRACE_BYTES} bytes")
        if gunzipped_size(data, MAX_JSON_BYTES) > MAX_JSON_BYTES:
            raise InputError(f"trace upload: {name!r} is over {MAX_JSON_BYTES} bytes gunzipped; valid: up to "
                             f"{MAX_JSON_BYTES} bytes of JSON (trace fewer steps)")
        path.write_bytes(data)
        out.append(path)
    return out


def without_hardware(args: list[str]) -> list[str]:
    """The form's argv without its --hardware (a GPU trace's base is then the catalogue's system of its GPU)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--hardware":
            skip = True
        elif not a.startswith("--hardware="):
            out.append(a)
    return out


def run_trace(data: dict, args: list[str], folder: Path) -> dict:
    """The page's answer to an upload {files, base, values, uploads}: `args` is the form's argv (its own uploads
    written); the traces go into `folder`. "trace": what they measured (TraceSummary, calibrate --from-trace
    --format json), "calibrated": the spec's fitted numbers (null where no spec could be calibrated, "why" says why),
    "prediction": actions.predict's answer for `predict ARGS --trace FILES` (null likewise), "command": that CLI
    command with the files by their names."""
    from ..calibrate.trace.from_trace import calibrate_from_trace
    from . import actions

    paths = write_traces(data.get("files"), folder)
    base = data.get("base") or "catalogue"
    if base not in ("catalogue", "form"):
        raise InputError(f"trace upload: base = {base!r}; valid: catalogue (the trace's GPU's system) or form (the "
                         "form's hardware)")
    argv = list(args) if base == "form" else without_hardware(args)
    hardware = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--hardware"), None)
    try:
        system, summary, _ = calibrate_from_trace(paths, hardware, require=False)
        out = {"files": [p.name for p in paths], "trace": summary.model_dump(mode="json"), "calibrated": None,
               "prediction": None, "why": None}
        shown = [Path(a).name if Path(a).is_absolute() else a for a in argv]  # uploads by their file names
        out["command"] = " ".join(["perfmodel", "predict", *shown, "--trace", *out["files"]])
        if system is None:
            out["why"] = summary.not_calibrated[0].why
            return scrub_all(out, folder)
        eff, host = system.efficiency, system.host_costs
        out["calibrated"] = {"name": system.name, "matmul_max": dict(eff.matmul_max), "matmul_tile": list(eff.matmul_tile),
                             "memory_bandwidth": eff.memory_bandwidth, "attention_max": eff.attention_max,
                             "host_kernel_s": host.kernel_s if host is not None and host.probes else None,
                             "host_collective_s": host.collective_s if host is not None and host.probes else None}
        out["prediction"] = actions.predict([*argv, "--trace", *map(str, paths)])
    except InputError as err:
        raise InputError(scrub(str(err), folder)) from None
    return scrub_all(out, folder)
