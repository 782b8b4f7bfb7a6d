"""Serving on the executor (execute.inference, execute.serve_plans, validate --sweep cpu-infer): the KV cache gives the
tokens a full recompute gives, tensor-parallel replicas the tokens one process gives, a measurement lands beside
its plan with the plan's file name; the serving host costs price a step as their formula says; bad input is one
line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from perfmodel.errors import InputError  # noqa: E402
from perfmodel.serve.batching import static_batch  # noqa: E402
from perfmodel.serve.host_time import MODEL_OPS, launches  # noqa: E402
from perfmodel.spec.hardware.system import HostCosts, ServingHostCosts, load_hardware  # noqa: E402
from perfmodel.spec.model.config import ModelConfig  # noqa: E402
from perfmodel.spec.model.operators import LAYER_OPS  # noqa: E402
from perfmodel.spec.serving.files import (  # noqa: E402
    ServeMeasurement,
    ServePlanFile,
    load_serve_measurement,
    load_serve_plan,
    served_path,
)
from perfmodel.spec.hardware.kernel_tables import write_with_tables  # noqa: E402
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack, resolve_serve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CPU_SPEC = ROOT / "benchmarks" / "results" / "validation" / "cpu-vm" / "calibrated.yaml"

GPT = ModelConfig(name="t-gpt", n_layers=2, hidden=32, n_heads=4, ffn_hidden=64, vocab=96, max_seq_len=64,
                  mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all",
                  dropout=0.0, source="test")
LLAMA = ModelConfig(name="t-llama", n_layers=2, hidden=32, n_heads=4, n_kv_heads=2, ffn_hidden=64, vocab=96,
                    max_seq_len=64, mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=False,
                    linear_bias="none", dropout=0.0, source="test")


def plan_file(tmp_path: Path, name: str, model: ModelConfig, **layout) -> Path:
    spec = load_hardware(CPU_SPEC)
    plan = resolve_serve(ServePlan(stack="plain-torch", input_len=12, output_len=6, **layout), model)
    pf = ServePlanFile(model=model, hardware=spec, plan=plan, predicted=static_batch(model, spec, plan))
    return write_with_tables(pf, tmp_path / f"{name}.json", "plan")


def full_recompute(server, prompts: torch.Tensor, n: int) -> list[int]:
    """Greedy tokens by running the whole sequence through the model at every step: no cache."""
    from perfmodel.execute.inference import KVCache

    m, x, out = server.model, prompts, []
    for _ in range(n):
        for layer in m.layers.values():  # a fresh cache each pass: attention over the whole sequence
            layer.attention.core.context = KVCache(x.shape[1])
            layer.attention.core.context.positions = torch.arange(x.shape[1])
        m.embedding.positions = torch.arange(x.shape[1])
        with torch.no_grad():
            nxt = m(x)[:, -1].argmax(-1)
        out.append(int(nxt[0]))
        x = torch.cat([x, nxt[:, None]], 1)
    return out


@pytest.mark.parametrize("model", [GPT, LLAMA], ids=["gpt2", "llama"])
def test_kv_cache_decodes_the_tokens_a_full_recompute_gives(tmp_path, model):
    from perfmodel.execute.inference import Server

    pf = load_serve_plan(plan_file(tmp_path, "one", model, concurrency=3))
    server = Server(pf, torch.device("cpu"))
    prompts = server.prompts(0)
    times, tokens = server.generate(prompts)
    assert len(times) == pf.plan.output_len and len(tokens) == pf.plan.output_len
    assert server.caches[0].length == pf.plan.input_len + pf.plan.output_len - 1  # the last token is not fed back
    assert tokens == full_recompute(server, prompts, pf.plan.output_len)


def test_tensor_and_data_parallel_replicas_serve_the_single_process_tokens(tmp_path):
    """tp 2 (Megatron placements over gloo) and dp 2: replica 0 decodes what one process decodes from the same
    prompts; each measurement lands beside its plan and names it by file name alone."""
    from perfmodel.execute.serve_plans import serve_plans
    from perfmodel.execute.inference import Server

    paths = [plan_file(tmp_path, "tp2", LLAMA, tp=2, concurrency=2),
             plan_file(tmp_path, "dp2", LLAMA, dp=2, concurrency=4)]
    ms = serve_plans(paths, 2, device="cpu", rounds=2, warmup=1)
    for path, m in zip(paths, ms):
        assert served_path(path).is_file() and m == load_serve_measurement(served_path(path))
        assert m.plan_file == path.name and m.nproc == 2 and m.backend == "gloo"
        assert len(m.prefill_s) == 2 and all(len(steps) == 5 for steps in m.decode_s)
        one = Server(load_serve_plan(path), torch.device("cpu"))  # one process, the same replica-0 prompts
        for r in range(2):
            assert m.tokens[r] == one.generate(one.prompts(r))[1]
    assert "/" not in json.loads(served_path(paths[0]).read_text())["plan_file"]


def test_measurement_medians_leave_out_the_warm_up_rounds():
    m = ServeMeasurement(plan_file="p.json", device_type="cpu", device="x", backend="none", torch_version="2",
                         nproc=1, batch=1, rounds=3, warmup=1, prefill_s=[9.0, 1.0, 3.0],
                         decode_s=[[9.0, 9.0], [1.0, 2.0], [3.0, 4.0]], tokens=[[1]] * 3, notes=[], created_at="now")
    assert m.prefill_time_s == 2.0 and m.decode_time_s == 2.5


def test_serving_host_costs_price_a_step_by_their_formula():
    """kernels x kernel_s + calls x collective_s, and in decode + pairs x attention_s + keys x attention_key_s,
    counted by hand: 2 layers x 10 operators + 4 outside; tp 2: 2 all-reduces a layer, the embedding's and the
    logits'; pairs: layers x decoding sequences x local heads."""
    spec = load_hardware(CPU_SPEC)
    serving = ServingHostCosts(kernel_s=1e-4, collective_s=1e-3, attention_s=1e-5, attention_key_s=1e-7, probes=[])
    costs = HostCosts(stack="plain-torch", kernel_s=9.0, collective_s=9.0, probes=[], serving=serving)
    spec = spec.model_copy(update={"host_costs": costs})
    plan = resolve_serve(ServePlan(stack="plain-torch", tp=2, concurrency=3, input_len=12, output_len=6), GPT)
    stack = load_serving_stack("plain-torch")
    assert launches(GPT, plan, stack, 3, 30) == (2 * len(LAYER_OPS) + len(MODEL_OPS), 2 * 2 + 2, 2 * 3 * 2, 2 * 30 * 2)
    assert len(LAYER_OPS) == 10 and len(MODEL_OPS) == 4
    pred = static_batch(GPT, spec, plan)
    pairs = 2 * 3 * 4 / 2  # layers x sequences x local heads
    assert pred.prefill_parts["overhead"] == pytest.approx(24 * 1e-4 + 6 * 1e-3)
    keys = pairs * (12 + 6 / 2)  # every decoding pair reads the mean context
    assert pred.decode_parts["overhead"] == pytest.approx(24 * 1e-4 + 6 * 1e-3 + pairs * 1e-5 + keys * 1e-7)


def test_the_cpu_executor_moves_fp32_activations():
    """A tp all-reduce of T tokens moves T x hidden x 4 bytes where the executor serves on a CPU (it computes in
    fp32), 2 (bf16) for an engine's plan on the same spec: each the NCCL-model collective of that many bytes."""
    from perfmodel.cost.comm.collectives import group_collective
    from perfmodel.serve.step_time import allreduce_s, wire_bytes

    spec = load_hardware(CPU_SPEC)
    mine = resolve_serve(ServePlan(stack="plain-torch", tp=2, concurrency=2, input_len=12, output_len=6), GPT)
    engine = mine.model_copy(update={"stack": "vllm"})
    assert wire_bytes(spec, mine) == 4 and wire_bytes(spec, engine) == 2
    for plan, size in ((mine, 4), (engine, 2)):
        want = float(group_collective(spec, "all_reduce", 24 * GPT.hidden * size, 2, 1, plan.gpus))
        assert allreduce_s(GPT, spec, plan, 24) == pytest.approx(want)
    assert wire_bytes(load_hardware("dgx-h100"), mine) == 2  # on CUDA the executor serves in bf16


def test_static_batch_is_two_steps_of_the_serving_cost():
    """The prefill is one step of B prompts, the decode one step of B tokens at I + O / 2 keys (step_parts)."""
    from perfmodel.serve.step_time import step_parts

    spec = load_hardware(CPU_SPEC)
    plan = resolve_serve(ServePlan(stack="plain-torch", dp=2, concurrency=8, input_len=12, output_len=6), GPT)
    stack = load_serving_stack("plain-torch")
    pred = static_batch(GPT, spec, plan)
    assert pred.prefill_parts == step_parts(GPT, spec, plan, stack, 0, 0, 4, 12, 4)
    assert pred.decode_parts == step_parts(GPT, spec, plan, stack, 4, 15, 0, 0, 4)
    with pytest.raises(InputError, match="concurrency = 7 .* valid: a multiple of 2"):
        static_batch(GPT, spec, plan.model_copy(update={"concurrency": 7}))


def test_executor_refuses_what_it_does_not_serve(tmp_path):
    from perfmodel.execute.serve_plans import check_servable

    pf = load_serve_plan(plan_file(tmp_path, "a", GPT, tp=2, concurrency=2))
    with pytest.raises(InputError, match="needs tp x pp x dp = 2 processes, but --nproc is 4; valid: --nproc 2"):
        check_servable(pf, "p", 4, "cpu")
    with pytest.raises(InputError, match="the plan is for .* \\(cpu\\) but this run is on cuda"):
        check_servable(pf, "p", 2, "cuda")
    pp = pf.model_copy(update={"plan": pf.plan.model_copy(update={"pp": 2, "tp": 1})})
    with pytest.raises(InputError, match="pp = 2, ep = 1, prefill_dp = None: the executor serves tensor- and"):
        check_servable(pp, "p", 2, "cpu")
    one = pf.model_copy(update={"plan": pf.plan.model_copy(update={"output_len": 1})})
    with pytest.raises(InputError, match="output_len = 1: no decode step to time; valid: output_len >= 2"):
        check_servable(one, "p", 2, "cpu")
    # the executor splits wk and wv by heads: tp must divide the kv heads (2 here), as the engines need not
    gqa = load_serve_plan(plan_file(tmp_path, "b", LLAMA, tp=4, concurrency=1))
    with pytest.raises(InputError, match="tp = 4 does not divide the 2 kv heads of t-llama .* valid tp: 1, 2"):
        check_servable(gqa, "p", 4, "cpu")


def test_static_batch_refuses_what_the_executor_cannot_time_or_hold():
    spec = load_hardware(CPU_SPEC)
    plan = resolve_serve(ServePlan(stack="plain-torch", concurrency=2, input_len=12, output_len=1), GPT)
    with pytest.raises(InputError, match="output_len = 1, prefill_dp = None for a static batch"):
        static_batch(GPT, spec, plan)
    big = plan.model_copy(update={"output_len": 6, "concurrency": 10**7})
    with pytest.raises(InputError, match="static batch of 10000000 sequences of 12 \\+ 6 tokens per replica does "
                                         "not fit"):
        static_batch(GPT, spec, big)


def test_prompts_take_any_seed_the_cli_accepts(tmp_path):
    """--seed goes up to 2**32 - 1; the prompt generator's seed stays inside int64 for every one."""
    from perfmodel.execute.inference import Server

    pf = load_serve_plan(plan_file(tmp_path, "s", GPT, concurrency=2))
    a, b = Server(pf, torch.device("cpu"), seed=2**32 - 1), Server(pf, torch.device("cpu"), seed=0)
    assert a.prompts(3).shape == (2, 12) and not torch.equal(a.prompts(3), b.prompts(3))
    assert torch.equal(a.prompts(3), a.prompts(3)) and not torch.equal(a.prompts(3), a.prompts(4))


def run(*argv, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfmodel", *argv], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("argv, message", [
    (("--nproc", "2"), "--nproc = 2 does not match sweep cpu-infer, whose plans use 4 processes; valid --nproc: 4"),
    (("--steps", "3"), "--steps with the serving sweep cpu-infer"),
    (("--rounds", "2", "--warmup", "2"), "--rounds = 2, --warmup = 2; valid: rounds >= 1 and 0 <= warmup < rounds"),
    (("--device", "cuda"), "--device = cuda does not match sweep cpu-infer, which runs on cpu"),
])
def test_validate_cpu_infer_bad_input_is_one_line(tmp_path, argv, message):
    r = run("validate", "--sweep", "cpu-infer", "--out-dir", str(tmp_path / "out"), *argv)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_infer_write_plan_then_execute_serves_it(tmp_path):
    """perfmodel infer --write-plan writes a serving plan for the executor; perfmodel execute serves it and prints
    predicted against measured, the measurement beside the plan."""
    plan = tmp_path / "serve.json"
    r = run("infer", "--model", str(tmp_path / "m.json"), "--hardware", str(CPU_SPEC), "--dp", "2",
            "--input-len", "12", "--output-len", "4", "--concurrency", "2", "--stack", "plain-torch",
            "--write-plan", str(plan))
    assert r.returncode == 2 and "m.json" in r.stderr  # no such model file: nothing written
    assert not plan.exists()
    (tmp_path / "m.json").write_text(GPT.model_dump_json())
    r = run("infer", "--model", str(tmp_path / "m.json"), "--hardware", str(CPU_SPEC), "--dp", "2",
            "--input-len", "12", "--output-len", "4", "--concurrency", "2", "--stack", "plain-torch",
            "--write-plan", str(plan))
    assert r.returncode == 0, r.stderr
    pool = run("infer", "--model", str(tmp_path / "m.json"), "--hardware", str(CPU_SPEC), "--dp", "2",
               "--input-len", "12", "--output-len", "4", "--concurrency", "2", "--prefill-dp", "1",
               "--write-plan", str(tmp_path / "pool.json"))
    assert pool.returncode == 2 and "without --search or --prefill-dp" in pool.stderr
    assert not (tmp_path / "pool.json").exists()
    pf = load_serve_plan(plan)
    assert pf.plan.dp == 2 and pf.batch == 1 and pf.predicted.decode_s > 0
    bad = run("execute", str(plan), "--nproc", "2", "--steps", "3")
    assert bad.returncode == 2 and "--steps does not apply to serving plan files" in bad.stderr
    r = run("execute", str(plan), "--nproc", "2", "--rounds", "2", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "perfmodel-runs" / "serve.served.json"  # the default: a folder .gitignore covers, beside
    assert f"wrote {out}" in r.stdout and not served_path(plan).exists()
    m = load_serve_measurement(out)
    assert m.rounds == 2 and m.plan_file == "../serve.json"
