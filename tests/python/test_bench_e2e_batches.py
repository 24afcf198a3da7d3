"""bench/e2e_batches.py, the end-to-end benchmark's parts that need no torch:
each workload's prompts and the prefixes they share, a decode graph's page
tables with its padding requests, FlashInfer cascade's levels of a step, and
rounds combined into one row. On any machine."""

import numpy as np
import pytest

from bench import e2e_batches


@pytest.mark.parametrize("workload,requests,prefixes,samples", [("loogle:2", 16, 2, 1), ("sysprompt:5", 5, 1, 1),
                                                                ("samples:3", 1, 0, 3), ("distinct:4", 4, 0, 1)])
def test_workloads_start_with_the_prefixes_they_share(workload, requests, prefixes, samples):
    inputs, shared, n = e2e_batches.prompts(workload)
    assert len(inputs) == requests and len(shared) == prefixes and n == samples
    for p in shared:  # each prefix heads the requests that share it
        heads = sum(x[:len(p)] == p for x in inputs)
        assert heads == {"loogle": 8}.get(workload.partition(":")[0], requests), workload
    with pytest.raises(SystemExit, match="unknown workload 'docs:4'"):
        e2e_batches.prompts("docs:4")
    with pytest.raises(SystemExit, match="unknown workload 'loogle:0'"):
        e2e_batches.parse_workload("loogle:0")


def test_a_graphs_padding_requests_read_one_token_each():
    """fi_decode's page tables of a decode graph: the real requests' blocks
    in order, then one token of block 0 per padding row; a batch larger than
    its graph is refused."""
    table = np.array([[7, 3, -1], [5, -1, -1]], dtype=np.int32)
    indptr, indices, last = e2e_batches.padded_page_tables(table, np.array([20, 16]), 4, 16)
    assert indptr.tolist() == [0, 2, 3, 4, 5] and indices.tolist() == [7, 3, 5, 0, 0]
    assert last.tolist() == [4, 16, 1, 1]
    indptr, indices, last = e2e_batches.padded_page_tables(table, np.array([20, 16]), 2, 16)
    assert indptr.tolist() == [0, 2, 3] and last.tolist() == [4, 16]
    with pytest.raises(ValueError, match="2 requests in a graph of 1"):
        e2e_batches.padded_page_tables(table, np.array([20, 16]), 1, 16)


def test_cascade_levels_of_a_graph_put_each_nodes_requests_together():
    """fi_cascade's levels: requests 0 and 2 under one shared node of two
    pages, 1 and 3 under another, each with a page of its own, put in node
    order, and a graph's padding requests, one node of one token of block 0
    at each level."""
    tables = ([0, 3, 6, 9, 12], [4, 5, 9, 6, 8, 10, 4, 5, 7, 6, 8, 11], [3, 4, 8, 5])
    order, qo, kp, ki, kl = e2e_batches.cascade_step_levels(*ints(tables), 16, 6)
    assert order == [0, 2, 1, 3, 4, 5] and qo == [[0, 2, 4, 6], [0, 1, 2, 3, 4, 6]]
    assert kp == [[0, 2, 4, 5], [0, 1, 2, 3, 4, 5]]
    assert ki == [[4, 5, 6, 8, 0], [9, 7, 10, 11, 0]] and kl == [[16, 16, 1], [3, 8, 4, 5, 1]]


def test_cascade_levels_cut_a_shorter_path_and_keep_a_graphs_node_counts():
    """A request that shares nothing (its path one node, three pages) under
    a forest of two levels: its first page at the first level, the rest at
    the second. With a graph's fixed counts, nodes without queries make them
    up; a step that needs more nodes, or levels that no cut can give, is
    refused, and without a graph a forest no cut fits is one level."""
    tables = ints(([0, 3, 6, 9], [4, 5, 9, 4, 5, 7, 2, 3, 8], [3, 8, 8]))
    order, qo, kp, ki, kl = e2e_batches.cascade_step_levels(*tables, 16, 3)
    assert order == [0, 1, 2] and qo == [[0, 2, 3], [0, 1, 2, 3]] and kp == [[0, 2, 3], [0, 1, 2, 4]]
    assert ki == [[4, 5, 2], [9, 7, 3, 8]] and kl == [[16, 16], [3, 8, 8]]
    order, qo, kp, ki, kl = e2e_batches.cascade_step_levels(*tables, 16, 3, (3, 4))
    assert qo == [[0, 2, 3, 3], [0, 1, 2, 3, 3]] and kp == [[0, 2, 3, 4], [0, 1, 2, 4, 5]]
    assert ki == [[4, 5, 2, 0], [9, 7, 3, 8, 0]] and kl == [[16, 16, 1], [3, 8, 8, 1]]
    with pytest.raises(ValueError, match=r"a step of \[3, 4\] nodes per level in a graph's wrapper of \[3, 3\]"):
        e2e_batches.cascade_step_levels(*tables, 16, 4, (3, 3))
    one_page = ints(([0, 3, 6, 7], [4, 5, 9, 4, 5, 7, 2], [3, 8, 5]))
    with pytest.raises(ValueError, match="cannot be cut into a graph's 2 levels"):
        e2e_batches.cascade_step_levels(*one_page, 16, 3, (3, 4))
    order, qo, kp, ki, kl = e2e_batches.cascade_step_levels(*one_page, 16, 3)
    assert order == [0, 1, 2] and qo == [[0, 1, 2, 3]] and kp == [[0, 3, 6, 7]] and kl == [[3, 8, 5]]
    with pytest.raises(ValueError, match="3 requests in a graph of 2"):
        e2e_batches.cascade_step_levels(*one_page, 16, 2)


def ints(tables):
    return [np.array(x, dtype=np.int32) for x in tables]


def test_rounds_combine_to_medians_and_keep_their_spread():
    runs = [{"tpot_ms": 50.0, "decode_step_ms_median": 48.0, "tokens": 64, "block_tables": True, "plan_ms_mean": 0.7},
            {"tpot_ms": 62.0, "decode_step_ms_median": 60.0, "tokens": 64, "block_tables": True},
            {"tpot_ms": 53.0, "decode_step_ms_median": 51.0, "tokens": 64, "block_tables": True}]
    row = e2e_batches.combine_rounds(runs)
    assert row["tpot_ms"] == 53.0 and row["decode_step_ms_median"] == 51.0 and row["tokens"] == 64
    assert row["tpot_ms_rounds"] == [50.0, 62.0, 53.0] and row["rounds"] == 3
    assert row["block_tables"] is True  # not a number to take the median of
    assert row["plan_ms_mean"] == 0.7  # in one round only: that round's
    assert "attention_gpu_ms_median_rounds" not in row
