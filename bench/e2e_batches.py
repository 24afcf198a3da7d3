"""bench/e2e_decode.py's workloads and bookkeeping that need no torch: the
prompts of each workload and the prefixes they share, a decode graph's page
tables (its padding requests) and FlashInfer cascade's levels for a step,
and one row made of several rounds. Checked on any machine
(tests/python/test_bench_e2e_batches.py)."""

import numpy as np

import codec
from codec.integrations.paging import page_tables_from_block_table

from .cascade import cascade_levels, forest_json

WORKLOADS = {  # name: (what N counts, default N)
    "loogle": ("documents of 12k-30k tokens, 8 questions of 20-200 tokens each (8·N requests)", 4),
    "sysprompt": ("requests sharing one 4,096-token system prompt, each with 20-200 tokens of its own", 64),
    "samples": ("sequences sampled from one 8,192-token prompt (parallel sampling: num_return_sequences)", 64),
    "distinct": ("distinct 8,192-token prompts (nothing shared: the control)", 64),
}


def parse_workload(workload):
    """NAME:N as (NAME, N), N defaulting to WORKLOADS'; SystemExit naming it otherwise."""
    kind, _, n = workload.partition(":")
    if kind not in WORKLOADS or not (n == "" or (n.isdigit() and int(n) >= 1)):
        raise SystemExit(f"unknown workload {workload!r}: " + ", ".join(f"{k}:N ({v[0]})" for k, v in WORKLOADS.items()))
    return kind, int(n) if n else WORKLOADS[kind][1]


def prompts(workload, seed=0):
    """The prompts of NAME:N (WORKLOADS), the prefixes they share, which the
    engine prefills first (generate_batch's shared_prefixes), and the
    sequences sampled from each prompt; token ids are random."""
    kind, n = parse_workload(workload)
    rng = np.random.default_rng(seed)
    tokens = lambda count: rng.integers(10, 150000, count).tolist()  # noqa: E731
    own = lambda: tokens(int(rng.integers(20, 201)))  # noqa: E731
    if kind == "loogle":
        docs = [tokens(int(rng.integers(12000, 30001))) for _ in range(n)]
        return [doc + own() for doc in docs for _ in range(8)], docs, 1
    if kind == "sysprompt":
        system = tokens(4096)
        return [system + own() for _ in range(n)], [system], 1
    if kind == "samples":  # one request, n sequences: the engine forks its blocks after the prefill
        return [tokens(8192)], [], n
    return [tokens(8192) for _ in range(n)], [], 1


def padded_page_tables(block_table, seq_lens, rows, block_size):
    """The page tables of a decode graph's batch of `rows` requests: those of
    the real requests (block_table's rows, seq_lens tokens each), then
    padding requests of one token in block 0, whose outputs the engine drops
    (a graph's padding rows hold no tokens, which FlashInfer's plan refuses)."""
    indptr, indices, last = page_tables_from_block_table(block_table, seq_lens, block_size)
    pad = rows - indptr.size + 1
    if pad < 0:
        raise ValueError(f"{indptr.size - 1} requests in a graph of {rows}")
    return (np.concatenate([indptr, indptr[-1] + np.arange(1, pad + 1, dtype=np.int32)]),
            np.concatenate([indices, np.zeros(pad, dtype=np.int32)]),
            np.concatenate([last, np.ones(pad, dtype=np.int32)]))


def cascade_step_levels(indptr, indices, last, block_size, rows, nodes=None):
    """FlashInfer cascade's levels of a step's page tables: one per depth of
    its prefix forest (codec.derive_forest; or len(nodes)), shorter paths cut
    (cascade.cascade_levels); where no cut fits, one level of a node per
    request. Then a graph's rows - n padding requests: one node of one token
    of block 0 at every level. With `nodes` (a count per level, which a
    graph's wrapper fixes) empty nodes, without queries, make up each
    level's count; a step that needs more is refused. Returns (request
    order: every node's requests contiguous, and per level the qo indptr,
    kv indptr, kv indices and last page lengths)."""
    n = indptr.size - 1
    if rows < n:
        raise ValueError(f"{n} requests in a graph of {rows}")
    forest = forest_json(codec.derive_forest(indptr, indices, last, block_size))
    levels = cascade_levels(forest, block_size, len(nodes) if nodes else None, cut=True)
    if levels is None:
        if nodes and len(nodes) > 1:
            raise ValueError(f"a step whose requests cannot be cut into a graph's {len(nodes)} levels")
        levels = list(range(n)), [list(range(n + 1))], [indptr.tolist()], [indices.tolist()], [last.tolist()]
    order, qo, kp, ki, kl = levels
    counts = [len(q) - 1 + (rows > n) for q in qo]
    if nodes and any(c > m for c, m in zip(counts, nodes)):
        raise ValueError(f"a step of {counts} nodes per level in a graph's wrapper of {list(nodes)}")
    order.extend(range(n, rows))
    for lvl, (q_ptr, k_ptr, k_idx, k_last) in enumerate(zip(qo, kp, ki, kl)):
        for _ in range((nodes[lvl] if nodes else counts[lvl]) - (len(q_ptr) - 1)):  # the padding, then empty nodes
            q_ptr.append(rows)
            k_ptr.append(k_ptr[-1] + 1)
            k_idx.append(0)
            k_last.append(1)
    return order, qo, kp, ki, kl


ROUND_KEYS = ("tpot_ms", "decode_step_ms_median", "attention_gpu_ms_median")  # listed per round as well


def combine_rounds(runs):
    """One backend's rows of several rounds as one: each number that every
    round has, its median; the first round's other fields; and the main
    timings of every round (`<key>_rounds`), whose spread is the noise."""
    row = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and all(k in r for r in runs):
            row[k] = float(np.median([r[k] for r in runs]))
    for k in ROUND_KEYS:
        if all(k in r for r in runs):
            row[f"{k}_rounds"] = [r[k] for r in runs]
    row["rounds"] = len(runs)
    return row
