"""Checkpoint directories of `perfmodel execute --checkpoint-every K --checkpoint-dir D`: names, manifests, and
which one a `--resume` may trust. Imports no torch (the parent process checks checkpoints before it launches).

One plan's checkpoints live in D/PLAN (PLAN: the plan file's name without .json), one directory per save:

    D/PLAN/step-0004.tmp/   every rank writes its shards here (torch.distributed.checkpoint, execute/checkpoint/resume.py)
    D/PLAN/step-0004/       ... and once every rank has finished, rank 0 writes manifest.json into it and
                            renames it (one rename of a directory: atomic on POSIX)

So a directory named step-N holds a finished save, unless something outside the run broke it afterwards; a
reader still trusts it only when its manifest is there, names this run (plan file hash, world size, seed, data)
and every file it lists has its size and SHA-256. `latest` walks the saves from the newest, refuses each torn
one with one line saying why, and returns the newest that passes; a save of another run is an input error.
Checking reads every byte of a save once (its SHA-256s), in the parent process before the launch (on several
nodes, in each node's: the directory is on a shared file system).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from pydantic import Field

from ...errors import InputError
from ...types import Schema
from ...files import write_atomic
from ...spec.measurement import CheckpointSave

MANIFEST = "manifest.json"
STEP_DIR = re.compile(r"step-(\d+)")
CHUNK = 1 << 20


def step_dir(root: str | Path, step: int) -> Path:
    """The directory of the save after `step` steps (zero-padded: listings sort by step)."""
    return Path(root) / f"step-{step:04d}"


def tmp_dir(root: str | Path, step: int) -> Path:
    return step_dir(root, step).with_name(step_dir(root, step).name + ".tmp")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


class Identity(Schema):
    """What makes a checkpoint this run's: resuming it with anything else would not continue the same run."""

    plan_sha256: str = Field(description="SHA-256 of the plan file's bytes")
    world_size: int = Field(description="ranks that wrote it (each wrote its own shards)")
    seed: int = Field(description="--seed: initial weights and synthetic batches")
    data_sha256: str | None = Field(None, description="SHA-256 of --data's file, or null for synthetic tokens")


def identity(plan: str | Path, world_size: int, seed: int, data: str | Path | None) -> Identity:
    return Identity(plan_sha256=sha256(Path(plan)), world_size=world_size, seed=seed,
                    data_sha256=sha256(Path(data)) if data else None)


class FileEntry(Schema):
    name: str
    bytes: int
    sha256: str


class Manifest(Schema):
    """manifest.json of a finished save."""

    version: int = 1
    identity: Identity
    plan_file: str = Field(description="path of the plan file, for the reader (identity has its hash)")
    save: CheckpointSave
    files: list[FileEntry]


def commit(tmp: Path, final: Path, ident: Identity, plan_file: str, save: CheckpointSave) -> Manifest:
    """Rank 0, after every rank finished writing into `tmp`: hash the files, write the manifest, rename to `final`."""
    files = [FileEntry(name=p.name, bytes=p.stat().st_size, sha256=sha256(p))
             for p in sorted(tmp.iterdir()) if p.is_file() and p.name != MANIFEST]
    save = save.model_copy(update={"bytes": sum(f.bytes for f in files)})
    m = Manifest(identity=ident, plan_file=plan_file, save=save, files=files)
    write_atomic(tmp / MANIFEST, lambda t: Path(t).write_text(m.model_dump_json(indent=2) + "\n"), "manifest")
    os.replace(tmp, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash of the host
    finally:
        os.close(fd)
    return m


def torn(directory: Path) -> tuple[Manifest | None, str | None]:
    """(manifest, None) for a save whose files all match its manifest, else (manifest or None, why not)."""
    path = directory / MANIFEST
    if not path.is_file():
        return None, "manifest.json is missing"
    try:
        m = Manifest.model_validate_json(path.read_text())
    except (ValueError, OSError) as err:
        return None, f"manifest.json unreadable ({type(err).__name__})"
    named = STEP_DIR.fullmatch(directory.name)
    if named and int(named.group(1)) != m.save.step:  # e.g. another save's manifest copied in: resuming it would
        return m, f"manifest says step {m.save.step}, the directory is {directory.name}"  # mislabel the steps
    if not any(f.name == ".metadata" for f in m.files):
        return m, "manifest lists no .metadata"
    for f in m.files:
        if f.name in ("", ".", "..", MANIFEST) or any(c in f.name for c in "/\\\x00"):
            return m, f"manifest lists {f.name[:40]!r}, not the name of a file in the save"
        p = directory / f.name
        if not p.is_file():
            return m, f"file {f.name} is missing"
        if p.stat().st_size != f.bytes:
            return m, f"file {f.name} has {p.stat().st_size} bytes, the manifest says {f.bytes}"
        try:
            digest = sha256(p)
        except OSError as err:
            return m, f"file {f.name} cannot be read ({err.strerror or type(err).__name__})"
        if digest != f.sha256:
            return m, f"file {f.name} fails its SHA-256 check"
    return m, None


def saves(root: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every step-N directory under root, newest first."""
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.fullmatch(p.name))] \
        if root.is_dir() else []
    return sorted(found, reverse=True)


def check_identity(m: Manifest, want: Identity, directory: Path) -> None:
    """A save of another run is refused as input (exit 2): resuming it would not continue this run."""
    for field, what in (("plan_sha256", "plan file"), ("world_size", "world size"), ("seed", "--seed"),
                        ("data_sha256", "--data file")):
        have, need = getattr(m.identity, field), getattr(want, field)
        if have != need:
            shown = (lambda v: str(v)[:12]) if field.endswith("sha256") else str
            raise InputError(f"--resume: checkpoint {str(directory)!r} was written with {what} {shown(have)} "
                             f"({m.plan_file}), this run has {shown(need)}; valid: the --checkpoint-dir of this "
                             "run, or a new one without --resume")


def latest(root: Path, want: Identity) -> tuple[Manifest | None, Path | None, list[str]]:
    """The newest save under `root` that this run can resume: (manifest, directory, lines saying what was refused
    on the way and why). (None, None, lines) when there is none."""
    lines = []
    for _, directory in saves(root):
        m, why = torn(directory)
        if m is not None:
            check_identity(m, want, directory)
        if why is None:
            return m, directory, lines
        lines.append(f"checkpoint {str(directory)!r} refused: {why}")
    return None, None, lines


def remove_unfinished(root: Path) -> list[str]:
    """Remove the unfinished saves (step-N.tmp) in `root`: a run stopped inside a save leaves one (a rank killed
    cannot clean up after itself; the parent does, once every rank is gone). Lines say what went."""
    lines = []
    for p in sorted(root.iterdir()) if root.is_dir() else []:
        if p.is_dir() and p.name.endswith(".tmp") and STEP_DIR.fullmatch(p.name[:-4]):
            _remove(p)
            lines.append(f"removed {str(p)!r}: an unfinished save")
    return lines


def _remove(p: Path) -> None:
    """Remove what is at `p`: a directory with what it holds; a file or a link (not what the link points to)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def set_aside(root: Path, after_step: int) -> list[str]:
    """Before a run writes into `root`: remove unfinished saves (step-N.tmp), and rename the step-N directories
    newer than the one resumed (all refused by `latest`) to step-N.torn, out of every later reader's way."""
    if not root.is_dir():
        return []
    lines = remove_unfinished(root)
    for step, p in saves(root):
        if step > after_step:
            aside = p.with_name(p.name + ".torn")
            if aside.exists() or aside.is_symlink():
                _remove(aside)
            os.replace(p, aside)
            lines.append(f"renamed the refused {str(p)!r} to {aside.name}")
    return lines


# ---------------------------------------------------------------------------------------------------------
# The parent process: flags checked, the save to resume chosen, before anything runs or is written
# ---------------------------------------------------------------------------------------------------------
def _check_dir(root: Path) -> None:
    """A directory, or one that can be created; writable either way (a resume also renames the saves it refused)."""
    if root.exists() and not root.is_dir():
        raise InputError(f"--checkpoint-dir {str(root)!r} is a file; valid: a directory (created if missing)")
    parent = root.absolute()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--checkpoint-dir {str(root)!r} is not writable ({str(parent)!r} is not a writable "
                         "directory); valid: a directory this user can write")


def check_flags(root: Path | None, every: int | None, resume: bool, mode: str, steps: int, rounds: int) -> None:
    """The checkpoint flags on their own (InputError, one line naming the flag)."""
    if root is None:
        if every is not None or resume or mode == "async":
            flag = "--resume" if resume else "--checkpoint-every" if every is not None else "--checkpoint-async"
            raise InputError(f"{flag} needs --checkpoint-dir DIR; valid: {flag} with --checkpoint-dir DIR")
        return
    if isinstance(root, str) and not root.strip():
        raise InputError(f"--checkpoint-dir {root!r} names no directory; valid: a directory (created if missing)")
    root = Path(root)
    if every is None and not resume:
        raise InputError(f"--checkpoint-dir {str(root)!r} alone does nothing; valid: with --checkpoint-every K "
                         "(save) and/or --resume (continue from the newest save)")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= steps):
        raise InputError(f"--checkpoint-every = {every!r}; valid: a whole number of steps from 1 to --steps "
                         f"({steps})")
    if mode not in ("sync", "async"):
        raise InputError(f"checkpoint mode {mode!r}; valid: sync, async")
    if mode == "async" and every is None:
        raise InputError("--checkpoint-async needs --checkpoint-every K; valid: both, or neither")
    if rounds > 1:
        raise InputError(f"--rounds {rounds} with checkpoints; valid: --rounds 1 (a save resumes one run of a plan)")
    _check_dir(root)


def plan_checkpoints(plans: list[Path], root: Path | None, every: int | None, resume: bool, mode: str, *,
                     steps: int, rounds: int, world_size: int, seed: int, data: Path | None) -> list[dict | None]:
    """Check the checkpoint flags and each plan's saves; returns per plan the job entry's "checkpoint" (None
    without checkpoint flags). Raises InputError (one line) for bad flags, a save of another run, or a save that
    leaves no step to run. Writes nothing (`make_ready` does, once every input is checked)."""
    check_flags(root, every, resume, mode, steps, rounds)
    if root is None:
        return [None] * len(plans)
    root = Path(root)
    names = [Path(p).name.removesuffix(".json") for p in plans]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"plan files named {', '.join(twice)} more than once would share --checkpoint-dir "
                         f"{str(root)!r}/{twice[0]}; valid: plan files with different names")
    out = []
    for plan, name in zip(plans, names):
        where = root / name
        if where.exists() and not where.is_dir():
            raise InputError(f"--checkpoint-dir: {str(where)!r}, where {name}'s saves go, is a file; valid: a "
                             "directory without a file of that name")
        want = identity(plan, world_size, seed, data)
        found, directory, lines = latest(where, want) if resume else (None, None, [])
        if not resume and saves(where):
            raise InputError(f"--checkpoint-dir: {str(where)!r} holds saves of an earlier run (newest "
                             f"{saves(where)[0][1].name}); valid: --resume to continue it, or another directory")
        if found is not None and found.save.step >= steps:
            raise InputError(f"--resume: {str(directory)!r} is at step {found.save.step}, --steps {steps} leaves "
                             f"nothing to run; valid: --steps > {found.save.step}")
        if resume and found is None:
            lines.append(f"no complete checkpoint of {name} in {str(where)!r}: started from step 0")
        say = [f"resuming {name} from {str(directory)!r} (step {found.save.step})"] if found is not None else []
        out.append({"root": str(where.resolve()), "every": every, "mode": mode, "identity": want.model_dump(),
                    "notes": lines, "say": lines + say, "resume": None if found is None else {
                        "dir": str(directory.resolve()), "step": found.save.step, "save": found.save.model_dump()}})
    return out


def make_ready(checkpoints: list[dict | None]) -> list[str]:
    """Create each plan's checkpoint directory and clear what a resume refused (`set_aside`); the lines say what
    moved. Called once every input is checked."""
    lines = []
    for ck in checkpoints:
        if ck is None:
            continue
        root = Path(ck["root"])
        lines += set_aside(root, ck["resume"]["step"] if ck["resume"] else 0)
        if ck["every"] is not None:
            root.mkdir(parents=True, exist_ok=True)
    return lines
