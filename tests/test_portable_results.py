"""No committed result, plan, doc or notebook carries an absolute path of the machine it was made on (the running
user's home, or this checkout's own folder), and the writers keep it so: a measurement names its plan relative to
itself, a calibrated spec cites its command without its output's folder, a log has no machine path."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.files import portable_text, relative_ref

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("benchmarks/results", "strategies", "docs", "notebooks")


def files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", *FOLDERS],
                             cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        return [ROOT / n for n in out.decode().split("\0") if n and (ROOT / n).is_file()]
    except (OSError, subprocess.SubprocessError):
        return [p for f in FOLDERS for p in (ROOT / f).rglob("*") if p.is_file()]


def machine_paths() -> list[str]:
    out = [str(ROOT), os.path.realpath(ROOT)]
    home = str(Path.home())
    return sorted({p for p in out + ([home, os.path.realpath(home)] if len(home) > 1 else [])}, key=len)


def test_no_committed_file_names_this_machines_folders():
    pattern = re.compile("|".join(re.escape(p) + r"(?![\w.-])" for p in machine_paths()))
    found = []
    for path in files():
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        text = data.decode("utf-8", errors="ignore")
        for m in pattern.finditer(text):
            found.append(f"{path.relative_to(ROOT)}: ...{text[max(0, m.start() - 40):m.end() + 40]!r}...")
            break
    assert len(files()) > 50
    assert not found, "absolute paths of this machine in committed files:\n" + "\n".join(found[:20])


def test_a_reference_is_relative_to_the_file_that_holds_it(tmp_path):
    (tmp_path / "runs").mkdir()
    assert relative_ref(tmp_path / "plan.json", tmp_path / "plan.measured.json") == "plan.json"
    assert relative_ref(tmp_path / "plan.json", tmp_path / "runs" / "plan.measured.json") == "../plan.json"


def test_portable_text_hides_this_machines_places():
    text = f"$ {sys.executable} -m x {os.getcwd()}/a.json {Path.home()}/b"
    out = portable_text(text)
    assert str(Path.home()) not in out.replace("~", "") or len(str(Path.home())) <= 1
    assert "$PYTHON" in out and "./a.json" in out
    # whole path components only: /tmpfs and /var/tmp are not the temporary folder
    import tempfile

    tmp = tempfile.gettempdir()
    assert portable_text(f"{tmp}fs/x /var{tmp}/y {tmp}/z") == f"{tmp}fs/x /var{tmp}/y $TMP/z"


def test_an_old_measurement_with_an_absolute_plan_path_reads_and_says_so(tmp_path, capsys):
    from perfmodel.spec.measurement import load_measurement

    src = next((ROOT / "benchmarks" / "results" / "validation" / "cpu-vm" / "plans").glob("dp4.measured.json"))
    text = src.read_text().replace('"plan_file": "dp4.json"', '"plan_file": "/somewhere/else/plans/dp4.json"')
    assert "/somewhere/else" in text
    for name in ("calibrated.yaml", "calibrated.gemm.csv.gz", "calibrated.attention.csv.gz"):
        if (src.parent / name).exists():
            (tmp_path / name).write_bytes((src.parent / name).read_bytes())
    old = tmp_path / "dp4.measured.json"
    old.write_text(text)
    m = load_measurement(old)
    assert m.plan_file == "dp4.json"
    load_measurement(old)
    assert capsys.readouterr().err.count("names its plan by an absolute path") == 1


@pytest.mark.parametrize("argv, expect", [(["--output", "/x/y/spec.yaml"], "--output spec.yaml")])
def test_calibrate_cites_its_output_by_file_name(argv, expect):
    from perfmodel.calibrate.machine.calibration import command_line

    assert command_line("cpu", 4, argv[1], None, True, None).endswith(expect)
