"""The plans whose exports are run through each framework's checks: one of every layout kind a user exports
(vpp 2-8 with even and uneven chunks, cp 2 and 4, sequence parallelism on and off, ZeRO 0-3,
selective / full / per-op recompute, fp8, fp16, GPipe, first/last-stage splits, DeepSpeed AutoTP, a model between
torchtitan's flavors, and mixture-of-experts layouts). Each is a real plan file: the estimate's prediction and
Megatron-LM's placements (an empty placement list), as `perfmodel search` would write it without PaSE."""

from __future__ import annotations

from ...cost.estimate import evaluate_plan
from ...spec.hardware.system import load_hardware
from ...spec.model.catalogue import load_model
from ...spec.plan.layout import Plan, resolve
from ...spec.plan.file import PlanFile, check
from ...search.plan_writer import estimated_plan_file

_L70 = dict(model="llama-3-70b", seq_len=8192)
_L8 = dict(model="llama-3-8b", seq_len=8192)
# name -> (model, hardware, plan fields). gpus and batches are those of runs people make with each layout.
SPREAD: dict[str, tuple[str, str, dict]] = {
    "dp-tp4-nosp": ("llama-3-8b", "dgx-h100", dict(gpus=64, tp=4, micro_batch=1, global_batch=256, seq_len=4096)),
    "tp8-pp4-vpp2-sp-zero1": ("llama-3-70b", "dgx-h100", dict(gpus=512, tp=8, pp=4, vpp=2, sequence_parallel=True,
                                                             zero=1, recompute="selective", micro_batch=1,
                                                             global_batch=1024, seq_len=8192)),
    "tp8-pp8-vpp5": ("llama-3-70b", "dgx-h100", dict(gpus=1024, tp=8, pp=8, vpp=5, sequence_parallel=True, zero=1,
                                                    micro_batch=1, global_batch=1024, seq_len=4096)),
    "pp4-vpp8": ("llama-3-8b", "dgx-h100", dict(gpus=64, tp=2, pp=4, vpp=8, sequence_parallel=True, zero=1,
                                               micro_batch=1, global_batch=256, seq_len=8192)),
    "pp4-vpp3-uneven": ("llama-3-8b", "dgx-h100", dict(gpus=64, tp=2, pp=4, vpp=3, sequence_parallel=True, zero=1,
                                                      micro_batch=1, global_batch=256, seq_len=8192)),
    "cp2-fp8-zero1": ("llama-3-8b", "dgx-h100", dict(gpus=64, tp=2, cp=2, sequence_parallel=True, zero=1,
                                                    precision="fp8", micro_batch=1, global_batch=128,
                                                    seq_len=16384)),
    "cp4-zero3-full": ("llama-3-70b", "dgx-h100", dict(gpus=256, tp=8, cp=4, sequence_parallel=True, zero=3,
                                                      recompute="full", micro_batch=1, global_batch=256,
                                                      seq_len=32768)),
    "zero2-fp16-selective": ("llama-3-8b", "dgx-h100", dict(gpus=16, zero=2, precision="fp16",
                                                           recompute="selective", micro_batch=1, global_batch=64,
                                                           seq_len=4096)),
    "zero3-per-op": ("llama-3-8b", "dgx-h100", dict(gpus=8, zero=3, dp_replicate=2, recompute="per-op",
                                                   micro_batch=1, global_batch=32, seq_len=8192)),  # HSDP 2 x 4
    "zero3-compile": ("llama-3-8b", "dgx-h100", dict(gpus=8, zero=3, recompute="per-op", micro_batch=1,
                                                    global_batch=32, seq_len=4096, stack="torchtitan",
                                                    compile="model+loss")),
    "pp4-gpipe": ("llama-3-8b", "dgx-h100", dict(gpus=32, tp=2, pp=4, sequence_parallel=True, schedule="gpipe",
                                                micro_batch=1, global_batch=32, seq_len=4096)),
    "pp8-first-last": ("llama-3-70b", "dgx-h100", dict(gpus=512, tp=8, pp=8, sequence_parallel=True, zero=1,
                                                      first_stage_layers=8, last_stage_layers=6,
                                                      recompute="full", micro_batch=1, global_batch=512,
                                                      seq_len=8192)),
    "autotp-zero1": ("llama-3-8b", "dgx-h100", dict(gpus=16, tp=4, zero=1, micro_batch=2, global_batch=64,
                                                   seq_len=4096)),
    "40-layers-pp2": ("llama-2-13b", "dgx-h100", dict(gpus=32, tp=4, pp=2, sequence_parallel=True, zero=1,
                                                     micro_batch=1, global_batch=128, seq_len=4096)),
    "moe-qwen3-ep8": ("qwen3-30b-a3b", "dgx-h100", dict(gpus=64, tp=2, ep=8, sequence_parallel=True, zero=1,
                                                       micro_batch=1, global_batch=256, seq_len=4096)),
    "moe-deepseek-v3-pp8-ep64": ("deepseek-v3", "dgx-h100", dict(gpus=1024, tp=2, pp=8, vpp=1, ep=64,
                                                                sequence_parallel=True, zero=1, precision="fp8",
                                                                recompute="full", micro_batch=1,
                                                                global_batch=4096, seq_len=4096)),
}


def spread_plan_file(name: str, spread: dict | None = None) -> PlanFile:
    """The plan file of (SPREAD or `spread`)[name], predicted by this perfmodel."""
    model_name, hw_name, fields = (SPREAD if spread is None else spread)[name]
    model, system = load_model(model_name), load_hardware(hw_name)
    plan = resolve(Plan(**fields), model, system)
    _, est = evaluate_plan(model, system, plan)
    return check(estimated_plan_file(model, system, plan, est,
                                     created_by=f"perfmodel.export.checks.spread {name}"))


# MaxText's layouts (--to maxtext): name -> (model, hardware, plan fields), TPU v5p / v6e / v7 slices and multislice
# jobs (fsdp x tensor x data, context, stage, expert), and one GPU job (MaxText's hardware: gpu).
_MT = dict(stack="maxtext", micro_batch=1)
MAXTEXT_SPREAD: dict[str, tuple[str, str, dict]] = {
    "v5p-fsdp-tp4": ("llama-3-70b", "tpu-v5p", dict(gpus=128, tp=4, zero=3, sequence_parallel=True, recompute="full",
                                                    global_batch=128, seq_len=4096, **_MT)),
    "v6e-2-slices-fsdp": ("llama-3-70b", "tpu-v6e", dict(gpus=512, tp=4, zero=3, sequence_parallel=True,
                                                         recompute="full", global_batch=512, seq_len=4096, **_MT)),
    "v6e-2-slices-hsdp": ("llama-3-70b", "tpu-v6e", dict(gpus=512, tp=4, zero=3, dp_replicate=2,
                                                         sequence_parallel=True, recompute="full", global_batch=512,
                                                         seq_len=4096, **_MT)),
    "v6e-data-zero1": ("llama-3-8b", "tpu-v6e", dict(gpus=256, tp=8, zero=1, sequence_parallel=True,
                                                     recompute="selective", global_batch=256, seq_len=8192, **_MT)),
    "v5p-cp2-zero0": ("llama-3-8b", "tpu-v5p", dict(gpus=64, tp=2, cp=2, zero=0, sequence_parallel=True,
                                                    global_batch=64, seq_len=16384, **_MT)),
    "v5p-pp4-gpipe": ("llama-3-70b", "tpu-v5p", dict(gpus=256, tp=4, pp=4, zero=3, sequence_parallel=True,
                                                     schedule="gpipe", recompute="full", global_batch=256,
                                                     seq_len=4096, **_MT)),
    "v7-fp8": ("llama-3-8b", "tpu-v7", dict(gpus=64, zero=3, precision="fp8", recompute="full", global_batch=64,
                                            seq_len=8192, **_MT)),
    "v6e-int8-accum": ("llama-3-8b", "tpu-v6e", dict(gpus=256, zero=3, precision="int8", recompute="full",
                                                     global_batch=512, seq_len=8192, **_MT)),
    "v5p-moe-ep8": ("qwen3-30b-a3b", "tpu-v5p", dict(gpus=64, ep=8, zero=3, recompute="full", global_batch=128,
                                                     seq_len=4096, **_MT)),
    "v5p-moe-experts-on-fsdp": ("qwen3-30b-a3b", "tpu-v5p", dict(gpus=64, zero=3, recompute="full", global_batch=128,
                                                                seq_len=4096, **_MT)),
    "v5p-names-save-dot": ("llama-3-8b", "tpu-v5p", dict(gpus=64, zero=3, recompute="names",
                                                         recompute_saved=["qkv", "out_proj"], global_batch=64,
                                                         seq_len=8192, **_MT)),
    "v6e-names-custom": ("llama-3-8b", "tpu-v6e", dict(gpus=256, zero=3, recompute="names",
                                                       recompute_saved=["attention", "mlp_in"],
                                                       recompute_offloaded=["layer_input", "mlp_in"], global_batch=256,
                                                       optimizer_offload=True, seq_len=8192, **_MT)),
    "h100-fsdp-tp2": ("llama-3-8b", "dgx-h100", dict(gpus=16, tp=2, zero=3, sequence_parallel=True,
                                                     global_batch=64, seq_len=4096, **_MT)),
}


def maxtext_plan_file(name: str) -> PlanFile:
    """The plan file of MAXTEXT_SPREAD[name], predicted by this perfmodel."""
    return spread_plan_file(name, MAXTEXT_SPREAD)
