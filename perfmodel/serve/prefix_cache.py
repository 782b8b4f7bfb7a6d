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

`BlockPrefixCache` does the same over a trace's own prefix structure: each request's chain of block ids (Mooncake's
`hash_ids`, one id a 512-token block, "identical hash IDs indicate reusable prefix KV cache blocks":
kvcache-ai/Mooncake FAST25-release/README.md). A request's leading blocks already cached are a hit, as vLLM's
`get_computed_blocks` takes the longest run of leading blocks held; the hit is counted in the engine's own blocks
(`cached_tokens`: the matched tokens' full engine blocks, at most prompt - 1). A block is cached once the request
holding it has computed all its tokens (vLLM caches each block as it fills), and evicted least recently used.
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

    def progress(self, group: int, done: int) -> None:
        """A request of `group` has computed `done` tokens of its prompt: past its system prompt, that is cached."""
        if done >= self.shared:
            self.computed(group)

    def fit(self, free: float) -> None:
        """Evict the least recently used system prompts until those held fit `free` KV tokens."""
        while self.held and sum(self.held.values()) > free:
            self.held.popitem(last=False)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class BlockPrefixCache:
    """The trace blocks a replica's cache holds (module docstring): block id -> its tokens (`size`, or fewer for a
    prompt's last block), least recently used first. Requests are keyed by their index in `chains`."""

    def __init__(self, chains, prompts, size: int, block: int):
        self.chains, self.prompts, self.size, self.block = chains, prompts, size, block
        self.held: OrderedDict[int, int] = OrderedDict()
        self.held_tokens = 0
        self.hit_tokens = 0
        self.prompt_tokens = 0

    def _tokens(self, r: int, j: int) -> int:
        """Tokens of request r's j-th block: `size`, the last one the prompt's rest."""
        return max(0, min(self.size, int(self.prompts[r]) - j * self.size))

    def matched(self, r: int) -> int:
        """Prompt tokens of request r in its leading blocks held (the run stops at the first block not held, and
        after a block shorter than `size`: the prompt that cached it ended there)."""
        got = 0
        for b in self.chains[r]:
            have = self.held.get(b)
            if have is None:
                break
            got += have
            if have < self.size:
                break
        return got

    def admit(self, r: int, prompt: int) -> int:
        """Tokens of request r's prompt of `prompt` tokens served from the cache (0 on a miss); marks its matched
        blocks used."""
        got = self.matched(r)
        hit = cached_tokens(got, prompt, self.block)
        if hit:
            left = got
            for b in self.chains[r]:
                if left <= 0:
                    break
                self.held.move_to_end(b)
                left -= self.held[b]
        self.hit_tokens += hit
        self.prompt_tokens += prompt
        return hit

    def progress(self, r: int, done: int) -> None:
        """Request r has computed `done` tokens of its prompt: its blocks whose tokens are all computed are cached."""
        for j, b in enumerate(self.chains[r]):
            n = self._tokens(r, j)
            if n <= 0 or j * self.size + n > done:
                break
            if b in self.held:
                self.held.move_to_end(b)
            else:
                self.held[b] = n
                self.held_tokens += n

    def fit(self, free: float) -> None:
        """Evict the least recently used blocks until those held fit `free` KV tokens."""
        while self.held and self.held_tokens > free:
            self.held_tokens -= self.held.popitem(last=False)[1]

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
