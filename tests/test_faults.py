"""Every way an executor run can fail ends cleanly, on CPU with gloo, 2 and 4 ranks, a tiny model.

Each fault is real (execute/faults.py: SIGKILL, SIGSTOP, an exception, an address-space limit the step passes,
a file-size limit a write passes; SIGINT and SIGTERM to the parent process). For each: the run ends within its
stated bound (BOUND_S after the fault; --timeout plus BOUND_S for a stalled rank), with one message that names
the rank, the step (or save) and the cause; no process of the run survives (found by a tag in their environment,
whatever their parent now is); no measurement or unfinished save is left; and the newest complete save resumes.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # CI installs torch (README test command); the core install does not

from perfmodel.execute.run_plans import run_plans  # noqa: E402
from perfmodel.execute.faults import LINE, VAR  # noqa: E402
from perfmodel.execute.launch.torchrun import RunFailed  # noqa: E402
from perfmodel.spec.measurement import measurement_path  # noqa: E402
from perfmodel.spec.plan.file import write_plan_file  # noqa: E402
from perfmodel.execute.launch.processes import tagged  # noqa: E402

from test_execute import LLAMA, plan_file  # noqa: E402

BOUND_S = 15.0  # from the fault to the parent's return: torchrun notices in 0.2 s, stops the rest within 5 s
STEPS, EVERY = 8, 2
SEED = int(os.environ.get("PERFMODEL_FAULT_SEED", random.SystemRandom().randrange(10**6)))
RNG = random.Random(SEED)  # which rank and step a kill hits: a new draw each run, reproducible from the seed


@pytest.fixture
def tag(monkeypatch):
    """A tag every process this test starts inherits (independent of the launcher's own)."""
    value = uuid.uuid4().hex
    monkeypatch.setenv("PERFMODEL_TEST_TAG", value)
    yield value
    assert not [p for p in tagged("PERFMODEL_TEST_TAG", value) if p.state != "Z"], "processes survived the run"


def _plan(tmp: Path, name: str, **kw) -> Path:
    return write_plan_file(plan_file(LLAMA, **{"gpus": 2, **kw}), tmp / f"{name}.json")


def _fail(tmp: Path, path: Path, nproc: int, fault: str, monkeypatch, **kw) -> tuple[str, float]:
    """Run with the fault; the one-line message, and the seconds from the fault to the return."""
    monkeypatch.setenv(VAR, fault)
    kw = {"steps": STEPS, "warmup": 1, "timeout_s": 300, "checkpoint_dir": tmp / "ck", "checkpoint_every": EVERY,
          **kw}
    with pytest.raises(RunFailed) as err:
        run_plans([path], nproc, device="cpu", log_dir=tmp, **kw)
    ended = time.time()
    monkeypatch.delenv(VAR)
    met = [float(m) for log in tmp.glob("*.log") for m in re.findall(re.escape(LINE) + r".* at ([\d.]+)",
                                                                      log.read_text())]
    assert met, f"the fault {fault} was never met: the run failed before it: {err.value}"
    message = str(err.value)
    print(f"\n{fault}: ended {ended - max(met):.1f} s after the fault: {message}")  # shown with pytest -s
    assert "\n" not in message and "Traceback" not in message, message
    return message, ended - max(met)


def _nothing_partial(tmp: Path, path: Path) -> None:
    """No measurement (final or the CPU path's hidden parts), no unfinished save."""
    assert not measurement_path(path).exists()
    left = [p.relative_to(tmp) for p in tmp.rglob("*")
            if p.name.endswith(".tmp") or p.name.startswith(".") and p.name != ".metadata"]  # DCP's own index
    assert not left, left


def _resumes(tmp: Path, path: Path, nproc: int, step: int | None) -> None:
    """The newest complete save (at `step`; None: none) resumes, and the run completes."""
    m = run_plans([path], nproc, device="cpu", steps=STEPS, warmup=1, timeout_s=300, checkpoint_dir=tmp / "ck",
                  checkpoint_every=EVERY, resume=True)[0]
    assert m.checkpoint.resumed_from_step == step
    assert len(m.losses) == STEPS and all(len(r.step_times_s) == STEPS for r in m.ranks)


def test_a_rank_killed_at_a_random_step(tmp_path, monkeypatch, tag):
    path = _plan(tmp_path, "killed", gpus=4, tp=2)
    rank, step = RNG.randrange(4), RNG.randrange(3, STEPS + 1)  # steps 1-2 also run in the untimed memory phase
    message, took = _fail(tmp_path, path, 4, f"kill:{rank}:step{step}", monkeypatch)
    seed = f"(PERFMODEL_FAULT_SEED={SEED})"
    assert f"rank {rank} was killed by SIGKILL during step {step} of killed.json" in message, (message, seed)
    assert "out-of-memory killer" in message  # what usually sends SIGKILL
    assert took < BOUND_S, (took, seed)
    _nothing_partial(tmp_path, path)
    last = (step - 1) // EVERY * EVERY  # killed as step k starts: saves after steps 2, 4, 6 that are < k
    assert f"resume from step-{last:04d}" in message if last else "no complete save" in message, (message, seed)
    _resumes(tmp_path, path, 4, last or None)


def test_a_stalled_rank_is_named_when_the_run_passes_its_timeout(tmp_path, monkeypatch, tag):
    path = _plan(tmp_path, "stalled")
    limit = 30.0
    start = time.monotonic()
    message, _ = _fail(tmp_path, path, 2, "stop:1:step3", monkeypatch, timeout_s=limit)
    took = time.monotonic() - start
    assert "passed its limit of 30 s" in message and "rank 1 was stopped (SIGSTOP" in message, message
    assert "during step 3 of stalled.json" in message, message
    assert limit <= took < limit + BOUND_S, took
    _nothing_partial(tmp_path, path)


def test_a_stalled_rank_is_named_when_its_peers_collectives_time_out(tmp_path, monkeypatch, tag):
    """With the collectives' timeout (pg_timeout_s) shorter than the run's limit, the peers fail first: the
    message still names the stalled rank (seen stopped by the launcher), not the peers that gave up on it."""
    path = _plan(tmp_path, "stalled")
    message, took = _fail(tmp_path, path, 2, "stop:0:step3", monkeypatch, pg_timeout_s=10)
    assert "rank 0 was stopped (SIGSTOP" in message and "during step 3 of stalled.json" in message, message
    assert "its peers waited for it" in message, message
    assert 10 <= took < 10 + BOUND_S, took
    _nothing_partial(tmp_path, path)


def test_an_exception_names_the_rank_the_step_and_the_error(tmp_path, monkeypatch, tag):
    path = _plan(tmp_path, "raises")
    message, took = _fail(tmp_path, path, 2, "raise:0:step5", monkeypatch)
    assert "rank 0 failed during step 5 of raises.json: RuntimeError: injected fault at step5" in message, message
    assert took < BOUND_S, took
    _nothing_partial(tmp_path, path)


def test_a_rank_out_of_memory_says_so(tmp_path, monkeypatch, tag):
    path = _plan(tmp_path, "oom", zero=3)
    message, took = _fail(tmp_path, path, 2, "oom:1:step4", monkeypatch)
    assert "rank 1 failed during step 4 of oom.json: out of host memory (tried to allocate 1073741824 bytes" \
        in message, message
    assert took < BOUND_S, took
    _nothing_partial(tmp_path, path)
    _resumes(tmp_path, path, 2, 2)  # three steps done: the save after step 2


def test_a_disk_full_inside_a_save_keeps_the_save_before(tmp_path, monkeypatch, tag):
    path = _plan(tmp_path, "fullsave")
    message, took = _fail(tmp_path, path, 2, "fsize:1:save4", monkeypatch)
    assert "during the save after step 4 of fullsave.json" in message, message
    assert "the checkpoint failed on rank 1: a file passed the file-size limit" in message, message
    assert "resume from step-0002" in message, message
    assert took < BOUND_S, took
    _nothing_partial(tmp_path, path)
    assert sorted(p.name for p in (tmp_path / "ck" / "fullsave").iterdir()) == ["step-0002"]
    _resumes(tmp_path, path, 2, 2)


def test_a_disk_full_while_the_measurement_is_written_leaves_none(tmp_path, monkeypatch, tag):
    path = _plan(tmp_path, "fullwrite")
    message, took = _fail(tmp_path, path, 2, "fsize:0:write", monkeypatch, checkpoint_dir=None,
                          checkpoint_every=None)
    assert "rank 0 failed during writing the measurement of fullwrite.json: a file passed the file-size limit" \
        in message, message
    assert took < BOUND_S, took
    _nothing_partial(tmp_path, path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_to_the_parent_stops_every_rank(tmp_path, tag, sig):
    """The CLI as a user runs it, in a process of its own; the signal to that process only (a terminal's Ctrl-C
    reaches the foreground process group, which the launch's sessions are not in)."""
    path = _plan(tmp_path, "stopped")
    steps, every = 240, 60
    cmd = [sys.executable, "-m", "perfmodel", "execute", str(path), "--nproc", "2", "--device", "cpu", "--steps",
           str(steps), "--warmup", "1", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", str(every)]
    # SIGINT back to its default in the child: a test run started in the background of a non-interactive shell
    # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt (the user's terminal never does that)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = tmp_path / "ck" / "stopped" / f"step-{every:04d}"
    deadline = time.monotonic() + 120
    while not first.is_dir() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.is_dir(), proc.communicate()
    sent = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    name = "Ctrl-C (SIGINT)" if sig == signal.SIGINT else "SIGTERM"
    assert re.match(rf"error: interrupted by {re.escape(name)} (during|with rank 0 during) step \d+ of stopped\.json",
                    errors[0]), errors[0]
    assert "no measurement written" in errors[0] and "resume from step-" in errors[0], errors[0]
    assert took < BOUND_S, took
    _nothing_partial(tmp_path, path)
    if sig == signal.SIGTERM:
        return  # the resume after an interruption is the same either way: checked once, after Ctrl-C
    saved = max(int(p.name[5:]) for p in (tmp_path / "ck" / "stopped").iterdir())
    m = run_plans([path], 2, device="cpu", steps=steps, warmup=1, timeout_s=300, checkpoint_dir=tmp_path / "ck",
                  checkpoint_every=every, resume=True)[0]
    assert m.checkpoint.resumed_from_step == saved and len(m.losses) == steps


def test_validate_reports_a_failed_run_in_one_line_and_writes_no_table(tmp_path, monkeypatch, capsys, tag):
    from perfmodel.cli.main import main

    path = _plan(tmp_path, "validated")
    monkeypatch.setenv(VAR, "raise:1:step2")
    rc = main(["validate", str(path), "--out-dir", str(tmp_path / "out"), "--steps", "4", "--warmup", "1"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 1 and len(errors) == 1 and "Traceback" not in err, err
    assert "rank 1 failed during step 2 of validated.json: RuntimeError: injected fault" in errors[0], errors[0]
    assert not list((tmp_path / "out").glob("*.csv")) and not list((tmp_path / "out").glob("*.measured.json"))
    _nothing_partial(tmp_path, path)


def test_calibrate_names_a_benchmark_rank_killed_from_outside(tmp_path, tag):
    """A rank killed by another process (as the out-of-memory killer would), not by itself: found by its tag."""
    out = tmp_path / "cpu.yaml"
    proc = subprocess.Popen([sys.executable, "-m", "perfmodel", "calibrate", "--device", "cpu", "--nproc", "2",
                             "--quick", "--output", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    deadline, victim = time.monotonic() + 120, None
    while victim is None and proc.poll() is None and time.monotonic() < deadline:
        victim = next((p for p in tagged("PERFMODEL_TEST_TAG", tag) if p.rank == 1), None)
        time.sleep(0.1)
    assert victim is not None, proc.communicate()
    time.sleep(RNG.uniform(2.0, 6.0))  # somewhere in start-up or the benchmarks
    os.kill(victim.pid, signal.SIGKILL)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in err, err
    assert "rank 1 was killed by SIGKILL" in errors[0], errors[0]
    assert took < BOUND_S, took
    assert not out.exists() and not out.with_suffix(".raw.json").exists()


def test_a_parent_killed_outright_takes_the_run_with_it(tmp_path, tag):
    """SIGKILL to the parent runs no handler: torchrun gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and stops
    its workers, and a worker's next progress line meets the broken pipe (either is enough here); nothing is left
    running, and no measurement is written."""
    path = _plan(tmp_path, "orphaned")
    proc = subprocess.Popen([sys.executable, "-m", "perfmodel", "execute", str(path), "--nproc", "2", "--device",
                             "cpu", "--steps", "2000", "--warmup", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while len([p for p in tagged("PERFMODEL_TEST_TAG", tag) if p.rank is not None]) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.kill()
    proc.communicate(timeout=30)
    sent = time.monotonic()
    while [p for p in tagged("PERFMODEL_TEST_TAG", tag) if p.state != "Z"] and time.monotonic() < sent + 60:
        time.sleep(0.1)
    assert time.monotonic() - sent < BOUND_S
    assert not measurement_path(path).exists()


def test_a_parent_out_of_disk_writes_nothing_and_says_which_file(tmp_path):
    """The parent's own writes (a plan file here) under a file-size limit: one line naming the file, exit 1."""
    import resource

    out = tmp_path / "plan.json"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    done = subprocess.run([sys.executable, "-m", "perfmodel", "predict", "--save-plan", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, preexec_fn=limit, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: File too large writing {out}"), done.stderr
    assert list(tmp_path.iterdir()) == []
