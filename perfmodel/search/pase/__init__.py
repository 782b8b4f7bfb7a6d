"""PaSE: the per-operator sharding of one pipeline stage over its device mesh, by exact dynamic programming.

- `solver`: the entry (`solve`): graph, cost tables and vertex order of one stage, the DP under a memory budget,
  and Megatron-LM's assignment for comparison.
- `order`: the vertex order (GENERATESEQ), and the separators that cut the graph into a chain of blocks.
- `program`: the exact dynamic program, whole-graph or block by block, and brute force for the tests.
- `budget`: a memory budget by Lagrangian relaxation.
- `assignment`: what a search returns: every operator's configuration in plan-file words, its cost, diagnostics.

Elango 2021, "PaSE: Parallelization Strategies for Efficient DNN Training" (IPDPS 2021). The training step is a
graph of operators (vertices) joined by the tensors they pass (edges). A configuration of a vertex splits its
iteration space over the mesh: each mesh axis splits one iteration-space dimension, or none. The cost of a
strategy (one configuration per vertex) is the sum of vertex costs (compute and the collectives inside the op)
and edge costs (redistributing a tensor from the placement its producer writes to the placement its consumer
reads, forward and backward). PaSE orders the vertices greedily so that the set of processed vertices that
still have unprocessed neighbours (the dependent set) stays small (GENERATESEQ, `order`), then runs an exact
dynamic program over that order whose table is indexed by the configurations of the dependent set (`program`).

Here the mesh is the stage mesh of a plan, axes (dp, cp, tp) of sizes plan.dp, plan.cp, plan.tp in Megatron
device order (tp innermost). The search may split any dimension over the tp axis, so it can rediscover
Megatron-LM's tensor parallelism (Shoeybi et al. 2019), sequence parallelism (Korthikanti et al. 2022), or find
something else where the hardware makes it cheaper. Placements are reported in DTensor vocabulary.

The costs are `cost.pase.tables`, priced by the functions `estimate` uses, so that Megatron-LM's assignment costs
what the estimate says. Our extensions of PaSE, which minimises time only:
  - Memory: a budget enforced by Lagrangian relaxation (`budget.fit_budget`), the DP minimising
    time + lambda * bytes. A strategy strictly inside the lower convex hull of (bytes, time) (better time within
    the budget but never optimal for any lambda) is not found, the usual price of the relaxation.
  - Two ways to run an edge into a GEMM: gather its input and keep the gathered copy for the weight gradient,
    or keep the producer's shard and gather it again in the backward (`cost.pase.tables.CostTables.alt`).
  - Block chain (exact, `program.ChainProblem`): vertices no edge passes over cut the graph into a chain of blocks;
    identical layers share one min-plus map, so a DP run costs a few blocks instead of n_layers of them.
  - Compression of the DP table (exact): configurations of a dependent-set vertex that place its remaining
    edges' tensors alike are interchangeable; the table keeps the cheapest of each class.
  - Tied embeddings: the embedding and the LM head share one weight, so both take the same weight placement;
    the search runs once per placement they share (`tied_classes`) and keeps the best.

It may import what `search` may: every stage below it (perfmodel.layers); it only searches, never prices.
"""

# The package's names live in `solver` (and the modules it imports); read lazily, so that importing one module of
# the package does not build the rest.
_NAMES = ("solve", "PaseResult", "VertexResult", "Diagnostics", "Graph", "Vertex", "Edge", "CostTables",
          "operator_graph", "cost_tables", "restrict_tables", "configurations", "megatron_assignment",
          "megatron_alternatives", "find_config", "dp", "evaluate", "edge_parts", "brute_force", "generate_seq",
          "separators", "Problem", "ChainProblem", "DPStats", "fit_budget", "Point", "redistribute_time",
          "tied_classes")
__all__ = list(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        from . import solver

        return getattr(solver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
