"""Plan search: every layout of a job (`space`), ranked by the cost model (`ranking`: feasible plans, objectives,
the Pareto front), the split of layers into pipeline stages (`stage_split`), per-operator sharding for one mesh
(`pase`), the best plan written as a plan file (`plan_writer`), and the same job across hardware (`whatif`). It
imports `perfmodel.run` (whole-run objectives), `perfmodel.cost` and `perfmodel.spec`; it holds no cost formula of
its own.

    from perfmodel.search import search
    res = search("llama-3-70b", "dgx-h100", [512, 1024], global_batch=1024, seq_len=8192)
    res.table.head(), res.plan(0), res.pareto(), res.summary()
"""


def __getattr__(name: str):
    # Lazily, so that `import perfmodel.search.pase` does not import the ranking (nor pandas).
    if name in ("search", "SearchResult"):
        from . import ranking

        return getattr(ranking, name)
    raise AttributeError(f"module 'perfmodel.search' has no attribute {name!r}")
