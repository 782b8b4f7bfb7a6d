"""vLLM's KV offload to host memory as a second tier (`--kv-offloading-size GiB`, `ServePlan.kv_offload_gb`): what
it adds to an engine step. From vLLM v0.15.1's code:

- `--kv-offloading-size` (backend native) makes the engine run the OffloadingConnector, kv_role kv_both, with
  cpu_bytes_to_use = GiB x 2^30 over all its ranks (vllm/config/vllm.py `_post_init_kv_transfer_config`), a CPU tier
  of that many bytes in blocks of the GPU's 16 tokens (vllm/v1/kv_offload/cpu.py `CPUOffloadingSpec`; spec.py: the
  offloaded block size defaults to the GPU's). Asynchronous scheduling stays on (`VllmConfig.__post_init__` turns it
  off only for non-EAGLE speculative decoding and executors other than mp / uni), and CUDA graphs are unchanged.
  `--disable-hybrid-kv-cache-manager` is needed beside it because the connector is not `SupportsHMA` and the
  offload's connector is set up after the hybrid manager's default is decided; on a model whose layers share one KV
  spec (or with chunked local attention, which turns the hybrid manager off by default) it changes nothing.
- stores: every step the scheduler asks to store each scheduled request's blocks that became full and whose hashes
  it holds (`OffloadingConnectorScheduler._get_reqs_to_store`, in build_connector_meta); the worker submits them at
  the start of the next step, after the sampling's copies (`prepare_store_kv`, `start_kv_transfers`), on a CUDA
  stream of their own that waits for the compute stream (`SingleDirectionOffloadingHandler.transfer_async`): one
  cudaMemcpyAsync per block per KV tensor into pinned host memory (`ops.swap_blocks`), run by the GPU's copy engine,
  not its SMs. Nothing waits for them: `get_finished` polls their events; only a preemption waits for the preempted
  request's stores (not priced here).
- which blocks: under asynchronous scheduling (v0.15.1's default) no decode block is stored: when the step that
  fills a block is scheduled its last token is still an async placeholder, so the block's hash is missing, the
  store's iterator is empty and `_next_stored_block_idx` moves past the block for good (fixed after 0.15:
  vllm-project/vllm PR #33881, "offloading decodes with async scheduling", and PR #36052). So the prompts' full
  blocks alone are stored, once (the CPU tier skips the hashes it holds, `LRUOffloadingManager.prepare_store`);
  where the engine schedules synchronously, every block a decode fills too.
- layout: a connector that prefers cross-layer blocks (this one) gets one KV tensor whose block holds every layer's
  keys and values, where the model's layers share one attention backend (vllm/v1/worker/
  kv_connector_model_runner_mixin.py `use_uniform_kv_cache`; vLLM 0.12, PR #27743: "one contiguous physical block
  including the KV data of all layers"), so a block is one copy; otherwise one per layer (two, keys and values,
  where they are apart).
- loads: a prompt whose blocks the GPU's prefix cache lacks and the CPU tier holds is loaded back before it runs
  (`get_num_new_matched_tokens`, on the H2D stream): not priced here (the GPU cache's own hits come first).

What a step pays (`kv_offload_s`): the copy engine reading the stored blocks out of HBM while the next step runs
(the step loses at most their bytes at the HBM rate; the copy itself, at about 50 GB/s one way on an H100 with
blocks of 0.5-2 MB, vLLM blog "Inside vLLM's New Offloading Connector", 2025-12-29, Fig. 3, runs beside it), and the
connector's host work, hidden under asynchronous scheduling up to the step's own time as the rest of the step's host
work is (`host_time.schedule_s`). The blog measured the DMA copies' cost on the engine as small: with nothing hit,
the DMA build's throughput of 512-token prefills is within about 1% of no offload (6% lost by a copy kernel on the
SMs, 5.5% more by DMA than by that kernel).
"""

from __future__ import annotations

from ..spec.hardware.system import System
from ..spec.model.config import ModelConfig
from ..spec.serving.schema import ServePlan, ServingStack
from .host_time import host_of, release_of, schedule_s
from .kv_cache import kv_bytes_per_token, kv_layers

# The worker's connector calls in every step's forward (vllm/v1/worker/kv_connector_model_runner_mixin.py
# `_get_kv_connector_output`): bind_connector_metadata, start_load_kv, wait_for_save, get_finished,
# get_block_ids_with_load_errors, get_kv_connector_stats, get_kv_connector_kv_cache_events, clear_connector_metadata
CONNECTOR_STEP_CALLS = 8


def kv_tensors(model: ModelConfig, plan: ServePlan) -> int:
    """KV tensors a block is copied from on one GPU (one cudaMemcpyAsync each, `ops.swap_blocks`): 1 where every
    layer has the same KV spec and an attention backend with a cross-layer layout (FlashAttention, FlashInfer,
    Triton: `get_kv_cache_stride_order(include_num_layers_dimension=True)`); else one per layer, two (keys and
    values) where they are apart: layers of two kinds (sliding-window beside full, linear attention, global layers
    of their own shape), or latent attention (its MLA backends have no such layout; one latent per layer)."""
    m = model
    mixed = 0 < m.windowed_layers < m.n_layers or m.global_attention is not None or m.linear_attention is not None
    if not (mixed or m.mla is not None):
        return 1
    return kv_layers(m, plan) * (1 if m.mla is not None else 2)


def stored_blocks(plan: ServePlan, stack: ServingStack, decode: float, prefill_seqs: float, prompt: float) -> float:
    """Blocks of kv_block_tokens a step sends to the CPU tier (mean per step): the ones its `prefill_seqs` chunks of
    `prompt` tokens fill (prompt tokens a prefix hit served were stored by the request that computed them), and
    where the engine schedules synchronously the ones its `decode` sequences fill, tokens_per_step each a step
    (under asynchronous scheduling v0.15.1 stores none of those: module docstring). Blocks."""
    block = stack.kv_block_tokens
    rel = release_of(stack, plan)
    decoded = 0.0 if rel is not None and rel.async_scheduling else decode * plan.tokens_per_step
    return (prefill_seqs * prompt + decoded) / block


def connector_host_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, seqs: float,
                     blocks: float) -> float:
    """Host seconds the connector adds to a step of `seqs` scheduled sequences storing `blocks` blocks: the worker's
    CONNECTOR_STEP_CALLS calls and the scheduler's pass over each scheduled request (`_get_reqs_to_store`), each a
    Python call priced as the host's view op (Python and a dispatch, nothing launched: `HostCalls.view_op_s`); and
    one cudaMemcpyAsync per block per KV tensor (`kv_tensors`), each a driver enqueue on a stream priced as a kernel
    launch (`HostCalls.kernel_launch_s`). Seconds on the system's host (`host_time.host_of`)."""
    calls = host_of(system).calls
    return ((CONNECTOR_STEP_CALLS + seqs) * calls.view_op_s
            + blocks * kv_tensors(model, plan) * calls.kernel_launch_s)


def kv_offload_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
                 prefill_seqs: float, prompt: float, busy: float, mem_bw: float) -> float:
    """Seconds the KV offload adds to a step of `decode` decoding sequences and `prefill_seqs` prompt chunks of
    `prompt` tokens whose device and launches take `busy` seconds (0 where plan.kv_offload_gb is 0):

    - the copy engine's reads of the step's `stored_blocks` (kv_block_tokens x `kv_cache.kv_bytes_per_token` bytes
      each on a GPU) out of HBM at `mem_bw` bytes/s, the rate the step's memory-bound kernels share with it. The
      copy starts with the next step (`prepare_store_kv`); the step that filled the blocks carries it here, the same
      seconds a step later;
    - the connector's host seconds (`connector_host_s`) as the step's host prices them (`host_time.schedule_s` with
      them and without): all of them where the engine schedules synchronously, what the step's host work with them
      exceeds `busy` by where it schedules the next step during this one."""
    if not plan.kv_offload_gb:
        return 0.0
    blocks = stored_blocks(plan, stack, decode, prefill_seqs, prompt)
    copy = blocks * stack.kv_block_tokens * kv_bytes_per_token(model, plan) / mem_bw
    host = connector_host_s(model, system, plan, stack, decode + prefill_seqs, blocks)
    prompts = prefill_seqs > 0
    seqs = decode + prefill_seqs
    exposed = (schedule_s(system, plan, stack, seqs, busy, prompts, extra_host=host)
               - schedule_s(system, plan, stack, seqs, busy, prompts))
    return copy + exposed

