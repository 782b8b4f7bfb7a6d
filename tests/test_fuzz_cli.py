"""Bad input at every CLI flag, in run logs and CSVs, checkpoint directories and forecast inputs (hypothesis).

The rule (perfmodel/errors.py): bad input ends in ONE line on stderr, `error: ...`, naming the flag or field, exit
code 2, no traceback, nothing written. Each bad value goes into an otherwise valid, fast invocation
(`fuzz_flags.BASES`) run in-process in a fresh directory; launches are replaced by a stub that fails the test, so a
bad flag must be refused before anything starts. Every bug found is a case in tests/fuzz_corpus/cli/ (replayed
below). CI runs a small deterministic profile; `PERFMODEL_FUZZ=long pytest tests/test_fuzz_cli.py` many more.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import shutil
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_cli_inputs as fi
import fuzz_flags as ff
from perfmodel.cli.main import build_parser, main

HERE = Path(__file__).parent
CORPUS = HERE / "fuzz_corpus" / "cli"
LONG = os.environ.get("PERFMODEL_FUZZ") == "long"
SCALE = int(os.environ.get("PERFMODEL_FUZZ_SCALE", 40)) if LONG else 1  # examples: the CI profile's times SCALE


def profile(examples: int):
    return settings(max_examples=examples * SCALE, derandomize=not LONG, database=None, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much])


# ------------------------------------------------------------------------------------------- running the CLI
@dataclass
class Result:
    rc: int | str  # "traceback" when an exception escaped main()
    out: str
    err: str


def call(argv: list[str]) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse (--help, bad values); the console script exits with it
            rc = 0 if e.code is None else e.code
        except BaseException:  # noqa: BLE001 - what the user would see as a traceback
            rc = "traceback"
            err.write(traceback.format_exc())
    return Result(rc, out.getvalue(), err.getvalue())


def snapshot(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size if p.is_file() else 0, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def refused(r: Result, names, before: dict, after: dict, argv) -> str:
    """Assert the rule; returns the message."""
    lines = r.err.strip().splitlines()
    assert r.rc == 2 and "Traceback" not in r.err, f"{argv}: rc {r.rc}\n{r.err[-3000:]}"
    assert len(lines) == 1 and lines[0].startswith("error:"), f"{argv}: not one 'error:' line:\n{r.err}"
    assert any(n.lower() in lines[0].lower() for n in names if n), f"{argv}: names none of {names}: {lines[0]}"
    assert before == after, f"{argv}: wrote {sorted(set(after) - set(before)) or 'changed files'}: {lines[0]}"
    return lines[0]


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> dict[str, bytes]:
    """The bytes of every file the bases and bad values name (fuzz_flags.zoo_files)."""
    import pandas as pd

    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.model.config import ModelConfig
    from perfmodel.spec.plan.layout import Plan
    from perfmodel.spec.plan.file import write_plan_file
    from perfmodel.search.plan_writer import plan_file

    tmp = tmp_path_factory.mktemp("zoo")
    assert call(["predict", *ff.PRED, "--save-plan", str(tmp / "plan.json")]).rc == 0
    tiny = ModelConfig(name="tiny-llama", n_layers=2, hidden=32, n_heads=4, n_kv_heads=2, ffn_hidden=64, vocab=256,
                       max_seq_len=32, mlp="swiglu", norm="rmsnorm", position="rope")
    cpu = load_hardware(HERE / "fixtures" / "cpu-test.yaml")
    pf = plan_file(tiny, cpu, Plan(gpus=1, micro_batch=2, global_batch=4, seq_len=16), created_by="fuzz")
    write_plan_file(pf, tmp / "cpu1.json")
    df = pd.read_csv(ff.DEV_CSV)
    runs = df[df["source_group"] == "NeMo_launcher_24.05"].dropna(subset=["vocab"]).head(4)
    files = Files(ff.zoo_files((tmp / "plan.json").read_bytes(), (tmp / "cpu1.json").read_bytes(),
                               runs.to_csv(index=False).encode(), (HERE / "fixtures" / "cpu-test.yaml").read_bytes()))
    # a finished one-point sweep, `perfmodel sweep report`'s base (its folder's files as the zoo holds files)
    (tmp / "sw.yaml").write_bytes(ff.SWEEP_YAML)
    assert call(["sweep", str(tmp / "sw.yaml"), "--out", str(tmp / "swdone"), "--workers", "1", "--quiet"]).rc == 0
    files |= {str(f.relative_to(tmp)): f.read_bytes() for f in (tmp / "swdone").rglob("*") if f.is_file()}
    files.home = tmp  # where each example's directory goes
    return files


class Files(dict):
    """name -> bytes; short in hypothesis' reports of a failing example, which print every argument."""

    home = None

    def __repr__(self):
        return f"<{len(self)} files>"


@contextlib.contextmanager
def workdir(zoo: dict[str, bytes], files=()):
    """A fresh directory holding the zoo (and `files`), as the working directory."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-", dir=zoo.home))
    for name, data in {**zoo, **{f.name: f.data for f in files}}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    for d in ff.DIRS:
        (root / d).mkdir()
    old = os.getcwd()
    os.chdir(root)
    try:
        yield root
    finally:
        os.chdir(old)
        shutil.rmtree(root, ignore_errors=True)


def _would_launch(*a, **k):
    raise AssertionError("would launch")


@pytest.fixture
def no_launch(monkeypatch):
    """Nothing real starts: torchrun launches, calibrate's in-process microbenchmarks, and the app's server."""
    import perfmodel.calibrate.machine.calibration
    import perfmodel.app.command
    import perfmodel.execute.run_plans
    import perfmodel.execute.launch.torchrun

    for mod in (perfmodel.execute.launch.torchrun, perfmodel.execute.run_plans):
        monkeypatch.setattr(mod, "launch", _would_launch)
    monkeypatch.setattr(perfmodel.calibrate.machine.calibration, "_measure", _would_launch)
    monkeypatch.setattr(perfmodel.app.command, "serve", _would_launch)


PARSER = build_parser()
TABLE = ff.table(PARSER)
ACTIONS = ff.walk(PARSER)


def argv_with(key: tuple[str, str], value) -> tuple[list[str], list]:
    """The base invocation of `key`'s command with the bad value put in; (argv, files to write)."""
    cmd, flag = key
    kind = TABLE[key]
    argv = list(ff.BASES[kind.base or cmd])
    files = [value] if isinstance(value, ff.File) else []
    text = value.name if isinstance(value, ff.File) else value
    if key in ff.POSITIONAL:
        argv[ff.POSITIONAL[key]] = text
        return argv + list(kind.extra), files
    action = ACTIONS[key]
    if flag in argv and not isinstance(action, argparse._AppendAction):  # the bad value replaces the base's
        i = argv.index(flag)
        del argv[i:i + 2]
    if action.nargs == 0:  # a switch: the bad value is one given to it, --flag=VALUE
        return argv + [flag + text] + list(kind.extra), files
    return argv + [f"{flag}={text}"] + list(kind.extra), files  # '=': a value may start with '-'


def names_of(key, value) -> tuple[str, ...]:
    """What the message may name: the flag, its dest, the table's names; for a file, the file given."""
    cmd, flag = key
    dest = ACTIONS[key].dest
    given = value.name if isinstance(value, ff.File) else value
    files = (given,) if TABLE[key].path and len(given.strip()) > 2 else ()
    return (flag, dest, dest.replace("_", " "), dest.replace("_", "-"), *TABLE[key].names, *files)


def check(zoo, key, value):
    argv, files = argv_with(key, value)
    with workdir(zoo, files) as root:
        before = snapshot(root)
        r = call(argv)
        refused(r, names_of(key, value), before, snapshot(root), argv)


# ------------------------------------------------------------------------------------------- 1. every flag
def test_the_table_has_every_flag_of_every_subcommand():
    missing = sorted(set(ACTIONS) - set(TABLE))
    stale = sorted(set(TABLE) - set(ACTIONS))
    assert not missing, f"flags without a row in tests/fuzz_flags.py table(): {missing}"
    assert not stale, f"rows for flags the CLI no longer has: {stale}"


@pytest.mark.parametrize("prefix", ff.commands(PARSER), ids=lambda p: " ".join(p) or "perfmodel")
def test_help_of_every_subcommand(prefix):
    r = call([*prefix, "--help"])
    assert r.rc == 0 and "Traceback" not in r.err and r.out.startswith("usage:"), r.err[-2000:]


@pytest.mark.parametrize("base", sorted(ff.BASES))
def test_every_base_invocation_is_valid(zoo, no_launch, base):
    """The bad value is the only thing wrong: each base runs (or gets as far as the launch)."""
    with workdir(zoo):
        r = call(ff.BASES[base])
    assert r.rc == 0 or (r.rc == "traceback" and "AssertionError: would launch" in r.err), r.err[-3000:]


KEYS = sorted(TABLE)


def _id(key):
    return f"{key[0] or 'perfmodel'} {key[1]}"


@pytest.mark.parametrize("key", KEYS, ids=_id)
def test_fixed_bad_values_are_refused_in_one_line(zoo, no_launch, key):
    for value in TABLE[key].fixed:
        check(zoo, key, value)


@pytest.mark.parametrize("key", KEYS, ids=_id)
def test_generated_bad_values_are_refused_in_one_line(zoo, no_launch, key):
    kind = TABLE[key]

    @profile(8)
    @given(st.data())
    def inner(data):
        check(zoo, key, data.draw(kind.more, label=key[1]))

    inner()


# ------------------------------------------------------------------------------------------- 2. runs CSV and logs
@pytest.fixture(scope="session")
def run_logs(zoo) -> dict[str, bytes]:
    """logs/: a Megatron-LM log of each runs.csv row and test_run_logs' torchtitan log with a config dump; titan8/:
    its torchtitan log whose TOML lies beside it; old/: its older Megatron-LM log (no data_parallel_size)."""
    import pandas as pd

    from test_run_logs import MEGATRON_OLD, TITAN_DUMP, TITAN_TOML, TITAN_TOML_LOG

    rows = pd.read_csv(io.BytesIO(zoo["runs.csv"])).to_dict("records")
    logs = {f"logs/{r['row_id']}.log": fi.megatron_log(r).encode() for r in rows}
    return Files(logs | {"logs/titan.log": TITAN_DUMP.encode(), "titan8/t8.log": TITAN_TOML_LOG.encode(),
                         "titan8/t8.toml": TITAN_TOML.encode(), "old/old.log": MEGATRON_OLD.encode()})


def fitted_or_refused(argv, root: Path, before: dict) -> None:
    """calibrate --from-runs either writes a spec that loads, or refuses in one line and writes nothing."""
    from perfmodel.spec.hardware.system import load_hardware

    r = call(argv)
    if r.rc == 0:
        assert load_hardware(root / "fit.yaml").run_fit is not None, argv
        return
    refused(r, ("--from-runs", "run log"), before, snapshot(root), argv)


@profile(40)
@given(fi.runs_csv_mutation())
def test_runs_csv_mutations_fit_or_are_refused(zoo, mutate):
    with workdir(zoo, [ff.File("runs.csv", mutate(zoo["runs.csv"]))]) as root:
        fitted_or_refused(ff.BASES["calibrate-runs"], root, snapshot(root))


@profile(40)
@given(st.sampled_from(["logs/R0101.log", "logs/R0103.log", "logs/titan.log", "titan8/t8.log", "titan8/t8.toml",
                        "old/old.log"]),
       fi.log_mutation(),
       st.booleans())
def test_run_log_mutations_fit_or_are_refused(zoo, run_logs, name, mutate, alone):
    broken = mutate(run_logs[name].decode())
    files = [ff.File(k, v) for k, v in run_logs.items()] + [ff.File(name, broken if isinstance(broken, bytes)
                                                                     else broken.encode())]
    with workdir(zoo, files) as root:
        argv = ["calibrate", "--from-runs", name if alone else str(Path(name).parent), "--hardware", "dgx-h100",
                "--output", "fit.yaml"]
        fitted_or_refused(argv, root, snapshot(root))


def test_the_run_log_base_fits(zoo, run_logs):
    with workdir(zoo, [ff.File(k, v) for k, v in run_logs.items()]):
        r = call(["calibrate", "--from-runs", "logs", "--hardware", "dgx-h100", "--output", "fit.yaml"])
    assert r.rc == 0 and "from 5 measured runs" in r.out, r.err


# ------------------------------------------------------------------------------------------- 3. checkpoint saves
class Launched(Exception):
    """The recording launcher's stop: the parent got as far as the timed launch."""


@pytest.fixture(scope="session")
def saves(zoo, tmp_path_factory) -> dict[str, bytes]:
    """ck/cpu1/step-0002 and step-0004 written by the real executor (1 CPU rank, 4 steps, a save every 2)."""
    pytest.importorskip("torch")
    from perfmodel.execute.run_plans import run_plans

    tmp = tmp_path_factory.mktemp("saves")
    (tmp / "cpu1.json").write_bytes(zoo["cpu1.json"])
    run_plans([tmp / "cpu1.json"], 1, device="cpu", steps=4, warmup=1, checkpoint_dir=tmp / "ck", checkpoint_every=2,
              timeout_s=300, echo=lambda line: None)
    files = {str(p.relative_to(tmp)): p.read_bytes() for p in (tmp / "ck").rglob("*") if p.is_file()}
    assert sorted({Path(k).parent.name for k in files}) == ["step-0002", "step-0004"], files.keys()
    return Files(files)


@pytest.fixture
def record_launch(monkeypatch):
    """A launcher that runs nothing: it keeps each job file's contents (a CPU launch runs the memory phase's job,
    then the timed one's) and stops at the one that resumes."""
    import perfmodel.execute.run_plans

    jobs = []

    def fake(module, args, nproc, **kw):
        for job in args:
            jobs.append(json.loads(Path(job).read_text()))
            if jobs[-1]["plans"][0]["checkpoint"] is not None:
                raise Launched()

    monkeypatch.setattr(perfmodel.execute.run_plans, "launch", fake)
    return jobs


RESUME = ["execute", "cpu1.json", "--nproc", "1", "--device", "cpu", "--steps", "6", "--checkpoint-dir", "ck",
          "--checkpoint-every", "2", "--resume"]


def resumed_or_refused(jobs, root: Path, before: dict) -> str | None:
    """--resume after a change to the saves: refused in one line (nothing changed), or launched from a save whose
    directory, manifest and files agree; the name of that save (None: from step 0)."""
    from perfmodel.execute.checkpoint.manifest import torn

    r = call(RESUME)
    if r.rc == 2:
        refused(r, ("--resume", "--checkpoint-dir", "checkpoint"), before, snapshot(root), RESUME)
        return None
    assert r.rc == "traceback" and "Launched" in r.err.splitlines()[-1], f"rc {r.rc}: {r.err[-3000:]}"
    assert jobs, r.err
    resume = jobs[-1]["plans"][0]["checkpoint"]["resume"]
    if resume is None:
        return None
    directory = Path(resume["dir"])
    m, why = torn(directory)
    assert why is None and m.save.step == resume["step"] == int(directory.name.removeprefix("step-")), (resume, why)
    return directory.name


@profile(50)
@given(fi.manifest_mutation())
def test_a_corrupt_manifest_is_refused_for_the_save_before_it(zoo, saves, record_launch, mutate):
    with workdir(zoo, [ff.File(k, v) for k, v in saves.items()]) as root:
        manifest = root / "ck" / "cpu1" / "step-0004" / "manifest.json"
        manifest.write_bytes(mutate(manifest.read_bytes()))
        resumed_or_refused(record_launch, root, snapshot(root))


@pytest.mark.parametrize("kind", fi.TREE_KINDS)
def test_a_changed_checkpoint_directory_never_crashes_the_parent(zoo, saves, record_launch, kind):
    with workdir(zoo, [ff.File(k, v) for k, v in saves.items()]) as root:
        fi._tree(kind)(root / "ck" / "cpu1")
        used = resumed_or_refused(record_launch, root, snapshot(root))
    want = {"step-abc": "step-0002", "step--1": "step-0002", "huge-step": "step-0002", "file-for-dir": "step-0002",
            "manifest-dir": "step-0002", "torn-aside-file": "step-0002", "both-torn": None,
            "copied-manifest": "step-0002", "plan-dir-file": None}
    assert used == want.get(kind, "step-0004"), (kind, used)


def test_the_saves_resume_from_the_newest(zoo, saves, record_launch):
    with workdir(zoo, [ff.File(k, v) for k, v in saves.items()]) as root:
        assert resumed_or_refused(record_launch, root, snapshot(root)) == "step-0004"


# ------------------------------------------------------------------------------------------- 4. forecast inputs
STORE = {"write_gbps": 100.0, "read_gbps": 100.0, "node_gbps": 50.0, "devices_per_node": 8, "write_efficiency": 0.5,
         "read_efficiency": 0.5, "staging_gbps": 20.0}


@profile(40)
@given(st.sampled_from(sorted(STORE) + ["sources", "bogus"]), st.one_of(
    st.floats(), st.integers(), st.sampled_from([1e-308, 1e308, 0, -0.0, True, None, "", "fast", [1], {"a": 1}])))
def test_a_storage_file_gives_a_finite_forecast_or_is_refused(zoo, field, value):
    doc = json.dumps({**STORE, field: value})  # JSON is YAML; NaN and Infinity read as .nan / .inf do
    argv = [*ff.BASES["forecast"], "--storage", "store.yaml", "--format", "json"]
    with workdir(zoo, [ff.File("store.yaml", doc.encode())]) as root:
        before = snapshot(root)
        r = call(argv)
        if r.rc == 0:
            json.loads(r.out, parse_constant=lambda c: pytest.fail(f"{c} in the forecast of {doc}"))
        else:
            refused(r, ("--storage",), before, snapshot(root), argv)


# ------------------------------------------------------------------------------------------- the corpus
CASES = sorted(CORPUS.glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_case(zoo, request, path):
    """Each bug a fuzz run found, replayed: refused in one line naming `expect` (`rc` 0: runs and prints it; `saves`:
    that change to the checkpoint directory, resumed from the save `expect`). `xfail`: a bug whose fix belongs to a
    module this fuzz does not edit; strict, so that the fix shows here."""
    case = json.loads(path.read_text())
    if "xfail" in case:
        request.applymarker(pytest.mark.xfail(reason=case["xfail"], strict=True, raises=AssertionError))
    files = [ff.File(k, v["text"].encode() if "text" in v else base64.b64decode(v["base64"]))
             for k, v in case.get("files", {}).items()]
    if "saves" in case:
        files += [ff.File(k, v) for k, v in request.getfixturevalue("saves").items()]
        jobs = request.getfixturevalue("record_launch")
    else:
        request.getfixturevalue("no_launch")
    with workdir(zoo, files) as root:
        before = snapshot(root)
        if "saves" in case:
            fi._tree(case["saves"])(root / "ck" / "cpu1")
            assert case["argv"] == RESUME
            assert resumed_or_refused(jobs, root, snapshot(root)) == case["expect"]
            assert not any(os.path.lexists(root / g) for g in case.get("gone", [])), case["gone"]
            return
        r = call(case["argv"])
        if case.get("rc") == 0:
            assert r.rc == 0 and case["expect"] in r.out, r.err[-2000:]
            return
        assert case["expect"] in refused(r, [case["expect"]], before, snapshot(root), case["argv"])
