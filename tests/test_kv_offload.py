"""vLLM's KV offload to host memory (`serve.kv_offload`): the step's priced part checked by hand from its formula
and the cited constants, the values refused, and a plan without offload priced as before."""

import math

import pandas as pd
import pytest

from benchmarks.evals.serving_online import ONLINE_CSV, experiment
from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.serve.host_time import plan_stack
from perfmodel.serve.kv_offload import kv_offload_s, kv_tensors, stored_blocks
from perfmodel.serve.step_time import step_parts
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.serving.schema import ServePlan, resolve_serve

# dgx-h100: 3.35 TB/s HBM x 0.88 achievable; its host (xeon-8480c): a view op 1.516079 us, a launch 1.569231 us.
# Llama-2-7B, bf16, tp 1: 2 x 32 layers x 32 kv heads x 128 x 2 B = 524,288 B a token, a block of 16: 8 MiB.
MEM_BW = 3.35e12 * 0.88
BLOCK_BYTES = 16 * 524_288
VIEW_S, LAUNCH_S = 1.516079e-06, 1.569231e-06


def _job(version: str, gb: float = 8.0):
    model, system = load_model("llama-2-7b"), load_hardware("dgx-h100")
    plan = resolve_serve(ServePlan(input_len=1024, output_len=512, stack="vllm", stack_version=version,
                                   kv_offload_gb=gb), model)
    return model, system, plan, plan_stack(plan)


def test_a_prompt_stores_its_blocks_and_the_copy_takes_their_bytes_at_the_hbm_rate():
    """vLLM 0.15.1 (asynchronous scheduling): a 1,024-token prompt fills 64 blocks, copied out of HBM beside the next
    step; the connector's host work, 9 calls and 64 copies (115 us), hides under a 20 ms step."""
    job = _job("0.15.1")
    assert stored_blocks(job[2], job[3], decode=0, prefill_seqs=1, prompt=1024) == 64
    copy = 64 * BLOCK_BYTES / MEM_BW  # 536,870,912 B / 2.948 TB/s
    assert copy == pytest.approx(1.821136e-4, rel=1e-6)
    assert kv_offload_s(*job, decode=0, prefill_seqs=1, prompt=1024, busy=0.02, mem_bw=MEM_BW) == pytest.approx(
        copy, rel=1e-9)


def test_async_scheduling_stores_no_decode_block_and_hides_the_host_work_under_the_step():
    """Under asynchronous scheduling a decode block's hash is an async placeholder when it is scheduled: nothing is
    stored; the connector's 8 calls and 32 requests (60.6 us) hide under a 20 ms step, and show where the step's
    host work (21.5 us x 32 sequences) already outlasts a 10 us device step."""
    job = _job("0.15.1")
    assert stored_blocks(job[2], job[3], decode=32, prefill_seqs=0, prompt=0) == 0
    assert kv_offload_s(*job, decode=32, prefill_seqs=0, prompt=0, busy=0.02, mem_bw=MEM_BW) == 0.0
    host = (8 + 32) * VIEW_S
    assert host == pytest.approx(6.064316e-05, rel=1e-6)
    assert kv_offload_s(*job, decode=32, prefill_seqs=0, prompt=0, busy=1e-5, mem_bw=MEM_BW) == pytest.approx(
        host, rel=1e-6)


def test_synchronous_scheduling_stores_each_decoded_block_and_pays_the_host_work_in_full():
    """vLLM 0.13 (synchronous): 32 sequences fill 2 blocks a step (16 tokens each): 16 MiB copied, 8 + 32 calls
    and 2 copies on the host, all exposed."""
    job = _job("0.13")
    assert stored_blocks(job[2], job[3], decode=32, prefill_seqs=0, prompt=0) == 2
    copy = 2 * BLOCK_BYTES / MEM_BW  # 5.691 us
    host = (8 + 32) * VIEW_S + 2 * 1 * LAUNCH_S  # 63.78 us
    assert copy + host == pytest.approx(6.947268e-05, rel=1e-6)
    assert kv_offload_s(*job, decode=32, prefill_seqs=0, prompt=0, busy=0.02, mem_bw=MEM_BW) == pytest.approx(
        copy + host, rel=1e-6)


def test_a_block_is_one_copy_where_the_layers_share_a_cross_layer_tensor():
    plan = ServePlan(input_len=100, output_len=10)
    assert kv_tensors(load_model("llama-2-7b"), plan) == 1
    assert kv_tensors(load_model("mistral-7b"), plan) == 1  # every layer windowed alike: one KV spec
    assert kv_tensors(load_model("gemma-2-9b"), plan) == 2 * 42  # sliding beside full layers: K and V per layer
    assert kv_tensors(load_model("deepseek-v3"), plan) == 61  # MLA: one latent per layer, no cross-layer layout


def test_the_step_shows_the_offload_as_its_own_part_and_nothing_else_moves():
    model, system, plan, stack = _job("0.15.1")
    off = plan.model_copy(update={"kv_offload_gb": 0.0})
    sizes = {"decode": 0, "context": 0, "prefill_seqs": 1, "prompt": 1024, "logits": 1}
    with_offload, without = step_parts(model, system, plan, stack, **sizes), step_parts(model, system, off, stack,
                                                                                        **sizes)
    assert "kv_offload" not in without
    assert {k: v for k, v in with_offload.items() if k != "kv_offload"} == without
    assert with_offload["kv_offload"] == pytest.approx(64 * BLOCK_BYTES / MEM_BW, rel=1e-9)


def test_a_plan_without_offload_prices_as_before():
    assert ServePlan(input_len=100, output_len=10).kv_offload_gb == 0.0
    model, system, plan, stack = _job("0.15.1", gb=0.0)
    parts = step_parts(model, system, plan, stack, decode=32, context=1500, prefill_seqs=0, prompt=0, logits=32)
    assert set(parts) == {"gemm", "attention", "memory", "lm_head", "tp_comm", "pp_comm", "overhead", "launch",
                          "schedule"}
    assert kv_offload_s(model, system, plan, stack, decode=32, prefill_seqs=1, prompt=1024, busy=1e-5,
                        mem_bw=MEM_BW) == 0.0


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, 2e6])
def test_bad_sizes_are_refused(value):
    with pytest.raises(InputError, match="kv_offload_gb"):
        ServePlan(input_len=100, output_len=10, kv_offload_gb=value)


def test_offload_on_another_stack_is_refused():
    with pytest.raises(InputError, match="valid: stack vllm, or kv_offload_gb = 0"):
        resolve_serve(ServePlan(input_len=100, output_len=10, stack="sglang", kv_offload_gb=8.0),
                      load_model("llama-2-7b"))


def test_the_cli_flag_reaches_the_plan_and_refuses_a_negative_size(capsys):
    base = ["infer", "--model", "llama-2-7b", "--hardware", "dgx-h100", "--input-len", "1024", "--output-len", "64",
            "--stack", "vllm", "--concurrency", "8"]
    with pytest.raises(SystemExit) as stop:
        main([*base, "--kv-offload-gb", "-1"])
    assert stop.value.code == 2 and "--kv-offload-gb = -1.0; valid: >= 0" in capsys.readouterr().err
    assert main([*base, "--kv-offload-gb", "8", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert '"kv_offload_gb": 8.0' in out and '"kv_offload"' in out


@pytest.mark.skipif(not ONLINE_CSV.exists(), reason="the online-serving dev set is not here")
def test_the_eval_expresses_cpu_offload_as_8_gib():
    df = pd.read_csv(ONLINE_CSV)
    row = df[df["row_id"] == "67:s0"]
    assert experiment(row)[2].kv_offload_gb == 8.0
    assert experiment(df[df["row_id"] == "65:s0"])[2].kv_offload_gb == 0.0
