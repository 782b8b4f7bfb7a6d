"""The host catalogue (hardware_specs/hosts/*.yaml) from the measurements it cites: every per-call cost either a
public measurement on that host class, a measurement of this project on a lent machine, or derived from those by a
stated ratio. Run it to print the table; `--write` rewrites the YAML files (tests/test_host_cpu.py checks that
the files hold what this script derives).

    python -m benchmarks.tools.host_catalogue [--write]

The derivations, in the order the script applies them:
  1. The lent H100s' host (`cloud-vm-spr16`, a 16-vCPU KVM guest of a 5th-generation Xeon): three machines of the
     same image, the same day, each measured by the project's probes (perfmodel.calibrate.host.calls;
     benchmarks/results/host/h100-{third,fifth}-host_calls.json, h100-fourth-calibrate-host.yaml); the catalogue
     entry is the third's, with its bare launch from C (benchmarks/probes/cuda_launch.cu in benchmarks/probes/host_launch.py, same
     run), and the kinds probed only on the later machines (view op, DTensor op, ZeRO-3 hook) at their ratio to
     their own eager op. They differ by up to 1.5x on the same kind: a cloud VM's host is not one number.
  2. The DGX H100's host (2x Xeon 8480C) has public measurements of two kinds on the same probes: an eager op
     6.8 us (dgxc-benchmarking) and a torch.nn.Linear forward 13.5 us (TE #2053). The lent host is slower on them by
     16.07/6.8 and 41.55/13.5; their geometric mean (2.70) is the lent host's slowness, and the kinds measured on
     the lent host alone (autograd node, view op, NCCL call, graph replay) are its values over that ratio.
  3. Grace (GB200, GH200, GB300) has public measurements of an eager op (13.0 us, dgxc-benchmarking at the same N as
     the H100's 6.8), an nn.Linear forward (37.1 us on GB200, 33.2 on GH200), a Transformer Engine Linear (99.7 /
     90.5 us), a compiled region and its kernels, and a bare cuLaunchKernel (tritonbench #1017). Grace over the
     8480C on the eager op, 13.0 / 6.8 = 1.91, carries tritonbench's compiled and launch costs to the x86 hosts;
     Grace's own derived kinds are the lent host's over its slowness on the two shared probes.
  4. A Transformer Engine module (`fused_module`) costs its host 2.71 nn.Linear calls (TE #2053: 99.7/37.1 on GB200,
     90.5/33.2 on GH200, mid-2025 TE): x86 hosts take that ratio over their nn.Linear.
  5. The DGX B200's host (2x Xeon 8570) measured as the 8480C within 6% on every N of dgxc-benchmarking: its costs
     are the 8480C's. The DGX A100's host (2x EPYC 7742) has no public per-call measurement: Megatron-LM's CI runs
     the same tiny GPT cases (12 layers, hidden 512: steps of a few ms of GPU work, the rest host and
     synchronisation) on DGX A100 and DGX H100, and the A100 steps take 1.46x the H100's (median of 71 gpt3_mcore
     cases, shared/data/host/host_overheads.md section 2): the 8480C's costs x 1.46, an upper bound (the slower GPU
     and NVLink are in the ratio too).
"""

from __future__ import annotations

import argparse
import math
import sys

import yaml

from benchmarks import ROOT
from perfmodel.calibrate.host.measured import TE_OVER_LINEAR  # TE issue #2053: GB200, GH200
from perfmodel.spec.host.cpu import CALL_KINDS

HOSTS = ROOT / "hardware_specs" / "hosts"

# --- the inputs, microseconds, each with its source ---------------------------------------------------------
LENT = "benchmarks/results/host/h100-third-host_calls.json (python -m perfmodel.calibrate.host.calls --device cuda on the lent H100, 2026-11-27)"
LENT_C = ("benchmarks/results/host/h100-third-host_launch.json (python -m benchmarks.probes.host_launch --device cuda "
          "--compile --cuda-launch ./cuda_launch, same machine and run: cudaLaunchKernel from C, bursts of 256)")
VM = {"eager_op": 16.07, "autograd_node": 18.78, "module_call": 41.55, "nccl_call": 25.71,
      "compiled_entry": 91.46, "compiled_kernel": 10.38, "graph_replay": 5.30, "kernel_launch": 4.32,
      "list_tensor": 4.33}  # list_tensor: the same run's optimizer probe, AdamW(fused=True) per tensor
# A second lent H100 (a fresh machine of the same image, the same day), whose probes included the view op:
# `perfmodel calibrate --device cuda --host-only` (benchmarks/results/host/h100-fourth-calibrate-host.yaml), and a
# third with the DTensor op (benchmarks/results/host/h100-fifth-host_calls.json). Each machine's ZeRO-3 hook: its
# FSDP2 twin's forward + backward issue less nanoGPT's twin's, over the 39 collectives of its 13 wrapped modules
# (benchmarks/probes/host_launch.py --variants fsdp2; h100-fourth-host_launch-variants.json, h100-fifth-...)
LENT2 = "benchmarks/results/host/h100-fourth-calibrate-host.yaml (perfmodel calibrate --device cuda --host-only on a second lent H100, 2026-11-27)"
VM2 = {"eager_op": 10.77, "view_op": 2.19, "autograd_node": 13.99, "module_call": 21.85, "nccl_call": 15.34,
       "compiled_entry": 51.46, "compiled_kernel": 14.40, "graph_replay": 2.72,
       "zero3_hook": ((19.41 + 36.80) - (7.85 + 9.44)) / 39 * 1e3}
LENT3 = "benchmarks/results/host/h100-fifth-host_calls.json and h100-fifth-host_launch-variants.json (a third lent H100, 2026-11-27)"
VM3 = {"eager_op": 15.31, "view_op": 3.60, "autograd_node": 16.79, "module_call": 27.52, "nccl_call": 17.14,
       "compiled_entry": 59.04, "compiled_kernel": 11.04, "graph_replay": 2.84, "list_tensor": 3.82,
       "dtensor_op": 16.01, "zero3_hook": ((16.99 + 28.70) - (7.10 + 10.22)) / 39 * 1e3}
# the first machine's view op, DTensor op and ZeRO-3 hook: its eager op x the others' ratio to theirs (the probes
# came after its run)
VM["view_op"] = VM["eager_op"] * VM2["view_op"] / VM2["eager_op"]
VM["dtensor_op"] = VM["eager_op"] * VM3["dtensor_op"] / VM3["eager_op"]
VM["zero3_hook"] = VM["eager_op"] * math.sqrt(VM2["zero3_hook"] / VM2["eager_op"] * VM3["zero3_hook"] / VM3["eager_op"])
DGXC = ("NVIDIA/dgxc-benchmarking@8e77d607 (v25.10) microbenchmarks/cpu_overhead/README.md "
        "(pytorch_kernel_launch_latency.py: torch.matmul of fp32 NxN tensors back to back, N = 8, 16, 128, 256)")
TE2053 = ("NVIDIA/TransformerEngine issue #2053: CPU time per call of a BF16 forward, hidden 2048, 8192 tokens, "
          "2025 stack")
TB1017 = "meta-pytorch/tritonbench PR #1017 (GB200, 2026-04, 19 kernel arguments)"
TB_WHAT = {"compiled_entry": "nop_inductor_kernel end to end 42.4 us less nop_inductor_per_kernel 9.1 us: 33.3 us",
           "compiled_kernel": "nop_inductor_per_kernel (CachingAutotuner.run) 9.1 us",
           "kernel_launch": "nop_triton_direct_culaunch 3.0 us (its 0-argument launch; 3.3 us with 19 arguments)"}
SPR_EAGER, SPR_LINEAR = 6.8, 13.5  # DGX H100 (2x Xeon 8480C): dgxc, TE #2053
GRACE_EAGER, GRACE_LINEAR, GRACE_TE = 13.0, 37.1, 99.7  # GB200: dgxc (same N), TE #2053
TB_ENTRY, TB_KERNEL, TB_LAUNCH = 42.4 - 9.1, 9.1, 3.0  # tritonbench #1017 on GB200
A100_OVER_H100 = 1.46  # Megatron-LM CI iteration-time goldens, gpt3_mcore cases (host_overheads.md section 2)

def slowness(vm: dict, eager: float, linear: float) -> float:
    """A lent machine's slowness against a host whose eager op and nn.Linear call cost `eager` and `linear`: the
    geometric mean of its two ratios."""
    return math.sqrt(vm["eager_op"] / eager * vm["module_call"] / linear)


LENT_SLOWNESS = slowness(VM, SPR_EAGER, SPR_LINEAR)
RUNS = ((VM, LENT), (VM2, LENT2), (VM3, LENT3))  # each lent machine's measured kinds
GRACE_OVER_SPR = GRACE_EAGER / SPR_EAGER
GRACE_SLOWNESS = slowness(VM, GRACE_EAGER, GRACE_LINEAR)


def _lent_over(eager: float, linear: float, name: str) -> tuple[dict, dict]:
    """The kinds measured on the lent hosts alone, carried to `name` (whose eager op and nn.Linear call are public):
    each lent machine's value over its slowness against `name`, the geometric mean over the machines that measured
    the kind."""
    kinds = ("view_op", "autograd_node", "nccl_call", "graph_replay", "list_tensor", "dtensor_op", "zero3_hook")
    out, why = {}, {}
    for k in kinds:
        runs = [(vm[k] / slowness(vm, eager, linear), vm[k], slowness(vm, eager, linear), src)
                for vm, src in RUNS if k in vm and not (vm is VM and k in ("view_op", "dtensor_op", "zero3_hook"))]
        out[k] = math.exp(sum(math.log(r[0]) for r in runs) / len(runs))
        why[k] = ("derived: the lent H100 hosts' measured " + ", ".join(f"{r[1]:.2f} us ({r[3]})" for r in runs)
                  + " over their slowness against " + name + " (" + ", ".join(f"{r[2]:.3f}" for r in runs)
                  + ": each the geometric mean of its eager-op and nn.Linear ratios to " + name + "'s public ones)"
                  + (", the geometric mean" if len(runs) > 1 else ""))
    why["zero3_hook"] += ("; a machine's hook is its FSDP2 twin's forward + backward issue less nanoGPT's twin's over "
                          "the 39 collectives of 13 wrapped modules (benchmarks/probes/host_launch.py --variants fsdp2)")
    return out, why


def hosts() -> dict[str, dict]:
    """Every catalogue host: name -> the YAML mapping (costs in seconds, each cited)."""
    out = {}
    # 1. the lent machine, measured on every kind
    out["cloud-vm-spr16"] = dict(
        description="the lent H100/H200 machines' host: a 16-vCPU KVM guest of a 5th-generation Xeon (CPU family 6 "
                    "model 207, 2.1 GHz as the guest reports it); what a cloud VM can look like, not a DGX",
        cpu="Intel Xeon (KVM guest, family 6 model 207)", sockets=1, cores_per_socket=16,
        calls={**{k: VM[k] for k in VM}, "fused_module": VM["module_call"] * TE_OVER_LINEAR},
        sources={**{f"calls.{k}_s": f"measured: {LENT}" for k in VM},
                 "calls.kernel_launch_s": f"measured: {LENT_C}",
                 "calls.list_tensor_s": f"measured: {LENT}: optimizer_s.adamw_fused_tensor_s",
                 "calls.view_op_s": f"derived: its eager op x the view/eager ratio of a second lent H100 ({LENT2}: "
                                    f"{VM2['view_op']}/{VM2['eager_op']} us); the probe came after this machine's run",
                 "calls.dtensor_op_s": f"derived: its eager op x the DTensor/eager ratio of a third lent H100 ({LENT3}: "
                                       f"{VM3['dtensor_op']}/{VM3['eager_op']} us)",
                 "calls.zero3_hook_s": "derived: its eager op x the geometric mean of the ZeRO-3 hook / eager-op ratios "
                                       f"of two other lent H100s ({VM2['zero3_hook']:.0f}/{VM2['eager_op']}, "
                                       f"{VM3['zero3_hook']:.0f}/{VM3['eager_op']} us: FSDP2 twin less nanoGPT twin "
                                       "per collective)",
                 "calls.fused_module_s": f"derived: its nn.Linear call x {TE_OVER_LINEAR:.2f}, a Transformer Engine "
                                         f"Linear's cost over torch's on the same host ({TE2053}: GB200 99.7/37.1, "
                                         "GH200 90.5/33.2); no Transformer Engine on the lent machine",
                 "cpu": "lscpu on the lent H100, benchmarks/results/host/h100-third-lscpu.txt"})
    # 2. DGX H100 / H200
    lent, why = _lent_over(SPR_EAGER, SPR_LINEAR, "the 8480C")
    spr = dict(eager_op=SPR_EAGER, module_call=SPR_LINEAR, **lent, compiled_entry=TB_ENTRY / GRACE_OVER_SPR,
               compiled_kernel=TB_KERNEL / GRACE_OVER_SPR, kernel_launch=TB_LAUNCH / GRACE_OVER_SPR,
               fused_module=SPR_LINEAR * TE_OVER_LINEAR)
    grace_carry = lambda k: (f"derived: {TB1017}: {TB_WHAT[k]}, over Grace's slowness against the 8480C on the "  # noqa: E731
                             f"eager op, {GRACE_EAGER}/{SPR_EAGER} = {GRACE_OVER_SPR:.3f} ({DGXC})")
    # the lent hosts' own compiled-region entries over their slowness against the 8480C: what they imply here
    implied = [vm["compiled_entry"] / slowness(vm, SPR_EAGER, SPR_LINEAR) for vm, _ in RUNS]
    entries = ", ".join(f"{vm['compiled_entry']:.1f}" for vm, _ in RUNS)
    entry_gap = (f"; uncertain by up to 2x: the lent hosts' own entries ({entries} us, a region with one small "
                 f"input) over their slowness against the 8480C imply {min(implied):.0f}-{max(implied):.0f} us")
    spr_src = {"calls.eager_op_s": f"measured: {DGXC}: DGX H100 6.8 us", "calls.module_call_s":
               f"measured: {TE2053}: DGX H100 (Xeon 8480C) 13.5 us", **{f"calls.{k}_s": v for k, v in why.items()},
               **{f"calls.{k}_s": grace_carry(k) for k in ("compiled_entry", "compiled_kernel", "kernel_launch")},
               "calls.fused_module_s": f"derived: its nn.Linear call x {TE_OVER_LINEAR:.2f} ({TE2053}: a Transformer "
                                       "Engine Linear over torch's on GB200 and GH200, mid-2025 TE)"}
    spr_src["calls.compiled_entry_s"] += entry_gap
    out["xeon-8480c"] = dict(
        description="the DGX H100 / DGX H200 host: 2x Intel Xeon Platinum 8480C (Sapphire Rapids)",
        cpu="Intel Xeon Platinum 8480C", sockets=2, cores_per_socket=56, calls=spr,
        sources={**spr_src, "cpu": "NVIDIA DGX H100 datasheet: 2x Intel Xeon Platinum 8480C, 112 cores in all"})
    out["xeon-8570"] = dict(
        description="the DGX B200 host: 2x Intel Xeon Platinum 8570 (Emerald Rapids)",
        cpu="Intel Xeon Platinum 8570", sockets=2, cores_per_socket=56, calls=dict(spr),
        sources={**{f"calls.{k}": f"as the DGX H100's host (xeon-8480c): {DGXC} measured DGX B200 and DGX H100 "
                                  "within 6% of each other at every N (6.4-9.2 against 6.8-9.1 us)"
                    for k in (f"{c}_s" for c in CALL_KINDS)},
                 "cpu": "NVIDIA DGX B200 datasheet: 2x Intel Xeon Platinum 8570, 112 cores in all"})
    a100 = {k: v * A100_OVER_H100 for k, v in spr.items()}
    out["epyc-7742"] = dict(
        description="the DGX A100 host: 2x AMD EPYC 7742 (Rome)",
        cpu="AMD EPYC 7742", sockets=2, cores_per_socket=64, calls=a100,
        sources={**{f"calls.{c}_s": f"derived: the DGX H100 host's (xeon-8480c) x {A100_OVER_H100}: Megatron-LM's "
                                    "CI runs the same tiny GPT cases on DGX A100 and DGX H100 and the A100 steps take "
                                    "1.46x as long (median of 71 gpt3_mcore cases, NVIDIA/Megatron-LM@d98e8a64 "
                                    "tests/functional_tests golden values; shared/data/host/host_overheads.md "
                                    "section 2): steps of a few ms of GPU work, the rest host and synchronisation; "
                                    "an upper bound, as the slower GPU and NVLink are in the ratio too"
                    for c in CALL_KINDS},
                 "cpu": "NVIDIA DGX A100 datasheet: 2x AMD EPYC 7742, 128 cores in all"})
    # 3. Grace
    lent, why = _lent_over(GRACE_EAGER, GRACE_LINEAR, "Grace (GB200)")
    grace = dict(eager_op=GRACE_EAGER, module_call=GRACE_LINEAR, fused_module=GRACE_TE, compiled_entry=TB_ENTRY,
                 compiled_kernel=TB_KERNEL, kernel_launch=TB_LAUNCH, **lent)
    out["grace"] = dict(
        description="NVIDIA Grace (72 Arm Neoverse V2 cores) as the GH200 superchip and the GB200 / GB300 NVL72 "
                    "compute trays (two Grace per four GPUs) run it",
        cpu="NVIDIA Grace", sockets=2, cores_per_socket=72, calls=grace,
        sources={"calls.eager_op_s": f"measured: {DGXC}: DGX GB200 13.0 us",
                 "calls.module_call_s": f"measured: {TE2053}: GB200 37.1 us (GH200 33.2)",
                 "calls.fused_module_s": f"measured: {TE2053}: a Transformer Engine te.Linear, GB200 99.7 us "
                                         "(GH200 90.5)",
                 **{f"calls.{k}_s": f"measured: {TB1017}: {TB_WHAT[k]}" for k in ("compiled_entry",
                                                                                   "compiled_kernel",
                                                                                   "kernel_launch")},
                 **{f"calls.{k}_s": v for k, v in why.items()},
                 "cpu": "NVIDIA GB200 NVL72 datasheet: 36 Grace CPUs (72 Arm Neoverse V2 cores each) for 72 GPUs; "
                        "GH200: one Grace per H100"})
    # 6. hosts with no public per-call measurement of their own: the DGX H100 host's costs, said so
    research = "benchmarks/results/host/host_cpus_research.md"
    stand_in = {
        "xeon-6776p": ("the DGX B300 / HGX B300 host: 2x Intel Xeon 6776P (Granite Rapids)", "Intel Xeon 6776P", 2, 64,
                       "mlcommons/training_results_v5.1@4da2d1cd:Nebius/systems/nebius_b300_n1.json (HGX B300: "
                       "host_processor_model_name Intel(R) Xeon(R) 6776P, 2 per node, 64 cores); NVIDIA's DGX B300 "
                       f"documentation not found ({research})"),
        "epyc-9575f": ("the AMD Instinct MI300X-MI355X platforms' host (AMD's MLPerf systems) and an OEM 8x L40S "
                       "server's: 2x AMD EPYC 9575F (Turin)", "AMD EPYC 9575F", 2, 64,
                       "mlcommons/training_results_v5.1@4da2d1cd:AMD/systems/MI355X_EPYC_9575F_pytorch.json, "
                       "MI350X_..., MI325X_..._llama2_70b.json, MI300X_..._llama2_70b.json (host_processor_model_name "
                       "AMD EPYC 9575F, 2 per node, 64 cores); inference_results_v5.1@965182b0:closed/Cisco/systems/"
                       f"C845A_L40Sx8_TRT.json (8x L40S) ({research})"),
        "epyc-7b12": ("the Cloud TPU v4 host VM: AMD EPYC 7B12 (Rome), 240 vCPUs per 4 chips", "AMD EPYC 7B12", 2, 120,
                      "mlcommons/training_results_v2.0@a6ae3e16:Google/systems/cloud-tpu-v4-4096-TF.json (2 per node, "
                      f"240 vCPUs, 4 chips; physical cores per socket taken as vCPUs / 2 / 1) ({research})"),
        "epyc-7b13": ("the Cloud TPU v5e host VM: AMD EPYC 7B13 (Milan), 224 vCPUs per 8 chips", "AMD EPYC 7B13", 1, 112,
                      "mlcommons/training_results_v3.1@f33f9444:Google/systems/cloud-tpu-v5e-4096-PAX.json and the Cloud "
                      f"TPU v5e VM types (ct5lp-hightpu-8t: 224 vCPUs) ({research})"),
        "xeon-8481c": ("the Cloud TPU v5p host VM: Intel Xeon Platinum 8481C (Sapphire Rapids), 208 vCPUs per 4 chips",
                       "Intel Xeon Platinum 8481C", 1, 104,
                       "mlcommons/training_results_v4.0@62f111b7:Google/systems/cloud-tpu-v5p-1024-maxtext.json (208 "
                       f"vCPUs, 4 chips); Cloud TPU v5p docs ({research})"),
        "epyc-9b14": ("the Cloud TPU v6e (Trillium) and TPU7x host VMs: AMD EPYC 9B14 (Genoa), 180 vCPUs per 4 chips",
                      "AMD EPYC 9B14", 1, 90,
                      "mlcommons/training_results_v5.0@0fdc28f0:Google/systems/cloud-tpu-trillium-256-maxdiffusion.json "
                      "(180 vCPUs, 4 chips); TPU7x's host CPU is not published (224 vCPUs per 4-chip VM, Cloud TPU "
                      f"docs): taken as v6e's ({research})"),
    }
    for name, (desc, cpu, sockets, cores, cite) in stand_in.items():
        out[name] = dict(description=desc, cpu=cpu, sockets=sockets, cores_per_socket=cores, calls=dict(spr),
                         sources={**{f"calls.{c}_s": "as the DGX H100 host's (xeon-8480c): no public per-call "
                                                     "measurement on this host class (nor of ROCm's or a TPU VM's "
                                                     "launch path) was found; a server x86 core of the same or a "
                                                     "later generation; `perfmodel calibrate --device cuda` on the "
                                                     "machine replaces it" for c in CALL_KINDS}, "cpu": cite})
    # the TPU v4 host is Rome, the DGX A100's generation (Zen 2): its costs, not a later core's
    out["epyc-7b12"]["calls"] = dict(a100)
    out["epyc-7b12"]["sources"].update({f"calls.{c}_s": "as the DGX A100 host's (epyc-7742): the same Rome (Zen 2) "
                                        "generation; no public per-call measurement of a TPU VM's launch path was "
                                        "found; " + out["epyc-7742"]["sources"][f"calls.{c}_s"] for c in CALL_KINDS})
    for h in out.values():
        h["calls"] = {f"{k}_s": round(h["calls"][k] * 1e-6, 12) for k in CALL_KINDS}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite hardware_specs/hosts/*.yaml")
    a = ap.parse_args(argv)
    table = hosts()
    print(f"lent host slowness vs 8480C {LENT_SLOWNESS:.3f}, vs Grace {GRACE_SLOWNESS:.3f}; Grace over 8480C "
          f"{GRACE_OVER_SPR:.3f}; TE Linear over nn.Linear {TE_OVER_LINEAR:.3f}")
    print(f"{'kind (us)':18s}" + "".join(f"{n:>16s}" for n in table))
    for k in CALL_KINDS:
        print(f"{k:18s}" + "".join(f"{h['calls'][k + '_s'] * 1e6:16.2f}" for h in table.values()))
    if a.write:
        for name, h in table.items():
            body = {"name": name, **h}
            (HOSTS / f"{name}.yaml").write_text(f"# Written by `python -m benchmarks.tools.host_catalogue --write`: edit the "
                                                f"script, not this file.\n"
                                                + yaml.safe_dump(body, sort_keys=False, width=120))
        print(f"wrote {len(table)} files to {HOSTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
