"""export.checks.releases.run_checks reads the check process's answer, not its exit: a framework's native threads
may crash the interpreter after the answer is printed (CI saw DeepSpeed 0.19.8's gloo group call std::terminate),
and a process that dies before answering is run once more before the check is reported as failed."""

import json
import subprocess

from perfmodel.export.checks import releases

ANSWER = [{"accepted": True, "error": "", "checks": ["json.loads"]},
          {"accepted": False, "error": "ValueError: no", "checks": ["json.loads"]}]
CRASH = "terminate called without an active exception"


def _fake(monkeypatch, outcomes):
    calls = []

    def run(cmd, **kw):
        calls.append(json.loads(kw["input"]))
        stdout, rc = outcomes[len(calls) - 1]
        return subprocess.CompletedProcess(cmd, rc, stdout=stdout, stderr="log line\n" + CRASH)

    monkeypatch.setattr(releases, "fetch", lambda distribution: "/nowhere")
    monkeypatch.setattr(releases.subprocess, "run", run)
    return calls


def test_an_answer_stands_when_the_teardown_crashes(monkeypatch):
    calls = _fake(monkeypatch, [(json.dumps(ANSWER) + "\n", -6)])
    got = releases.run_checks("deepspeed", "0.19.8", "deepspeed==0.19.8", ["a", "b"])
    assert len(calls) == 1
    assert [r.accepted for r in got] == [True, False] and got[1].error == "ValueError: no"


def test_a_crash_before_the_answer_is_tried_once_more(monkeypatch):
    calls = _fake(monkeypatch, [('[{"accepted": tr', -6), (json.dumps(ANSWER), 0)])
    got = releases.run_checks("deepspeed", "0.19.8", "deepspeed==0.19.8", ["a", "b"])
    assert calls == [["a", "b"], ["a", "b"]]
    assert [r.accepted for r in got] == [True, False]


def test_two_crashes_report_the_check_as_failed_with_its_last_words(monkeypatch):
    calls = _fake(monkeypatch, [("", -6), ("", -6)])
    got = releases.run_checks("deepspeed", "0.19.8", "deepspeed==0.19.8", ["a", "b"])
    assert len(calls) == 2
    assert all(not r.accepted and r.error == "the check itself failed: log line | " + CRASH for r in got)
