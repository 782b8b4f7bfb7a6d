"""Every real framework config in tests/fixtures/configs/ through `perfmodel import`, as a user would pass it: what
it became (the plan, the prediction) or the one line that refuses it, and how many of its keys were mapped, named as
not priced, or taken from the framework's defaults (the target: at least four configs per framework
accepted, every key accounted for).

    python -m benchmarks.evals.import_fixtures            # the table; --explain FRAMEWORK prints every key's fate too
"""

from __future__ import annotations

import argparse
import os

from benchmarks import DATA, ROOT

from perfmodel.cost.estimate import evaluate_plan
from perfmodel.errors import InputError
from perfmodel.ingest import plan_of, read_config

F = ROOT / "tests" / "fixtures" / "configs"
OWN = DATA / "import"  # launch scripts this project wrote for DeepSpeed JSONs (README there)
MT = [F / "maxtext" / "base.yml"]
BRIDGE_H100 = [F / "bridge" / "h100_llama3.py", F / "bridge" / "common.py"]
# (framework, files, --name, --hardware, --gpus): --hardware / --gpus where the config leaves them to its launcher
CASES = [
    ("megatron", [F / "megatron" / "train_gpt3_175b_distributed.sh"], None, "dgx-h100", 1024),
    ("megatron", [F / "megatron" / "train_llama3_8b_h100_fp8.sh"], None, "dgx-h100", None),
    ("megatron", [F / "megatron" / "train_mixtral_8x7b_distributed.sh"], None, "dgx-h100", 64),
    ("megatron", [F / "megatron" / "gpt3_mcore_te_tp2_pp2.yaml"], None, "dgx-h100", 8),
    ("megatron", [F / "megatron" / "gpt3_mcore_te_tp2_pp2_mla.yaml"], None, "dgx-h100", 8),
    ("megatron", [F / "megatron" / "gpt3_mcore_te_tp2_pp2_ep4_etp1_mtp_resume_torch_dist_fp8.yaml"], None,
     "dgx-h100", 8),
    ("bridge", BRIDGE_H100, "llama3_70b_pretrain_32gpu_h100_bf16_config", "dgx-h100", 32),
    ("bridge", BRIDGE_H100, "llama31_405b_pretrain_256gpu_h100_bf16_config", "dgx-h100", 256),
    ("bridge", BRIDGE_H100, "llama3_8b_pretrain_2gpu_h100_fp8cs_config", "dgx-h100", 2),
    ("bridge", [F / "bridge" / "h100_qwen3_moe.py", F / "bridge" / "common.py"],
     "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config", "dgx-h100", 256),
    ("bridge", [F / "bridge" / "h100_deepseek_v3.py", F / "bridge" / "common.py"],
     "deepseek_v3_pretrain_1024gpu_h100_bf16_config", "dgx-h100", 1024),
    ("bridge", [F / "bridge" / "llama3_v0_2_0.py"], "llama3_70b_pretrain_config", "dgx-h100", 64),
    ("bridge", [F / "bridge" / "llama3_8b_v0_1_0rc4.py", F / "bridge" / "llama3_8b_pretrain_override_example.yaml"],
     None, "dgx-h100", 8),
    ("bridge", [*BRIDGE_H100, F / "bridge" / "llama32_1b_pretrain.yaml"], "llama32_1b_pretrain_1gpu_h100_bf16_config",
     "dgx-h100", 1),
    ("torchtitan", [F / "torchtitan" / "llama3_8b.toml"], None, "dgx-h100", 8),
    ("torchtitan", [F / "torchtitan" / "llama3_70b.toml"], None, "dgx-h100", 64),
    ("torchtitan", [F / "torchtitan" / "llama3_405b.toml"], None, "dgx-h100", 128),
    ("torchtitan", [F / "torchtitan" / "deepseek_v3_16b.toml"], None, "dgx-h100", 8),
    ("torchtitan", [F / "torchtitan" / "llama4_17bx16e.toml"], None, "dgx-h100", 64),
    ("torchtitan", [F / "torchtitan" / "llama3_config_registry.py"], "llama3_70b", "dgx-h100", 64),
    ("maxtext", [*MT, F / "maxtext" / "k8s_llama3.1-70b_tpu7x-4x4x4.yaml"], None, None, None),
    ("maxtext", [*MT, F / "maxtext" / "models" / "llama3.1-405b.yml", F / "maxtext" / "maxtext_trillium_model_configs.py",
                 F / "maxtext" / "llama3-1-405b-2xv6e-256.sh"], None, None, None),
    ("maxtext", [*MT, F / "maxtext" / "models" / "mixtral-8x7b.yml", F / "maxtext" / "maxtext_trillium_model_configs.py"],
     "mixtral_8x7b_dropped", "tpu-v6e", 256),
    ("maxtext", [*MT, F / "maxtext" / "v5p_128b.sh"], None, "tpu-v5p", 128),
    ("maxtext", [*MT, F / "maxtext" / "models" / "llama2-70b.yml", F / "maxtext" / "v5e_llama2_70b.sh"], None,
     "tpu-v5e", 256),
    ("deepspeed", [F / "deepspeed" / "finetune_hf_llama_ds_config.json", F / "deepspeed" / "finetune_hf_llama.sh"],
     None, "dgx-h100", 8),
    ("deepspeed", [F / "deepspeed" / "universal_checkpointing_bf16_zero1.json",
                   OWN / "megatron_ds_llama2_7b_bf16_zero1.sh"], None, "dgx-h100", None),
    ("deepspeed", [F / "deepspeed" / "hf_zero3_offload_auto.json", OWN / "hf_llama2_7b_zero3.sh"], None, "dgx-h100",
     None),
    ("deepspeed", [F / "deepspeed" / "bf16_master_zero3.json", OWN / "llama2_7b_bf16_master.sh"], None, "dgx-h100",
     None),
    ("deepspeed", [F / "deepspeed" / "autotp_hf_auto.json", F / "deepspeed" / "autotp_hf_run.sh"], None, "dgx-h100",
     None),
    ("deepspeed", [F / "deepspeed" / "zenflow_zero2_offload.json", F / "deepspeed" / "zenflow_finetune_llama.sh"],
     None, "dgx-h100", None),
    ("deepspeed", [F / "deepspeed" / "offload_pp_TEMPLATE.json"], None, "dgx-h100", 8),
]


def one(framework, files, name, hardware, gpus) -> dict:
    row = {"framework": framework, "config": " + ".join(f.name for f in files if f not in MT) + (
        f" ({name})" if name else "")}
    try:
        imp = read_config([f.relative_to(ROOT) for f in files], framework, name)  # run from ROOT: paths as typed
        row.update({f: sum(k.fate == f for k in imp.keys) for f in ("mapped", "not priced", "default")})
        model, system, plan = plan_of(imp, hardware, gpus)
        est = evaluate_plan(model, system, plan)[1]
    except InputError as err:
        return {**row, "outcome": f"refused: {err}", "imported": None}
    return {**row, "imported": imp, "outcome": (
        f"{model.name} on {est.gpus} x {system.name}: tp{plan.tp} pp{plan.pp} dp{plan.dp} cp{plan.cp} vpp{plan.vpp} "
        f"ep{plan.ep} zero{plan.zero} {plan.recompute} {plan.precision} mb{plan.micro_batch} gb{plan.global_batch} "
        f"s{plan.seq_len}: step {est.step_time_s:.3g} s, MFU {est.mfu:.0%}, {est.memory_verdict}")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--explain", metavar="FRAMEWORK", help="also print every key's fate for this framework's configs")
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    rows = [one(*case) for case in CASES]
    accepted: dict[str, int] = {}
    for r in rows:
        accepted[r["framework"]] = accepted.get(r["framework"], 0) + (not r["outcome"].startswith("refused"))
        keys = (f"{r.get('mapped', '-')}/{r.get('not priced', '-')}/{r.get('default', '-')}")
        print(f"{r['framework']:<11} {r['config']}\n            keys mapped/not priced/defaults {keys}: {r['outcome']}")
        if a.explain == r["framework"] and r["imported"] is not None:
            print("\n".join(f"              {k.line()}" for k in r["imported"].keys))
    print("\naccepted per framework: " + ", ".join(f"{k} {v} of {sum(r['framework'] == k for r in rows)}"
                                                   for k, v in accepted.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
