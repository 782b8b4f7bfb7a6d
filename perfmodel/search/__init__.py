"""Plan search: every layout of a job (`space`, `layouts`), per-operator sharding for one mesh (`pase`), and the
split of layers into pipeline stages (`stages`).

    from perfmodel.search import search
    res = search("llama-3-70b", "dgx-h100", [512, 1024], global_batch=1024, seq_len=8192)
    res.table.head(), res.plan(0), res.pareto(), res.summary()
"""


def __getattr__(name: str):
    # Lazily, so that `import perfmodel.search.pase` does not import pandas.
    if name in ("search", "SearchResult"):
        from . import layouts

        return getattr(layouts, name)
    raise AttributeError(f"module 'perfmodel.search' has no attribute {name!r}")
