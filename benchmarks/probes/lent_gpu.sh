#!/usr/bin/env bash
# What this project measures on a lent GPU, in one call (the device tool's machine: torch, nvcc, no network).
#
#   bash benchmarks/probes/lent_gpu.sh OUTDIR [STEP...]      (default: every step below, in order)
#
# Needs pydantic and its dependencies as wheels in .whl/ (the device image has none; see the device README) and
# writes, per step, a tarball into OUTDIR so that a step cut off by the time limit loses only itself:
#   validation.tgz  `benchmarks/evals/validation.py --gpu`: the gpu-single sweep on the executor, predicted with the
#                   catalogue system of this GPU (no calibration: a transfer test of the catalogue numbers)
#   calibrate.tgz   `perfmodel calibrate --device cuda`: the GEMM / attention / elementwise grid and host costs
#   host.tgz        `benchmarks/probes/host_launch.py --compile --cuda-launch`: host seconds per operator and per step
#   host_calls.tgz  `python -m perfmodel.calibrate.host.calls`: this host's seconds per call kind (the probes of
#                   the public measurements, shared/data/host), and the CPU's name
#   grouped_gemm.tgz  `benchmarks/probes/grouped_gemm.py`: MoE expert GEMMs grouped (torch._grouped_mm) against one dense
#                   GEMM of the same rows, forward, dgrad and wgrad (not in the default list)
#   traced.tgz      the gpu-single sweep as `validation`, every plan also traced (`--trace`): its measurements, and
#                   the Kineto traces split into traces.tgz.aa, .ab, ... of 15 MB (not in the default list)
set -u
OUT=${1:?usage: lent_gpu.sh OUTDIR [STEP...]}
shift
STEPS=" ${*:-host_calls validation calibrate host} "
WORK=$(mktemp -d)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
# The package runs from this checkout; its catalogue is installed as perfmodel.hardware_specs, here a link.
[ -e perfmodel/hardware_specs ] || ln -s ../hardware_specs perfmodel/hardware_specs
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch, platform; print(torch.__version__, torch.version.cuda, platform.python_version())' | tee -a "$OUT/gpu.txt"

step() {  # step NAME SECONDS COMMAND...: run it with a limit, keep its log, pack its folder
  local name=$1 limit=$2; shift 2
  [[ $STEPS == *" $name "* ]] || return 0
  mkdir -p "$WORK/$name"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$WORK/$name/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
  tail -n 25 "$WORK/$name/$name.log"
  tar -C "$WORK" -czf "$OUT/$name.tgz" "$name"
}

step host_calls 150 python3 -m perfmodel.calibrate.host.calls --device cuda --out "$WORK/host_calls/host_calls.json"
step validation 200 python3 -m benchmarks.evals.validation --gpu --out-dir "$WORK/validation"
step calibrate 170 python3 -m perfmodel.cli.main calibrate --device cuda --output "$WORK/calibrate/calibrated.yaml"
step grouped_gemm 200 python3 -m benchmarks.probes.grouped_gemm --out "$WORK/grouped_gemm/grouped_gemm.json" --budget-s 120
step traced 300 python3 -m benchmarks.evals.validation --gpu --out-dir "$WORK/traced/validation" --trace "$WORK/traced/traces"
if [[ $STEPS == *" traced "* ]]; then  # the traces apart: files come back at 16 MB at most
  tar -C "$WORK/traced" -czf - traces | split -b 15M - "$OUT/traces.tgz."
  tar -C "$WORK" -czf "$OUT/traced.tgz" --exclude traced/traces traced
fi
nvcc -O2 -o "$WORK/cuda_launch" benchmarks/probes/cuda_launch.cu || true
step host 150 python3 -m benchmarks.probes.host_launch --device cuda --compile --cuda-launch "$WORK/cuda_launch" \
  --out "$WORK/host/host_launch.json"
grep -m1 "model name" /proc/cpuinfo >> "$OUT/gpu.txt"; nproc >> "$OUT/gpu.txt"
