"""Measurements on hardware: GPU kernels, power and clocks, host launch costs, XLA:TPU's compiler (ahead of time, no
TPU) and CPU memory. Their outputs go to benchmarks/results/ and are cited by the catalogue; `lent_gpu.sh` runs the
GPU set on a lent machine in one call.
"""
