"""execute.launch.torchrun._root_cause and execute.launch.torchrun.describe: which rank, where and why a failed torchrun run names (no torch
needed); CUDA's and NCCL's own error texts map to the same messages as the CPU faults of tests/test_faults.py."""

import pytest

from perfmodel.execute.launch.torchrun import _root_cause, describe

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
    at = {0: "step 3 of p.json", 1: "step 2 of p.json"}
    assert _root_cause(SUMMARY, at) == ("rank 1 was killed by SIGKILL during step 2 of p.json (sent from outside the "
                                        "run: the kernel's out-of-memory killer, a scheduler, or kill -9)")


def test_a_workers_own_line_names_its_place_and_cause():
    log = SUMMARY.replace("exitcode  : -9 (pid: 20283)  (SIGKILL)", "exitcode  : 1 (pid: 20283)")
    log = ("[perfmodel] rank 0 failed during step 3 of p.json: a peer rank's connection closed (it died)\n"
           "[perfmodel] rank 1 failed during step 2 of p.json: ValueError: bad\n" + log)
    assert _root_cause(log) == "rank 1 failed during step 2 of p.json: ValueError: bad"


def test_a_rank_seen_stopped_is_named_before_the_peers_that_timed_out():
    log = "[perfmodel] rank 0 failed during step 3 of p.json: a collective timed out after 120000 ms\n" + SUMMARY
    assert _root_cause(log, {0: "step 3 of p.json", 1: "step 3 of p.json"}, {1: "T"}) == (
        "rank 1 was stopped (SIGSTOP, SIGTSTP or a debugger) during step 3 of p.json; its peers waited for it")


# torch 2.x's texts (c10/cuda/CUDACachingAllocator.cpp, ProcessGroupNCCL.cpp, gloo, glibc / DefaultCPUAllocator)
@pytest.mark.parametrize("text, cause", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 "
     "GiB of which 1.06 GiB is free.", "out of GPU memory (tried to allocate 2.00 GiB)"),
    ("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
     "out of GPU memory (in a CUDA library)"),
    ("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes. Error code "
     "12 (Cannot allocate memory)", "out of host memory (tried to allocate 1073741824 bytes; the address-space "
     "limit, ulimit -v, or the machine's RAM)"),
    ("OSError: [Errno 28] No space left on device: '/ck/step-0004.tmp/__0_0.distcp'",
     "the disk is full (No space left on device)"),
    ("OSError: [Errno 27] File too large", "a file passed the file-size limit (ulimit -f) or the file system's "
     "largest file"),
    ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1024, "
     "NumelOut=1024, Timeout(ms)=120000) ran for 120043 milliseconds before timing out.",
     "an NCCL ALLREDUCE timed out (a peer rank stopped, hung or died; NCCL's watchdog)"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
     "NCCL failed (a peer rank died, or the network between the GPUs; NCCL_DEBUG=INFO says more)"),
    ("RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 120000ms for recv operation to "
     "complete", "a collective timed out after 120000 ms waiting for a peer rank (stopped, hung or dead)"),
    ("RuntimeError: [gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:7331: Connection reset by peer",
     "a peer rank's connection closed (it died)"),
    ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at pair.cc]",
     "std::terminate in native code (terminate called after throwing an instance of 'gloo::EnforceNotMet')"),
    ("terminate called without an active exception", "std::terminate in native code (terminate called without an "
     "active exception)"),
    ("free(): invalid pointer\n", "the C heap was corrupted (glibc: free(): invalid pointer)"),
    ("ValueError: something else", None),
])
def test_cuda_nccl_and_cpu_error_texts_map_to_one_cause(text, cause):
    assert describe(text) == cause


def test_a_cuda_oom_in_a_workers_line_becomes_the_message():
    log = SUMMARY.replace("exitcode  : -9 (pid: 20283)  (SIGKILL)", "exitcode  : 1 (pid: 20283)")
    log = "[perfmodel] rank 1 failed during step 5 of big.json: out of GPU memory (tried to allocate 2.00 GiB)\n" + log
    assert _root_cause(log) == "rank 1 failed during step 5 of big.json: out of GPU memory (tried to allocate 2.00 GiB)"


def test_an_nccl_watchdog_abort_is_named_from_the_log():
    """NCCL's watchdog aborts the process (SIGABRT) rather than raising: the cause comes from the log."""
    log = ("[rank1]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, "
           "Timeout(ms)=120000) ran for 120010 milliseconds before timing out.\n"
           + SUMMARY.replace("exitcode  : -9 (pid: 20283)  (SIGKILL)", "exitcode  : -6 (pid: 20283)  (SIGABRT)"))
    assert _root_cause(log, {1: "step 4 of p.json"}) == (
        "rank 1 was killed by SIGABRT during step 4 of p.json: an NCCL ALLGATHER timed out (a peer rank stopped, hung "
        "or died; NCCL's watchdog)")


# execute.launch.agent's ranks are forked: torch's fork context names one failed rank, the first it joins (here rank 0,
# which lost its peer), and the agent then lists every rank as it ended (rank 1 killed first)
FORKED = """[perfmodel] rank 0 failed during step 1 of p.json: a peer rank's connection closed (it died)
Failures: the ranks as they ended (perfmodel.execute.launch.agent)
[0]:
  rank      : 1
  exitcode  : -9 (pid: 31002)
[1]:
  rank      : 0
  exitcode  : 1 (pid: 31001)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
  <NO_OTHER_FAILURES>
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 31001)
"""


def test_a_forked_launch_names_the_killed_rank_not_the_peer_torch_joined_first():
    at = {0: "step 1 of p.json", 1: "step 1 of p.json"}
    assert _root_cause(FORKED, at).startswith("rank 1 was killed by SIGKILL during step 1 of p.json")


def test_aforked_rank_is_found_by_the_name_it_gives_itself(tmp_path, monkeypatch):
    from perfmodel.execute.launch import processes

    for pid, name in ((11, "pm-rank-3"), (12, "python")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
    monkeypatch.setattr(processes, "PROC", tmp_path)
    assert processes.forked_rank(11) == "3" and processes.forked_rank(12) is None
    assert processes.forked_rank(13) is None  # gone


def test_cpu_ranks_are_forked_by_the_agent_and_gpu_ranks_start_under_torchrun():
    from perfmodel.execute.launch.torchrun import torchrun_command

    cpu = torchrun_command("perfmodel.execute.worker", ["job.json"], 4, forked=True)
    gpu = torchrun_command("perfmodel.execute.worker", ["job.json"], 4, ["--nnodes=2", "--rdzv-endpoint=h:29500"])
    assert cpu[1:3] == ["-m", "perfmodel.execute.launch.agent"] and "--standalone" in cpu and "--nproc-per-node=4" in cpu
    assert gpu[1:3] == ["-m", "torch.distributed.run"] and "--nnodes=2" in gpu and "--standalone" not in gpu
    assert cpu[-3:] == gpu[-3:] == ["-m", "perfmodel.execute.worker", "job.json"]


def test_a_rank_stuck_in_start_up_writes_its_stack(tmp_path):
    """A rank that has not joined its process group after 3/4 of the group's timeout writes every thread's stack to
    its log and goes on (worker.watch_start_up; main cancels it once joined): here a 2 s timeout, so the dump
    comes at 1.5 s, from a rank asleep in its start-up."""
    import subprocess
    import sys

    code = ("import time\nfrom perfmodel.execute.worker import watch_start_up\n"
            "def start_up():\n    time.sleep(2.5)\n"
            "watch_start_up(2.0)\nstart_up()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    assert "Timeout (0:00:01.500000)!" in out.stderr and 'line 4 in start_up' in out.stderr
