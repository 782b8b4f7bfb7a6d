"""Readers of published, measured training runs (the development tables bundled under benchmarks/data/): dense
step times (`runs`), mixture-of-experts step times (`moe_runs`), small-scale runs (`small_runs`), TPU and AMD runs (`tpu_amd_runs`)
and measured memory peaks (`memory_peaks`), each
row mapped to (model, system, plan, measurement) in perfmodel's words. It imports `perfmodel.spec` (and pandas);
`perfmodel.calibrate` (fitting a spec to a user's runs) and the benchmarks read it.
"""
