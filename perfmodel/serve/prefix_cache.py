"""An engine's prefix cache over a workload's shared system prompts (`spec.serving.workload.PrefixSharing`).

vLLM V1 hashes each full KV block of a prompt with the hash of the blocks before it and, at admission, takes the
longest run of leading blocks already held as computed, recomputing at least the prompt's last token (its logits are
needed): `KVCacheManager.get_computed_blocks`, `max_cache_hit_length = num_tokens - 1` (vllm/v1/core/
kv_cache_manager.py; Kwon et al. 2023 for the paged blocks). A finished request's blocks stay cached while free and
are evicted least recently used when new blocks are needed (vllm/v1/core/block_pool.py, `FreeKVCacheBlockQueue`).
SGLang's radix cache matches the same prefix token by token (page size 1; Zheng et al. 2024, "SGLang", Sec. 3).

A group's system prompt is cached once a request of the group has computed past it; a later request of the group
then starts its prefill after the prompt's cached full blocks. The cached system prompts are evicted, least recently
used first, when the running sequences' KV and the cached prompts no longer fit the cache together.
"""

from __future__ import annotations

from collections import OrderedDict


def cached_tokens(shared: int, prompt: int, block: int) -> int:
    """Prompt tokens a hit serves from the cache (tokens): the shared prefix's full blocks of `block` tokens, at
    most prompt - 1 (the last token is recomputed for its logits: vLLM V1 `max_cache_hit_length`)."""
    return max(0, min(shared, prompt - 1) // block * block)


class PrefixCache:
    """The system prompts a replica's cache holds: group -> cached tokens, least recently used first."""

    def __init__(self, shared: int, block: int):
        self.shared, self.block = shared, block
        self.held: OrderedDict[int, int] = OrderedDict()
        self.hit_tokens = 0  # prompt tokens served from the cache, all requests
        self.prompt_tokens = 0  # prompt tokens admitted, all requests

    def admit(self, group: int, prompt: int) -> int:
        """Tokens of a prompt of `prompt` tokens in `group` served from the cache (0 on a miss); marks the group
        used."""
        hit = cached_tokens(self.shared, prompt, self.block) if group in self.held else 0
        if hit:
            self.held.move_to_end(group)
        self.hit_tokens += hit
        self.prompt_tokens += prompt
        return hit

    def computed(self, group: int) -> None:
        """A request of `group` computed past its system prompt: its full blocks are cached from now on."""
        if self.shared >= self.block:
            self.held[group] = self.shared // self.block * self.block
            self.held.move_to_end(group)

    def fit(self, free: float) -> None:
        """Evict the least recently used system prompts until those held fit `free` KV tokens."""
        while self.held and sum(self.held.values()) > free:
            self.held.popitem(last=False)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
