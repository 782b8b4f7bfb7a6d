"""The one cost model: FLOPs (`flops`), kernels priced on a device (`compute`, `kernels`), the operator table
(`operator_table`) and what its operators cost under a placement (`sharded`, `mesh`, `comm`, `moe`,
`compression`), units and stages (`units`, `stages`, `pipeline`), memory in three views (`memory`), the step
(`step`, vectorised over the `Layouts` columns of many plans), one plan's `estimate`, and PaSE's cost tables over
its operator graph (`graph`, `tables`). It imports `perfmodel.spec` (and numpy), nothing downstream of it and
never torch, so that `estimate` (one plan) and the search (~10^5 plans) run the same code.
"""
