"""Input files, fuzzed (hypothesis): hardware specs, model configs (ModelConfig YAML/JSON and HuggingFace
config.json), plan files and measurement files, each an invalid variant of a valid base (tests/fuzz_inputs.py),
are refused by the project's bad-input rule: exit code 2 (the API: InputError), one line 'error: ...' naming the
field (or, for a damaged file, the file), no traceback, no warning, nothing written.

A variant that is still valid (e.g. a default restored by deleting its key, a free-text field) may succeed; it is
skipped. The CI profile is deterministic; PERFMODEL_FUZZ=long runs many more examples, at random:
    PERFMODEL_FUZZ=long pytest tests/test_fuzz_files.py -x
Every failure found is fixed at its source and kept in tests/fuzz_corpus/files/ (one JSON per bug), replayed by
test_corpus below.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import signal
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import perfmodel.execute.run_plans
from fuzz_inputs import (
    Outcome,
    Variant,
    call,
    dump,
    finite_json_numbers,
    node_paths,
    place,
    refusal_problems,
    snapshot,
    variants,
)
from perfmodel.spec.model import hf_config
from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.measurement import CheckpointRecord, CheckpointSave, Measurement, RankRecord, load_measurement
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.validate.sweeps import TINY_GPT2

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "fuzz_corpus" / "files"
_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
PROFILES = {
    # deterministic: about 35 s for the whole file on a 2-core machine (pytest --durations=10)
    "ci": dict(max_examples=int(os.environ.get("PERFMODEL_FUZZ_EXAMPLES", 0)) or None, derandomize=True,
               database=None, deadline=None, suppress_health_check=_HEALTH),
    # local bug hunting: many more examples, a new draw every run
    "long": dict(max_examples=int(os.environ.get("PERFMODEL_FUZZ_EXAMPLES", 0)) or None, derandomize=False,
                 database=None, deadline=None, suppress_health_check=_HEALTH, print_blob=True),
}
PROFILE = os.environ.get("PERFMODEL_FUZZ", "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"PERFMODEL_FUZZ = {PROFILE!r}; valid: {', '.join(PROFILES)}")


def fuzz_settings(ci: int, long: int = 5000):
    """Settings of the selected profile with `ci` (or, long, `long`) examples unless PERFMODEL_FUZZ_EXAMPLES says."""
    kw = dict(PROFILES[PROFILE])
    kw["max_examples"] = kw["max_examples"] or (long if PROFILE == "long" else ci)
    return settings(**kw)


PLAN_ARGS = ["--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "1024"]


def hardware_argv(path, out) -> list[str]:
    """A hardware spec file through predict, which must not write its --save-plan on refusal."""
    return ["predict", "--model", "gpt2-124m", "--hardware", str(path), *PLAN_ARGS, "--format", "json",
            "--save-plan", str(out)]


def model_argv(path, out) -> list[str]:
    """A model file (ModelConfig or HuggingFace config.json) through predict."""
    return ["predict", "--model", str(path), "--hardware", "dgx-h100", *PLAN_ARGS, "--format", "json"]


# ---------------------------------------------------------------------------------------------------------
# Bases: valid documents of each kind
# ---------------------------------------------------------------------------------------------------------
def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@lru_cache(maxsize=None)
def hardware_bases() -> dict[str, tuple[dict, str]]:
    """name -> (document, format): systems naming a catalogue accelerator (switch and torus tiers), one with the
    accelerator mapping written out and every optional field (JSON), and the CPU test spec."""
    systems = ROOT / "hardware_specs" / "systems"
    full = load_hardware("dgx-h100").model_dump()
    return {"dgx-h100.yaml": (_yaml(systems / "dgx-h100.yaml"), "yaml"),
            "tpu-v5p.yaml": (_yaml(systems / "tpu-v5p.yaml"), "yaml"),
            "dgx-h100-full.json": (full, "json"),
            "cpu-test.yaml": (_yaml(ROOT / "tests" / "fixtures" / "cpu-test.yaml"), "yaml")}


@lru_cache(maxsize=None)
def model_bases() -> dict[str, tuple[dict, str]]:
    """A dense preset, a MoE preset and a MoE + latent attention + MTP preset, every field written out."""
    return {"llama-3-8b.yaml": (load_model("llama-3-8b").model_dump(), "yaml"),
            "mixtral-8x7b.json": (load_model("mixtral-8x7b").model_dump(), "json"),
            "deepseek-v3.yaml": (load_model("deepseek-v3").model_dump(), "yaml")}


HF_BASES = ("llama-3-8b", "gpt2", "mixtral-8x7b-v0.1", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b",
            "llama-4-scout-17b-16e", "minimax-m2.5", "glm-5", "kimi-k2.5")


class _Recording(dict):
    reads: set

    def get(self, key, default=None):
        self.reads.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.reads.add(key)
        return super().__contains__(key)


@lru_cache(maxsize=None)
def hf_bases() -> dict[str, tuple[dict, list[tuple]]]:
    """name -> (config.json document, the key paths from_hf_config reads): keys it does not read may hold
    anything (a config.json has many), so only those it reads are mutated."""
    out = {}
    for name in HF_BASES:
        doc = json.loads((ROOT / "tests" / "fixtures" / "hf" / name / "config.json").read_text())
        reads: set = set()
        real = hf_config._HFConfig

        class Recorder(real):
            def __init__(self, cfg, where):
                rec = _Recording(cfg)
                rec.reads = reads
                super().__init__(rec, where)
        hf_config._HFConfig = Recorder
        try:
            hf_config.from_hf_config(doc, name)
        finally:
            hf_config._HFConfig = real
        reads |= {"model_type", "text_config"}  # read by from_hf_config itself (text_config: a wrapper's text model)
        paths = [p for p in node_paths(doc) if p[0] in reads and (p[0] != "text_config" or p[1:2] == ()
                                                                  or p[1] in reads - {"model_type"})]
        out[name] = (doc, paths)
    return out


def measurement_base() -> dict:
    """A measurement of two ranks (2 rounds of 4 steps) that checkpointed and resumed, as execute writes it."""
    system = load_hardware(ROOT / "tests" / "fixtures" / "cpu-test.yaml")
    plan = resolve(Plan(gpus=2, dp=2, micro_batch=1, global_batch=4, seq_len=128), TINY_GPT2, system)
    steps = [[0.5, 0.2, 0.21, 0.2, 0.4, 0.2, 0.19, 0.2], [0.5, 0.21, 0.2, 0.2, 0.4, 0.2, 0.2, 0.22]]
    ck = CheckpointRecord(directory="ck/plan", every=2, mode="async", resumed_from_step=2, read_s=0.1,
                          saves=[CheckpointSave(step=2, write_s=0.05, blocking_s=0.01, bytes=2**20)])
    m = Measurement(plan_file="plan.json", model=TINY_GPT2, hardware=system, plan=plan,
                    mesh={"pp": 1, "dp": 2, "cp": 1, "tp": 1}, stage_layers=[4], device_type="cpu", backend="gloo",
                    torch_version="2.13.0", nproc=2, steps=4, warmup=1, rounds=2, dtype="fp32",
                    memory_method="peak RSS", losses=[9.1, 9.0, 8.9, 8.8], wall_s=1.5, checkpoint=ck,
                    ranks=[RankRecord(rank=r, device="cpu", step_times_s=s, peak_memory_bytes=2.0**30)
                           for r, s in enumerate(steps)])
    return json.loads(m.model_dump_json())


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@lru_cache(maxsize=None)
def plan_bases() -> dict[str, tuple[dict, bool]]:
    """name -> (plan file document, whether `execute --nproc 2 --device cpu` takes it), written by predict
    --save-plan: two CPU plans (tensor-parallel GPT-2; expert-parallel MoE) and a Llama 3 8B plan on DGX H100
    (pp 2 x vpp 2, tp 2 with sequence parallelism, ZeRO-1, selective recompute)."""
    cpu = str(ROOT / "tests" / "fixtures" / "cpu-test.yaml")
    tiny_moe = TINY_GPT2.model_dump() | {"name": "tiny-moe", "mlp": "swiglu",
                                         "moe": {"n_experts": 4, "top_k": 2, "expert_ffn_hidden": 256}}
    small = ["--gpus", "2", "--pp", "1", "--micro-batch", "1", "--global-batch", "4", "--seq-len", "128"]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "tiny-gpt2.yaml").write_text(yaml.safe_dump(TINY_GPT2.model_dump()))
        (work / "tiny-moe.yaml").write_text(yaml.safe_dump(tiny_moe))
        for name, flags, cpu_plan in (
                ("tp2", ["--model", str(work / "tiny-gpt2.yaml"), "--hardware", cpu, *small, "--tp", "2"], True),
                ("ep2", ["--model", str(work / "tiny-moe.yaml"), "--hardware", cpu, *small, "--tp", "1", "--ep",
                         "2"], True),
                ("llama-3-8b", ["--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "16", "--tp", "2",
                                "--pp", "2", "--vpp", "2", "--micro-batch", "1", "--global-batch", "16", "--seq-len",
                                "2048", "--sequence-parallel", "--zero", "1", "--recompute", "selective"], False)):
            plan_path = work / f"{name}.json"
            o = call(main, ["predict", *flags, "--save-plan", str(plan_path)])
            assert o.rc == 0, o.err
            out[name] = (json.loads(plan_path.read_text()), cpu_plan)
    return out


@pytest.fixture(scope="module")
def no_launch():
    """execute must refuse a bad plan before anything starts: a launch fails the check."""
    def launch(*args, **kwargs):
        raise AssertionError("would launch")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(perfmodel.execute.run_plans, "launch", launch)
        yield


# ---------------------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------------------
def _note(text: str) -> None:
    """hypothesis.note inside a test of hypothesis's (the corpus replays outside one)."""
    try:
        note(text)
    except InvalidArgument:
        pass


# Refusals of a valid document for another reason than the file: the command's own (one line, nothing written).
NOT_THE_FILE = ("but this run is on cpu",)  # execute: a plan for another device type


def refused(work: Path, v: Variant, file_name: str, argv_of, api=None, also: list[str] = (),
            must: bool = False) -> None:
    """Place variant `v` as `file_name` in a fresh directory, run the CLI (argv_of(path, out_path)) or `api`, and
    assert the refusal (or, for a still-valid document, skip it; `must`: fail). `also`: other names a message may
    give for a changed document; "{path}" in a name stands for the file's path."""
    _note(v.what)
    d = Path(tempfile.mkdtemp(dir=work))
    try:
        path = place(v, d / file_name)
        before = snapshot(d)
        names = [n.replace("{path}", str(path)) for n in v.names] + ([str(path)] if v.path_named else []) + (
            list(also) if v.names else [])
        if api is not None:
            o = api(path)
        else:
            argv = argv_of(path, d / "out.json")
            _note(" ".join(argv))
            o = call(main, argv)
        accepted = o.rc == 0 or isinstance(o.error, AssertionError) and str(o.error) == "would launch"
        assert not (accepted and v.wrong_type), f"{v.what}: a value of the wrong type was accepted"
        assert not (accepted and must), f"{v.what}: accepted"
        if accepted and not o.warned:
            if api is None and o.rc == 0 and o.out.lstrip().startswith("{"):
                assert finite_json_numbers(o.out), f"{v.what}: accepted, and the output has NaN or inf"
            assume(False)  # still a valid document
        other = any(n in o.err for n in NOT_THE_FILE) and not v.wrong_type
        problems = refusal_problems(o, [] if other else names)
        assert not problems, f"{v.what}: " + "; ".join(problems)
        assert snapshot(d) == before, f"{v.what}: a file was written: {sorted(set(snapshot(d)) - set(before))}"
        if other:
            assert not must, f"{v.what}: refused for another reason than the file"
            assume(False)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def measurement_api(path: Path) -> Outcome:
    """load_measurement as the CLI would report it: InputError -> rc 2 and one 'error:' line; and a loaded
    measurement must yield its step time and peak memory (what validate reads) without error."""
    def run():
        try:
            m = load_measurement(path)
        except InputError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        m.step_time_s, m.peak_memory_bytes, m.timed_steps()
        if m.checkpoint:
            m.checkpoint.summary()
        return 0
    return call(run)


# ---------------------------------------------------------------------------------------------------------
# The kinds
# ---------------------------------------------------------------------------------------------------------
@fuzz_settings(ci=800)
@given(data=st.data())
def test_hardware_spec(work, data):
    name = data.draw(st.sampled_from(sorted(hardware_bases())), label="base")
    doc, fmt = hardware_bases()[name]
    refused(work, data.draw(variants(doc, fmt), label="variant"), name, hardware_argv)


@fuzz_settings(ci=600)
@given(data=st.data())
def test_model_config(work, data):
    name = data.draw(st.sampled_from(sorted(model_bases())), label="base")
    doc, fmt = model_bases()[name]
    refused(work, data.draw(variants(doc, fmt), label="variant"), name, model_argv)


@fuzz_settings(ci=800)
@given(data=st.data())
def test_hf_config(work, data):
    name = data.draw(st.sampled_from(HF_BASES), label="base")
    doc, paths = hf_bases()[name]
    v = data.draw(variants(doc, "json", paths, extra_keys=False), label="variant")  # unknown keys are allowed
    refused(work, v, "config.json", model_argv)


COMMANDS = {"predict": lambda p, out: ["predict", "--plan", str(p), "--format", "json", "--save-plan", str(out)],
            "export-megatron": lambda p, out: ["export", str(p), "--to", "megatron"],
            "export-torchtitan": lambda p, out: ["export", str(p), "--to", "torchtitan"],
            "export-deepspeed": lambda p, out: ["export", str(p), "--to", "deepspeed"],
            "execute": lambda p, out: ["execute", str(p), "--nproc", "2", "--device", "cpu"]}


@fuzz_settings(ci=1000)
@given(data=st.data())
def test_plan_file(work, no_launch, data):
    name = data.draw(st.sampled_from(sorted(plan_bases())), label="base")
    doc, runs_on_cpu = plan_bases()[name]
    command = data.draw(st.sampled_from([c for c in COMMANDS if runs_on_cpu or c != "execute"]), label="command")
    v = data.draw(variants(doc, "json"), label="variant")
    # A changed value that is valid for its field makes the file disagree with its prediction, which is refused
    # naming the prediction's field and saying to re-create the file.
    refused(work, v, "plan.json", COMMANDS[command], also=["prediction."])


@fuzz_settings(ci=800)
@given(data=st.data())
def test_measurement_file(work, data):
    v = data.draw(variants(measurement_base(), "json"), label="variant")
    refused(work, v, "plan.measured.json", None, api=measurement_api)


# ---------------------------------------------------------------------------------------------------------
# Regression corpus: one case per bug the fuzzing found (fixed at its source)
# ---------------------------------------------------------------------------------------------------------
def corpus_cases() -> list[Path]:
    return sorted(CORPUS.glob("*.json"))


def _path(text: str) -> tuple:
    return tuple(int(k) if k.isdigit() else k for k in text.split("."))


def corpus_file(c: dict) -> tuple[str, bytes]:
    """(file name, content) of a corpus case: `content` (text), `content_base64` or `content_parts` ([[text,
    times], ...]) as is, or the base document `base` of its kind with `set` ({"key.path": value}) and `delete`
    (["key.path"]) applied and `append` (text) added to the file."""
    if "content_parts" in c:
        return c["file"], "".join(text * times for text, times in c["content_parts"]).encode()
    if "content" in c or "content_base64" in c:
        content = base64.b64decode(c["content_base64"]) if "content_base64" in c else c["content"].encode()
        return c["file"], content
    kind, name = c["kind"], c["base"]
    if kind == "hf":
        doc, fmt, file = hf_bases()[name][0], "json", "config.json"
    elif kind == "plan":
        doc, fmt, file = plan_bases()[name][0], "json", "plan.json"
    elif kind == "measurement":
        doc, fmt, file = measurement_base(), "json", "plan.measured.json"
    else:
        (doc, fmt), file = (hardware_bases() if kind == "hardware" else model_bases())[name], name
    doc = copy.deepcopy(doc)
    for key, value in [*c.get("set", {}).items(), *((key, None) for key in c.get("delete", []))]:
        *parent, last = _path(key)
        node = doc
        for k in parent:
            node = node[k]
        if key in c.get("set", {}):
            node[last] = value
        else:
            del node[last]
    return c.get("file", file), dump(doc, fmt) + c.get("append", "").encode()


CORPUS_ARGV = {"hardware": hardware_argv, "model": model_argv, "hf": model_argv}


@pytest.mark.parametrize("case", corpus_cases(), ids=lambda p: p.stem)
def test_corpus(work, no_launch, case):
    """A case: {kind (hardware, model, hf, plan, measurement), why, the file (see corpus_file), command (plan:
    one of COMMANDS, default predict), expect}: refused with a message containing `expect` ({path}: the file)."""
    c = json.loads(case.read_text())
    file, content = corpus_file(c)
    v = Variant(c["why"], content, names=[c["expect"]])
    if c["kind"] == "measurement":
        argv_of, api = None, measurement_api
    else:
        argv_of, api = COMMANDS[c.get("command", "predict")] if c["kind"] == "plan" else CORPUS_ARGV[c["kind"]], None

    def hang(*_):
        raise AssertionError(f"{case.stem}: still running after 60 s")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)  # some of these bugs were endless loops
    try:
        refused(work, v, file, argv_of, api=api, must=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_bases_are_valid(work, no_launch):
    """Each base is accepted by every command it is fuzzed through (so a refusal is the mutation's doing)."""
    for name, (doc, fmt) in hardware_bases().items():
        p = work / f"base-{name}"
        p.write_bytes(dump(doc, fmt))
        assert call(main, hardware_argv(p, work / "out.json")).rc == 0, name
    for name, (doc, fmt) in model_bases().items():
        p = work / f"base-{name}"
        p.write_bytes(dump(doc, fmt))
        assert call(main, model_argv(p, None)).rc == 0, name
    for name, (doc, paths) in hf_bases().items():
        (work / f"hf-{name}").mkdir(exist_ok=True)
        p = work / f"hf-{name}" / "config.json"
        p.write_text(json.dumps(doc))
        assert call(main, model_argv(p, None)).rc == 0, name
        assert paths, name
    for name, (doc, cpu) in plan_bases().items():
        p = work / f"base-{name}.json"
        p.write_text(json.dumps(doc))
        for command, argv_of in COMMANDS.items():
            if command == "execute" and not cpu:
                continue
            o = call(main, argv_of(p, work / f"base-{name}.out.json"))
            assert o.rc == 0 or str(o.error) == "would launch", (name, command, o.err)
    p = work / "base.measured.json"
    p.write_text(json.dumps(measurement_base()))
    assert measurement_api(p).rc == 0
