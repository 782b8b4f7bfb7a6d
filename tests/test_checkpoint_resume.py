"""Checkpoint and resume (`execute --checkpoint-every K --checkpoint-dir D --resume`): a run stopped after a save
and resumed gives the losses of an uninterrupted run bit for bit, on CPU with gloo, 2 ranks, a tiny model; torn
saves are refused, one line each, for the save before them; a rank killed inside a save leaves nothing that
looks complete; bad flags are refused in one line with exit 2.

Three launches share a module fixture (each torchrun launch costs seconds): every plan uninterrupted with async
saves; the DDP plan killed inside its last save; every plan resumed, DDP after the kill, the others from copies of
the first launch's saves whose newest is torn, each a different way.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # CI installs torch (README test command); the core install does not

from perfmodel.cli.main import main  # noqa: E402
from perfmodel.execute.run_plans import run_plans  # noqa: E402
from perfmodel.execute.checkpoint.manifest import MANIFEST, Manifest, plan_checkpoints  # noqa: E402
from perfmodel.execute.launch.torchrun import RunFailed  # noqa: E402
from perfmodel.spec.measurement import Measurement, load_measurement, measurement_path  # noqa: E402
from perfmodel.spec.plan.file import write_plan_file  # noqa: E402

from test_execute import LLAMA, _check, plan_file, reference_losses, write_all  # noqa: E402

STEPS, EVERY = 4, 2
PLANS = {"ddp": dict(gpus=2), "fsdp": dict(gpus=2, zero=3), "tp": dict(gpus=2, tp=2, sequence_parallel=True),
         "pp": dict(gpus=2, pp=2), "zero1": dict(gpus=2, zero=1)}


def _flip_byte(d: Path) -> None:
    p = d / "__0_0.distcp"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))


# How each plan's newest save (step-0004) is torn, and the reason its refusal must give.
TORN = {
    "fsdp": (lambda d: (d / "__1_0.distcp").unlink(), "file __1_0.distcp is missing"),
    "tp": (lambda d: (d / MANIFEST).unlink(), "manifest.json is missing"),
    "pp": (_flip_byte, "file __0_0.distcp fails its SHA-256 check"),
    "zero1": (lambda d: os.truncate(d / "__1_0.distcp", 1000), "file __1_0.distcp has 1000 bytes"),
}


def _run(paths, tmp: Path, tag: str, **kw):
    outs = [tmp / f"{p.stem}.{tag}.json" for p in paths]
    ms = run_plans(paths, 2, device="cpu", steps=STEPS, warmup=1, timeout_s=300, outputs=outs, **kw)
    return {p.stem: m for p, m in zip(paths, ms)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    paths = write_all(tmp, {name: plan_file(LLAMA, **kw) for name, kw in PLANS.items()})
    ref = _run(paths, tmp, "ref", checkpoint_dir=tmp / "ref", checkpoint_every=EVERY, checkpoint_async=True)

    ck = tmp / "ck"
    os.environ["PERFMODEL_TEST_FAULT"] = f"kill:1:commit{STEPS}"  # rank 1 dies inside the save after step 4
    start = time.monotonic()
    try:
        with pytest.raises(RunFailed) as killed:
            _run(paths[:1], tmp, "killed", checkpoint_dir=ck, checkpoint_every=EVERY)
    finally:
        del os.environ["PERFMODEL_TEST_FAULT"]
    kill = {"error": str(killed.value), "seconds": time.monotonic() - start,
            "left": sorted(p.name for p in (ck / "ddp").iterdir())}
    # What a parent killed by SIGKILL (which cannot clean up) would leave: the resume removes it
    (ck / "ddp" / "step-0004.tmp").mkdir()
    (ck / "ddp" / "step-0004.tmp" / "__0_0.distcp").write_bytes(b"partial")

    for name, (tear, _) in TORN.items():
        shutil.copytree(tmp / "ref" / name, ck / name)
        tear(ck / name / "step-0004")
    lines: list[str] = []
    resumed = _run(paths, tmp, "resumed", checkpoint_dir=ck, checkpoint_every=EVERY, resume=True, echo=lines.append)
    return {"tmp": tmp, "paths": dict(zip(PLANS, paths)), "ref": ref, "resumed": resumed, "kill": kill,
            "lines": lines, "ck": ck}


@pytest.mark.parametrize("name", list(PLANS))
def test_a_resumed_run_gives_the_uninterrupted_losses_exactly(runs, name):
    ref, resumed = runs["ref"][name], runs["resumed"][name]
    assert resumed.checkpoint.resumed_from_step == 2
    assert resumed.losses == ref.losses  # bitwise: every step, the two before the save and the two after it
    assert len(set(ref.losses)) == STEPS  # and they move
    assert all(len(r.step_times_s) == STEPS for r in resumed.ranks)


def test_saving_does_not_change_training(runs):
    """The uninterrupted run, saving asynchronously while it trains, still trains as one process does."""
    _check(runs["ref"]["fsdp"].model_copy(update={"losses": runs["ref"]["fsdp"].losses[:3]}),
           {LLAMA.name: reference_losses(LLAMA)})


def test_a_rank_killed_inside_a_save_leaves_only_the_save_before(runs):
    kill = runs["kill"]
    assert "rank 1 was killed by SIGKILL during the commit of the save after step 4" in kill["error"], kill["error"]
    assert "resume from step-0002" in kill["error"], kill["error"]
    assert kill["seconds"] < 60
    assert kill["left"] == ["step-0002"]  # the torn save is never named step-0004, and the parent removed it
    assert not (runs["tmp"] / "ddp.killed.json").exists()
    assert any("removed" in line and "step-0004.tmp" in line for line in runs["lines"])


@pytest.mark.parametrize("name", list(TORN))
def test_a_torn_save_is_refused_in_one_line_and_the_one_before_used(runs, name):
    directory = runs["ck"] / name / "step-0004"
    want = f"checkpoint {str(directory)!r} refused: {TORN[name][1]}"
    assert any(line.startswith(want) for line in runs["lines"]), runs["lines"]
    assert any(n.startswith(want) for n in runs["resumed"][name].notes)
    assert (runs["ck"] / name / "step-0004.torn").is_dir()
    # the resumed run saved step 4 again, complete
    m = Manifest.model_validate_json((directory / MANIFEST).read_text())
    assert m.save.step == 4 and m.identity.world_size == 2


def test_measurements_record_the_saves_and_the_resume(runs, tmp_path):
    ref = runs["ref"]["ddp"].checkpoint
    assert ref.mode == "async" and ref.every == EVERY and ref.resumed_from_step is None and ref.read_s is None
    assert [s.step for s in ref.saves] == [2, 4]
    assert all(s.bytes > 0 and s.write_s > 0 and 0 < s.blocking_s for s in ref.saves)
    resumed = runs["resumed"]["ddp"].checkpoint
    assert resumed.mode == "sync" and resumed.read_s > 0
    # step 2's record comes from the killed launch (its manifest), step 4's from the resumed one
    assert [s.step for s in resumed.saves] == [2, 4]
    m = Manifest.model_validate_json((runs["ck"] / "ddp" / "step-0002" / MANIFEST).read_text())
    assert resumed.saves[0] == m.save and sum(f.bytes for f in m.files) == m.save.bytes
    assert {f.name for f in m.files} == {".metadata", "__0_0.distcp", "__1_0.distcp"}
    # a measurement written before checkpoints existed still loads
    old = runs["ref"]["ddp"].model_dump(exclude={"checkpoint"})
    assert Measurement(**old).checkpoint is None


def test_validate_prints_the_saves_against_the_forecast(runs, monkeypatch, capsys, tmp_path):
    got = {}

    def fake_run_plans(paths, nproc, **kw):  # the resumed launch's measurements stand in for a run
        got.update(kw)
        return [runs["resumed"][Path(p).stem] for p in paths]

    monkeypatch.setattr("perfmodel.execute.run_plans.run_plans", fake_run_plans)
    paths = [str(runs["paths"][n]) for n in ("ddp", "fsdp")]
    assert main(["validate", *paths, "--steps", "4", "--warmup", "1", "--checkpoint-every", "2",
                 "--out-dir", str(tmp_path / "v")]) == 0
    out = capsys.readouterr().out
    assert got["checkpoint_every"] == 2 and got["checkpoint_dir"] == tmp_path / "v" / "checkpoints"
    assert "checkpoints (times predicted for the bytes written" in out
    lines = out.splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("checkpoints (times"))) + 2:][:2]
    assert [row.split()[:2] for row in table] == [["ddp", "2"], ["fsdp", "2"]]  # plan, saves
    assert all(row.split()[-1].endswith("s") for row in table)  # resumed: a read time was measured
    assert "run.reliability.DEFAULT_STORAGE (none in" in out  # the CPU spec names no store: which tier is said
    assert "14 B/param" in out and "12 B/param" in out


def _exit_code(argv: list[str]) -> int:
    """The CLI's exit code, argparse's own refusals (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("args, says", [
    (["--checkpoint-every", "0", "--checkpoint-dir", "D"], "--checkpoint-every must be a positive integer, got 0"),
    (["--checkpoint-every", "-2", "--checkpoint-dir", "D"], "--checkpoint-every must be a positive integer"),
    (["--checkpoint-every", "1.5", "--checkpoint-dir", "D"], "got '1.5'"),
    (["--checkpoint-every", "9", "--checkpoint-dir", "D"], "valid: a whole number of steps from 1 to --steps (4)"),
    (["--checkpoint-every", "2"], "--checkpoint-every needs --checkpoint-dir DIR"),
    (["--resume"], "--resume needs --checkpoint-dir DIR"),
    (["--checkpoint-dir", "D"], "alone does nothing"),
    (["--checkpoint-every", "2", "--checkpoint-dir", "FILE"], "is a file; valid: a directory"),
    (["--checkpoint-every", "2", "--checkpoint-dir", "FILE/sub"], "is not writable"),
    (["--checkpoint-every", "2", "--checkpoint-dir", "D", "--rounds", "2"], "valid: --rounds 1"),
    (["--checkpoint-every", "2", "--checkpoint-dir", "REF"], "holds saves of an earlier run"),
    (["--resume", "--checkpoint-dir", "REF"], "is at step 4, --steps 4 leaves nothing to run"),
    (["--resume", "--checkpoint-dir", "REF", "--steps", "6", "--seed", "1"], "was written with --seed 0"),
])
def test_bad_checkpoint_flags_are_one_line_and_exit_2(runs, tmp_path, capsys, args, says):
    path = runs["paths"]["ddp"]
    (tmp_path / "FILE").write_text("x")
    subs = {"D": str(tmp_path / "D"), "FILE": str(tmp_path / "FILE"), "FILE/sub": str(tmp_path / "FILE" / "sub"),
            "REF": str(runs["tmp"] / "ref")}
    args = [subs.get(a, a) for a in args]
    out = tmp_path / "m.json"
    before = sorted(p.name for p in (runs["tmp"] / "ref" / "ddp").iterdir())
    assert _exit_code(["execute", str(path), "--nproc", "2", "--device", "cpu", "--steps", "4", "--warmup", "1",
                       "--output", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err and "Traceback" not in err, err
    assert not out.exists() and not (tmp_path / "D").exists()
    assert sorted(p.name for p in (runs["tmp"] / "ref" / "ddp").iterdir()) == before


def test_a_save_of_another_plan_is_refused(runs, tmp_path, capsys):
    """Same file name (so the same sub-directory), other contents: not this run's save."""
    other = write_plan_file(plan_file(LLAMA, gpus=2, micro_batch=1), tmp_path / "ddp.json")
    assert main(["execute", str(other), "--nproc", "2", "--device", "cpu", "--steps", "6", "--resume",
                 "--checkpoint-dir", str(runs["tmp"] / "ref")]) == 2
    err = capsys.readouterr().err
    assert "was written with plan file" in err and "valid: the --checkpoint-dir of this run" in err
    assert not measurement_path(other).exists()


def test_resume_without_a_save_starts_from_step_0(runs, tmp_path):
    """Decided: --resume with nothing usable runs from step 0 with a note (a job script may always pass it)."""
    (cks,) = plan_checkpoints([runs["paths"]["ddp"]], tmp_path / "empty", 2, True, "sync", steps=4, rounds=1,
                              world_size=2, seed=0, data=None)
    assert cks["resume"] is None
    assert any("no complete checkpoint of ddp" in n and "started from step 0" in n for n in cks["notes"])
    assert not (tmp_path / "empty").exists()  # checking writes nothing


def test_several_plans_save_side_by_side(runs):
    assert sorted(p.name for p in (runs["tmp"] / "ref").iterdir()) == sorted(PLANS)
    assert load_measurement(runs["tmp"] / "tp.ref.json").checkpoint.directory.endswith("ref/tp")
