"""Serving's request path priced by the system's host (`serve.host_time`): the front end, the launches of a step
outside CUDA graphs by graph mode, the scheduling host time hidden or exposed, the wait for the step in flight, and
prompts run alone; each checked by hand against the host's per-call costs (hardware_specs/hosts/xeon-8480c.yaml)
and the profiles' counts (hardware_specs/serving/*.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from perfmodel import load_hardware, load_model
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.host_time import (
    arrival_wait_steps,
    exposed_launch_s,
    frontend_s,
    host_note,
    host_of,
    launch_host_s,
    schedule_s,
    step_graphs,
)
from perfmodel.serve.simulate import simulate
from perfmodel.serve.step_time import HOST_PARTS, step_parts
from perfmodel.spec.host.cpu import load_host
from perfmodel.spec.serving.schema import ServePlan, ServingStack, load_serving_stack, resolve_serve

ROOT = Path(__file__).parents[1]
H = load_host("xeon-8480c").calls  # the DGX H100's host: 6.8 us an eager op, 13.5 us a module call
MODEL = "llama-3.1-8b"  # 32 dense layers


def _plan(stack: str, version: str | None, tp: int = 2, **kw) -> ServePlan:
    return resolve_serve(ServePlan(tp=tp, stack=stack, stack_version=version, input_len=kw.pop("input_len", 1024),
                                   output_len=kw.pop("output_len", 64), **kw), load_model(MODEL))


def _profile(tmp_path: Path, name: str, **release) -> str:
    """`name`'s profile with `release`'s fields set in every release, as a file."""
    data = yaml.safe_load((ROOT / "hardware_specs" / "serving" / f"{name}.yaml").read_text())
    for rel in data["releases"]:
        for k, v in release.items():
            if k == "frontend_s":
                rel["frontend"] = {"request_s": v, "token_s": 0.0, "host_speed": 1.0}
            else:
                rel[k] = v
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_releases_are_picked_by_version():
    vllm, sglang = load_serving_stack("vllm"), load_serving_stack("sglang")
    assert vllm.release("0.12.0").since == "0.11" and not vllm.release("0.12.0").async_scheduling
    assert vllm.release("0.14.1").async_scheduling and vllm.release(None).since == "0.14"
    assert sglang.release("0.5.1.post1").prefill_graphs == "none"
    assert sglang.release("0.5.9").prefill_graphs == "piecewise"
    with pytest.raises(InputError, match="stack_version = 0.9: vllm's profile starts at 0.11"):
        vllm.release("0.9")
    with pytest.raises(InputError, match="stack_version = 'nightly'"):
        _plan("vllm", "nightly")


def test_frontend_by_hand():
    """vLLM's 2.6 ms + 2.2 us per prompt token, measured on a host taken as the DGX H100's (speed 1): 4.8 ms for
    1000 tokens there; on Grace (speed 0.5231, its eager op 13.0 us against 6.8) 4.8 / 0.5231 ms."""
    plan = _plan("vllm", None, input_len=1000)
    vllm = load_serving_stack("vllm")
    assert frontend_s(load_hardware("dgx-h100"), plan, vllm, 1000) == pytest.approx(2.6e-3 + 1000 * 2.2e-6)
    assert frontend_s(load_hardware("gh200"), plan, vllm, 1000) == pytest.approx(4.8e-3 / (6.8 / 13.0), rel=1e-3)
    assert frontend_s(load_hardware("dgx-h100"), plan, load_serving_stack("plain-torch"), 1000) == 0.0


def test_launches_by_graph_mode_by_hand():
    """Llama 3.1 8B (32 dense layers) at tp 2 on a DGX H100. SGLang 0.5.1 prefills eagerly: a layer's 12 module
    calls, 1 view, 2 eager ops and 2 all-reduce calls, and 4 eager ops outside the layers. vLLM 0.14: a prompt step
    of 256 tokens replays its pieces (a replay and the attention's 2 ops a layer), one of 1024 tokens (past the 512
    captured) runs the compiled code (an entry, 8 Inductor launches, 2 ops and the 2 all-reduces a layer), a decode
    step one full graph."""
    m, sysm = load_model(MODEL), load_hardware("dgx-h100")
    sglang, vllm = load_serving_stack("sglang"), load_serving_stack("vllm")
    layer = 12 * H.module_call_s + H.view_op_s + 2 * H.eager_op_s + 2 * H.nccl_call_s
    assert layer == pytest.approx(195e-6, rel=0.01)  # 12 x 13.5 us of module calls, most of it
    assert launch_host_s(m, sysm, _plan("sglang", "0.5.1"), sglang, 1024, False) == pytest.approx(
        32 * layer + 4 * H.eager_op_s)
    p = _plan("vllm", "0.14")
    assert launch_host_s(m, sysm, p, vllm, 256, False) == pytest.approx(32 * (H.graph_replay_s + 2 * H.eager_op_s))
    compiled = H.compiled_entry_s + 8 * H.compiled_kernel_s + 2 * H.eager_op_s + 2 * H.nccl_call_s
    assert launch_host_s(m, sysm, p, vllm, 1024, False) == pytest.approx(32 * compiled + 4 * H.eager_op_s)
    assert launch_host_s(m, sysm, p, vllm, 8, True) == pytest.approx(H.graph_replay_s)


def test_prefill_graphs_off_where_the_engine_turns_them_off():
    """SGLang 0.5.8+ replays prefill graphs up to 8192 tokens, but not with experts over several GPUs nor for a
    Gated DeltaNet model (server_args' _handle_piecewise_cuda_graph); a decode batch past its graphs runs eagerly."""
    rel = load_serving_stack("sglang").release("0.5.9")
    dense = load_model(MODEL)
    qwen35 = load_model(str(Path(__file__).parent / "fixtures" / "hf" / "qwen3.5-397b-a17b" / "config.json"))
    assert step_graphs(dense, _plan("sglang", "0.5.9"), rel, 4096, False) == "piecewise"
    assert step_graphs(dense, _plan("sglang", "0.5.9"), rel, 9000, False) == "eager"
    assert step_graphs(qwen35, ServePlan(tp=2, input_len=8, output_len=8), rel, 4096, False) == "eager"
    assert step_graphs(qwen35, ServePlan(tp=2, ep=2, input_len=8, output_len=8), rel, 4096, False) == "eager"
    assert step_graphs(dense, _plan("sglang", "0.5.9"), rel, 600, True) == "eager"


def test_schedule_hidden_when_asynchronous_by_hand():
    """vLLM 0.12 schedules synchronously: 21.5 us per running sequence, all of it on the step; 0.14 schedules the
    next step during this one: only what passes the step's own busy time; a step that admits prompts adds its
    prefill_step_s either way."""
    sysm = load_hardware("dgx-h100")
    vllm = load_serving_stack("vllm")
    sync, ahead = _plan("vllm", "0.12.0"), _plan("vllm", "0.14.0")
    assert schedule_s(sysm, sync, vllm, 10, 1e-3, False) == pytest.approx(10 * 21.5e-6)
    assert schedule_s(sysm, ahead, vllm, 10, 1e-3, False) == 0.0
    assert schedule_s(sysm, ahead, vllm, 100, 1e-3, False) == pytest.approx(100 * 21.5e-6 - 1e-3)
    admit = vllm.release("0.14").prefill_step_s
    assert schedule_s(sysm, ahead, vllm, 10, 1e-3, True) == pytest.approx(admit)
    assert exposed_launch_s(3e-3, 1e-3) == pytest.approx(2e-3) and exposed_launch_s(1e-3, 3e-3) == 0.0
    assert arrival_wait_steps(vllm, sync) == 0.5 and arrival_wait_steps(vllm, ahead) == 1.5


def test_a_host_bound_prefill_takes_its_launches():
    """SGLang 0.5.1 prefilling one token of Llama 3.1 8B: the device's few microseconds a layer are shorter than the
    host's launches, so the step is the host's: device parts + launch = the launches (`exposed_launch_s`), and the
    scheduling of a step that admits a prompt adds prefill_step_s."""
    m, sysm, sglang = load_model(MODEL), load_hardware("dgx-h100"), load_serving_stack("sglang")
    p = _plan("sglang", "0.5.1", input_len=1)
    parts = step_parts(m, sysm, p, sglang, decode=0, context=0, prefill_seqs=1, prompt=1, logits=1)
    device = sum(v for k, v in parts.items() if k not in HOST_PARTS)
    host = launch_host_s(m, sysm, p, sglang, 1, False)
    assert host > device
    assert device + parts["launch"] == pytest.approx(host)
    assert parts["schedule"] == pytest.approx(sglang.release("0.5.1").prefill_step_s)


def test_infer_request_path_by_hand():
    """TTFT = front end + wait + prefill; at 8 sequences vLLM 0.14 waits 1.5 of its steps (the step in flight, half
    of it on average, and the one scheduled ahead without the request), 0.12 half a step; one sequence waits for
    nothing."""
    for version, steps in (("0.12.0", 0.5), ("0.14.0", 1.5)):
        e = infer(MODEL, "dgx-h100", ServePlan(tp=2, stack="vllm", stack_version=version, input_len=1000,
                                               output_len=200, concurrency=8))
        assert e.request_s["frontend"] == pytest.approx(2.6e-3 + 1000 * 2.2e-6)
        assert e.request_s["wait"] == pytest.approx(steps * e.tpot_s)
        assert e.ttft_s == pytest.approx(sum(e.request_s.values()))
    one = infer(MODEL, "dgx-h100", ServePlan(tp=2, stack="vllm", input_len=1000, output_len=200, concurrency=1))
    assert one.request_s["wait"] == 0.0


def test_one_client_waits_for_the_step_scheduled_ahead(tmp_path):
    """One client, vLLM 0.14 with a 1 ms front end: the first request reaches the engine at 1 ms and is prefilled
    at once; every later one was sent as the last ended, while the engine runs the step it had scheduled ahead for
    the ended sequence (a decode step of one, longer than the front end), so it starts when that step ends:
    TTFT = ghost step + prefill. A synchronous engine starts it on arrival: TTFT = front end + prefill."""
    I, O = 8, 10  # below the step pricer's grid (exact up to 32)
    m, sysm = load_model(MODEL), load_hardware("dgx-h100")
    for asynchronous in (True, False):
        path = _profile(tmp_path, "vllm", frontend_s=1e-3, async_scheduling=asynchronous, prefill_step_s=0.0)
        plan = resolve_serve(ServePlan(tp=1, stack=path, input_len=I, output_len=O), m)
        stack = load_serving_stack(path)
        sim = simulate(m, sysm, plan, {"arrival": "closed", "concurrency": 1, "requests": 3})
        prefill = sum(step_parts(m, sysm, plan, stack, decode=0, context=0, prefill_seqs=1, prompt=I,
                                 logits=1).values())
        ghost = sum(step_parts(m, sysm, plan, stack, decode=1, context=I + O, prefill_seqs=0,
                               prompt=0, logits=1).values())
        later = (ghost if asynchronous else 1e-3) + prefill
        assert ghost > 1e-3
        assert sim.ttft_s.mean == pytest.approx((1e-3 + prefill + 2 * later) / 3, rel=1e-9)


def test_prompts_alone_hold_the_decodes(tmp_path):
    """Two requests at once, a token budget of one prompt a step. Mixing prompts with decodes (vLLM), the second
    prompt's step carries the first's decode; running prompts alone (SGLang), the first decodes only after both
    prompts: its first decode step starts after the second prefill, so its end-to-end is two prefills and O - 1
    decode steps of both."""
    I, O = 8, 4
    m, sysm = load_model(MODEL), load_hardware("dgx-h100")
    path = _profile(tmp_path, "sglang", frontend_s=0.0, prefill_step_s=0.0, async_scheduling=False,
                    step_host_s=0.0)
    data = yaml.safe_load(Path(path).read_text())
    data["max_num_tokens"] = I
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False))
    plan = resolve_serve(ServePlan(tp=1, stack=path, input_len=I, output_len=O), m)
    stack = load_serving_stack(path)
    sim = simulate(m, sysm, plan, {"arrival": "burst", "requests": 2})

    def step(**kw) -> float:
        return sum(step_parts(m, sysm, plan, stack, **kw).values())

    prefill = step(decode=0, context=0, prefill_seqs=1, prompt=I, logits=1)
    assert sim.ttft_s.mean == pytest.approx((prefill + 2 * prefill) / 2, rel=1e-9)
    two = step(decode=2, context=I + 1 + (O - 2) / 2, prefill_seqs=0, prompt=0, logits=2)
    assert sim.e2e_s.mean == pytest.approx(2 * prefill + (O - 1) * two, rel=1e-9)


def test_a_system_without_a_host_is_priced_on_the_dgx_h100s():
    sysm = load_hardware("dgx-b200").model_copy(update={"host_cpu": None})
    assert host_of(sysm).name == "xeon-8480c"
    assert "names no host" in host_note(sysm)
    e = infer(MODEL, sysm, ServePlan(tp=1, stack="vllm", input_len=100, output_len=10, concurrency=1))
    assert any("names no host" in n for n in e.notes)
    assert e.request_s["frontend"] == pytest.approx(2.6e-3 + 100 * 2.2e-6)


def test_bad_layer_calls_are_one_line():
    data = yaml.safe_load((ROOT / "hardware_specs" / "serving" / "vllm.yaml").read_text())
    data["layer_calls"]["eager"]["python_call"] = 3
    with pytest.raises(InputError, match="call kind 'python_call'; valid: eager_op"):
        ServingStack.parse(data, where="vllm")
    data = yaml.safe_load((ROOT / "hardware_specs" / "serving" / "vllm.yaml").read_text())
    data["releases"] = data["releases"][::-1]
    with pytest.raises(InputError, match="increasing versions"):
        ServingStack.parse(data, where="vllm")


def test_the_executors_layer_calls_are_its_training_profiles():
    """plain-torch (perfmodel's executor) launches a layer's forward as its training profile counts it: Qwen3-30B's
    MoE layer makes norm1, qkv (3), out_proj and norm2's module calls and the MoE block's 2 fused modules, and no
    dense MLP beside them (6 module calls, 69 eager ops, 33 views); 48 such layers at tp 1 on a DGX H100's host,
    and 4 eager ops outside them (embedding, final norm, head, sampling)."""
    m, sysm = load_model("qwen3-30b-a3b"), load_hardware("dgx-h100")
    plan = resolve_serve(ServePlan(stack="plain-torch", input_len=8, output_len=8), m)
    layer = 6 * H.module_call_s + 69 * H.eager_op_s + 33 * H.view_op_s + 2 * H.fused_module_s
    got = launch_host_s(m, sysm, plan, load_serving_stack("plain-torch"), 8, False)
    assert got == pytest.approx(48 * layer + 4 * H.eager_op_s)
