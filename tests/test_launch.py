"""launch._root_cause: which rank a failed torchrun run names (no torch needed)."""

from perfmodel.launch import _root_cause

# torchrun 2.13's summary when rank 1 was SIGKILLed and torchrun then stopped rank 0 with SIGTERM (seen on CI)
SUMMARY = """[perfmodel] peak memory first
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
perfmodel.execute.worker FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_09:18:05
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 20282)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 20282
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_09:18:05
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 20283)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 20283
=======================================================
"""


def test_the_killed_rank_is_named_not_the_one_torchrun_stopped():
    assert _root_cause(SUMMARY) == "rank 1 stopped with signal SIGKILL"


def test_an_error_exit_comes_after_a_signal_and_the_workers_line_is_kept():
    log = SUMMARY.replace("exitcode  : -9 (pid: 20283)  (SIGKILL)", "exitcode  : 1 (pid: 20283)")
    log = "[perfmodel] rank 1 failed: ValueError: bad\n" + log
    assert _root_cause(log) == "rank 1 stopped with exit code 1; rank 1 failed: ValueError: bad"
