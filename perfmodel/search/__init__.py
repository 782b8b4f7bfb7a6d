"""Plan search: every layout of a job ranked by the cost model, and the best written as a plan file.

    from perfmodel.search import search
    res = search("llama-3-70b", "dgx-h100", [512, 1024], global_batch=1024, seq_len=8192)
    res.table.head(), res.plan(0), res.pareto(), res.summary()

- `space`: every valid layout of a job, as columns.
- `ranking`: the layouts priced, the feasible ones ranked, the Pareto front (`search`, `SearchResult`).
- `stage_split`: layers split into pipeline stages, balanced under each stage's memory limit.
- `pase`: per-operator sharding of one stage's device mesh (PaSE, exact dynamic programming).
- `plan_writer`: the chosen plan as a plan file: stages, placements, prediction.
- `whatif`: one job across systems, and the single upgrade of one that buys most.

It may import every stage below it (perfmodel.layers), never torch, and holds no cost formula of its own: every cost
it compares comes from `cost`.
"""


def __getattr__(name: str):
    # Lazily, so that `import perfmodel.search.pase` does not import the ranking (nor pandas).
    if name in ("search", "SearchResult"):
        from . import ranking

        return getattr(ranking, name)
    raise AttributeError(f"module 'perfmodel.search' has no attribute {name!r}")
