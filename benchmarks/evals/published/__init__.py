"""Readers of the development sets (benchmarks/data/): mixture-of-experts step times (`moe_runs`), small-scale runs
(`small_runs`), TPU and AMD runs (`tpu_amd_runs`), measured memory peaks (`memory_peaks`) and the frameworks'
published layouts as fit labels (`fit_labels`), each row mapped to (model, system, plan, measurement) in perfmodel's
words; `flop_conventions` turns a source's TFLOP/s or MFU back into seconds. The dense runs' columns are the
package's runs table (perfmodel.calibrate.runs.table), which these build on.
"""
