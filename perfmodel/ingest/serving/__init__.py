"""A serving engine's and a serving benchmark's own command lines read as data (never run) into `perfmodel infer`'s
flags, every flag accounted for (`perfmodel infer --server-cmd / --bench-cmd / --bench-file`, docs/inference.md
"Reading the server's and the benchmark's commands").

- `server`: `vllm serve`, `python -m vllm.entrypoints.openai.api_server`, `python -m sglang.launch_server` ->
  the layout (tp, pp, dp, attention_dp, ep), precision and KV dtype, the engine's memory share and scheduler limits,
  speculative decoding, and the model's preset.
- `bench`: `vllm bench serve`, `python benchmarks/benchmark_serving.py`, `python -m sglang.bench_serving`, and
  inference-perf's YAML -> the simulated load (arrival, rate, burstiness, concurrency, stages, requests) and
  lengths (input, output, range, shared prefixes).
- `words`: the command split as bash and argparse would split it; `models`: a served checkpoint's id -> preset;
  `account`: what a command became (`CommandRead`) and every key's fate (`perfmodel.ingest.ledger.KeyFate`).

Like the rest of perfmodel.ingest, it imports only `errors`, `types`, `files` and `spec`.
"""

from __future__ import annotations

from .account import CommandRead
from .bench import read_bench, read_bench_file, read_inference_perf
from .server import read_server

__all__ = ["CommandRead", "read_bench", "read_bench_file", "read_inference_perf", "read_server"]
