"""Mutations of the files the CLI reads besides its flags (tests/test_fuzz_cli.py): the runs CSV and training logs
of `calibrate --from-runs`, and the manifests and step directories of `execute --resume`.

Each strategy draws a function that takes the valid bytes (or a directory) and returns them broken one way.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from pathlib import Path

from hypothesis import strategies as st

TEXT = st.text(max_size=12).filter(lambda s: "\x00" not in s)

# ------------------------------------------------------------------------------------------- runs CSV
NUMERIC = ["n_layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "n_gpus", "tp", "pp", "dp",
           "cp", "vpp", "micro_batch", "global_batch", "iter_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu"]
WORDS = ["row_id", "row_type", "trust", "model", "gpu_type", "sp", "recompute", "zero_dist_opt", "precision",
         "framework"]
BAD_CELLS = ["nan", "inf", "-inf", "-1", "0", "1e300", "1e-300", "abc", "", "True", "1.5", "99999999999999999999999",
             "1e400", " 8 ", "\uff18", "0x10", "--", "NaN (inferred)"]


def _rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode())))


def _csv(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def _set_cell(col: str, row: int, value: str):
    def apply(data: bytes) -> bytes:
        rows = _rows(data)
        if col in rows[0]:
            rows[1 + row % (len(rows) - 1)][rows[0].index(col)] = value
        return _csv(rows)
    return apply


def _drop(cols: list[str]):
    def apply(data: bytes) -> bytes:
        rows = _rows(data)
        keep = [i for i, c in enumerate(rows[0]) if c not in cols]
        return _csv([[r[i] for i in keep if i < len(r)] for r in rows])
    return apply


def _extra(name: str, value: str):
    return lambda data: _csv([r + [name if i == 0 else value] for i, r in enumerate(_rows(data))])


def _raw(kind: str, at: int, blob: bytes):
    def apply(data: bytes) -> bytes:
        cut = at % max(1, len(data))
        return {"truncate": data[:cut], "binary": data[:cut] + blob + data[cut:], "empty": b"",
                "header": data.split(b"\n")[0] + b"\n", "latin1": data.decode().replace("H100", "H\u00e9100").encode(
                    "latin-1", "replace"), "dup-header": data.split(b"\n")[0] + b"\n" + data,
                "short-row": data.replace(b",", b"", 3), "blank-lines": data.replace(b"\n", b"\n\n"),
                "crlf": data.replace(b"\n", b"\r\n"), "bom": b"\xef\xbb\xbf" + data}[kind]
    return apply


def runs_csv_mutation():
    columns = NUMERIC + WORDS
    return st.one_of(
        st.builds(_set_cell, st.sampled_from(NUMERIC), st.integers(0, 9), st.sampled_from(BAD_CELLS) | TEXT),
        st.builds(_set_cell, st.sampled_from(WORDS), st.integers(0, 9), st.sampled_from(BAD_CELLS) | TEXT),
        st.builds(_set_cell, st.sampled_from(NUMERIC), st.integers(0, 9),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr) | st.integers().map(str)),
        st.builds(_drop, st.lists(st.sampled_from(columns), min_size=1, max_size=3)),
        st.builds(_extra, TEXT, TEXT),
        st.builds(_raw, st.sampled_from(["truncate", "binary", "empty", "header", "latin1", "dup-header", "short-row",
                                         "blank-lines", "crlf", "bom"]), st.integers(0, 10**6), st.binary(max_size=16)),
    )


# ------------------------------------------------------------------------------------------- training logs
def megatron_log(row: dict) -> str:
    """A Megatron-LM log (arguments block, iteration lines) of one published-runs row, as training_log prints."""
    num = lambda c: int(float(re.match(r"[\d.]+", str(row[c])).group()))  # noqa: E731 - '32000 (inferred)' too
    args = {"num_layers": num("n_layers"), "hidden_size": num("hidden"), "ffn_hidden_size": num("ffn_hidden"),
            "num_attention_heads": num("heads"), "group_query_attention": num("kv_heads") < num("heads"),
            "num_query_groups": num("kv_heads"), "padded_vocab_size": num("vocab"), "seq_length": num("seq_len"),
            "world_size": num("n_gpus"), "tensor_model_parallel_size": num("tp"),
            "pipeline_model_parallel_size": num("pp"), "context_parallel_size": num("cp"),
            "data_parallel_size": num("dp"), "micro_batch_size": num("micro_batch"),
            "global_batch_size": num("global_batch"), "bf16": True, "fp8": "hybrid", "swiglu": True,
            "use_distributed_optimizer": True, "sequence_parallel": num("tp") > 1, "recompute_granularity": None}
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in sorted(args.items())]
    lines.append("-------------------- end of arguments ---------------------")
    ms = float(row["iter_time_s"]) * 1000
    for i, t in enumerate((ms * 2, ms, ms * 1.01, ms * 0.99)):
        lines.append(f" [2024-05-01 10:0{i}:00] iteration {10 * (i + 1):8d}/     500 | consumed samples: "
                     f"{128 * i:12d} | "
                     f"elapsed time per iteration (ms): {t:.1f} | learning rate: 3.000000E-05 | global batch size: "
                     f"{args['global_batch_size']:5d} | lm loss: 7.900000E+00 | loss scale: 1.0 | grad norm: 1.100 |")
    return "\n".join(lines) + "\n"


GARBAGE = ["nan", "inf", "-5", "abc", "99999999999999999999999", "1e400", "0", "", "0.0", "1e-320", "\u0663", "--"]


def _log_number(pattern: str, value: str, index: int):
    """Replace the index-th match of `pattern`'s group 1 in a log with `value`."""
    def apply(text: str) -> str:
        found = list(re.finditer(pattern, text))
        if not found:
            return text
        m = found[index % len(found)]
        return text[:m.start(1)] + value + text[m.end(1):]
    return apply


def _log_raw(kind: str, at: int, blob: bytes):
    def apply(text: str) -> bytes | str:
        cut = at % max(1, len(text))
        return {"truncate": text[:cut], "binary": text.encode()[:cut] + blob + text.encode()[cut:],
                "drop-line": "\n".join(line for i, line in enumerate(text.splitlines()) if i != at % 40),
                "latin1": text.encode() + b"\xe9\xff\n", "empty": "", "no-iterations": re.sub(
                    r".*iteration .*\n", "", text), "no-end": text.replace("end of arguments", "end of args"),
                "dup-block": text + text}[kind]
    return apply


ARG_LINE = r"\n  {} \.+ (\S+)"
LOG_FIELDS = ["num_layers", "hidden_size", "num_attention_heads", "seq_length", "world_size",
              "tensor_model_parallel_size", "pipeline_model_parallel_size", "micro_batch_size", "global_batch_size",
              "context_parallel_size", "data_parallel_size", "padded_vocab_size", "num_query_groups", "ffn_hidden_size"]


# torchtitan: tokens/s, the config dump's values, the device mesh, a TOML's values
TITAN = [r"tps: ([\d,]+)", r"'(?:\w+)': ([^,{}]+)[,}]", r"device mesh with \[.*?\], \[([\d, ]+)\]",
         r"(?m)^\w+ = (.+)$", r"step: +(\d+)"]


def log_mutation():
    """A function of a log's (or TOML's) text -> its broken text (or bytes)."""
    values = st.sampled_from(GARBAGE) | TEXT.filter(lambda s: s and not any(c.isspace() for c in s))
    return st.one_of(
        st.builds(_log_number, st.just(r"elapsed time per iteration \(ms\): ([\d.]+)"), values, st.integers(0, 3)),
        st.builds(_log_number, st.sampled_from(TITAN), values | st.sampled_from(["-1", "0", "'8'", "True", "[]"]),
                  st.integers(0, 40)),
        st.builds(_log_number, st.sampled_from(LOG_FIELDS).map(ARG_LINE.format), values, st.just(0)),
        st.builds(_log_number, st.sampled_from(LOG_FIELDS).map(ARG_LINE.format),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr) | st.integers().map(str), st.just(0)),
        st.builds(_log_raw, st.sampled_from(["truncate", "binary", "drop-line", "latin1", "empty", "no-iterations",
                                             "no-end", "dup-block"]), st.integers(0, 10**6), st.binary(max_size=16)),
    )


# ------------------------------------------------------------------------------------------- checkpoint manifests
def _paths(value, prefix=()):
    """Every (key path) in a JSON value."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
                           lambda c: st.lists(c, max_size=2) | st.dictionaries(TEXT, c, max_size=2), max_leaves=4)
SPECIAL = [-1, 0, 2**63, 1e308, "", "x", None, True, [], {}, "../step-0002/.metadata", "/etc/hostname", ".",
           "manifest.json", "a" * 300, 99999]


def _edit(choice: int, how: str, value):
    """Change, delete or add beside the choice-th path of the manifest (a path's value, its key, its list)."""
    def apply(data: bytes) -> bytes:
        doc = json.loads(data)
        paths = [p for p in _paths(doc) if p]
        path = paths[choice % len(paths)]
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        last = path[-1]
        if how == "set":
            parent[last] = value
        elif how == "delete":
            del parent[last]
        elif isinstance(parent, dict):
            parent[f"extra_{value!s:.8}"] = value
        else:
            parent.append(value)
        return json.dumps(doc, indent=2).encode()
    return apply


def _nan_field(choice: int, value: str):
    """A number written as JSON does not allow it (NaN, Infinity, a huge exponent)."""
    def apply(data: bytes) -> bytes:
        numbers = list(re.finditer(rb": (-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)", data))
        m = numbers[choice % len(numbers)]
        return data[:m.start(1)] + value.encode() + data[m.end(1):]
    return apply


def manifest_mutation():
    """A function of manifest.json's bytes -> broken bytes."""
    return st.one_of(
        st.builds(_edit, st.integers(0, 10**6), st.sampled_from(["set", "delete", "add"]),
                  st.sampled_from(SPECIAL) | JSON_VALUES),
        st.builds(_nan_field, st.integers(0, 10**6), st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400",
                                                                     "99999999999999999999999", "-0", "1.5"])),
        st.builds(lambda at, blob: lambda d: d[:at % max(1, len(d))] + blob, st.integers(0, 10**6),
                  st.binary(max_size=8)),
        st.binary(max_size=64).map(lambda b: lambda d: b),
        st.just(lambda d: d.decode().replace('"', "'").encode()),
        st.just(lambda d: d + d),
        st.just(lambda d: d.decode().encode("utf-16")),
    )


def _tree(kind: str):
    """A change to a plan's checkpoint directory (newest save step-0004, the one before it step-0002)."""
    def apply(root: Path) -> None:
        new, old = root / "step-0004", root / "step-0002"
        if kind == "step-abc":
            new.rename(root / "step-abc")
        elif kind == "step--1":
            new.rename(root / "step--1")
        elif kind == "huge-step":
            new.rename(root / f"step-{10**30}")
        elif kind == "file-for-dir":
            shutil.rmtree(new)
            new.write_text("not a directory")
        elif kind == "manifest-dir":
            (new / "manifest.json").unlink()
            (new / "manifest.json").mkdir()
        elif kind == "torn-aside-file":  # a refused save is renamed aside onto this name
            (new / "__0_0.distcp").write_bytes(b"torn")
            (root / "step-0004.torn").write_text("in the way")
        elif kind == "tmp-file":
            (root / "step-0006.tmp").write_text("not a directory")
        elif kind == "tmp-link":
            (root / "step-0006.tmp").symlink_to(old, target_is_directory=True)
        elif kind == "newer-empty":
            (root / "step-0006").mkdir()
        elif kind == "both-torn":
            for d in (new, old):
                (d / "__0_0.distcp").write_bytes(b"torn")
        elif kind == "copied-manifest":  # step-0002's manifest in step-0004: the step disagrees with the name
            shutil.copy(old / "manifest.json", new / "manifest.json")
        elif kind == "link-file":
            target = new / "__0_0.distcp"
            data = target.read_bytes()
            target.unlink()
            (root / "elsewhere").write_bytes(data)
            os.symlink(root / "elsewhere", target)
        elif kind == "plan-dir-file":
            shutil.rmtree(root)
            root.write_text("a file where the plan's directory goes")
    return apply


TREE_KINDS = ["step-abc", "step--1", "huge-step", "file-for-dir", "manifest-dir", "torn-aside-file", "tmp-file",
              "tmp-link", "newer-empty", "both-torn", "copied-manifest", "link-file", "plan-dir-file"]
