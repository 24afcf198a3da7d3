"""How a batch of shared prefixes is prefilled before the requests that
share them, so that the engine keeps each prefix's blocks once in its prefix
cache. No torch needed."""

from __future__ import annotations

from typing import List


def prefix_waves(prefixes: List[List[int]], block_size: int, step_tokens: int,
                 async_batching: bool) -> List[List[List[int]]]:
    """The warm-up requests of ``prefixes``, in waves that each finish before
    the next. Without the engine's asynchronous batching (or with a step of
    fewer tokens than a block, which chunks any longer prompt anyway): one
    wave, the prefixes whole. With it, the engine schedules step N+1 before
    it updates step N, so a prompt prefilled in several chunks finds itself
    marked decoding when an earlier chunk's update comes, which then marks
    none of that chunk's blocks complete (transformers 5.17), and requests
    that share the prefix would prefill most of it again. So each wave
    extends every prefix by what one step of ``step_tokens`` prefills for all
    of them, in whole blocks (in groups, where more prefixes than one step's
    blocks share it), and no warm-up prompt is split into chunks."""
    if not prefixes:
        return []
    if not async_batching or step_tokens < block_size:
        return [prefixes]
    per_group = step_tokens // block_size  # prefixes one step extends by a block each
    waves = []
    for g in range(0, len(prefixes), per_group):
        group = prefixes[g:g + per_group]
        chunk = step_tokens // len(group) // block_size * block_size  # at least a block
        ends = range(chunk, max(map(len, group)) + chunk, chunk)
        waves += [[p[:end] for p in group if len(p) > end - chunk] for end in ends]
    return waves
