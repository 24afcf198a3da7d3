"""A prefix forest in the JSON form `codec bench --dump` writes (forest.json),
and the levels FlashInfer's cascade wrapper takes for it. Plain Python, no
torch: the peers' inputs are checked on any machine
(tests/python/test_bench_peers.py)."""


def request_paths(forest):
    """Each request's nodes, root first, in a forest of JSON form (nodes with
    parent, pages, num_tokens; request_node), as `codec bench --dump` writes it."""
    paths = []
    for x in forest["request_node"]:
        path = []
        while x >= 0:
            path.append(x)
            x = forest["nodes"][x]["parent"]
        paths.append(path[::-1])
    return paths


def forest_json(f):
    """A codec.Forest in the JSON form `codec bench --dump` writes (forest.json)."""
    return {"nodes": [{"parent": int(f.parent[i]), "pages": f.node_pages(i).tolist(), "num_tokens": int(f.num_tokens[i])}
                      for i in range(f.num_nodes)],
            "request_node": f.request_node.tolist()}


def cascade_levels(forest, page_size, depth=None, cut=False):
    """One level per forest depth (or `depth` levels): (request order, each
    node's requests contiguous, and per level the qo_indptr, kv indptr, kv
    indices and last page lengths), or None if some request's path does not
    reach every level (the wrapper needs one node per request per level).
    With `cut`, a shorter path has its last node cut into single pages and a
    rest instead, and None means no node has the pages for that."""
    nodes = forest["nodes"]
    paths = request_paths(forest)
    depth = depth or max(len(p) for p in paths)

    def pieces(path):  # (node, first page, end page) per level
        parts = depth - len(path) + 1  # pieces of the last node
        pages = len(nodes[path[-1]]["pages"])
        if parts < 1 or pages < parts or (parts > 1 and not cut):
            return None
        ends = list(range(1, parts)) + [pages]
        return [(x, 0, len(nodes[x]["pages"])) for x in path[:-1]] + [(path[-1], a, b) for a, b in zip([0] + ends, ends)]

    split = [pieces(p) for p in paths]
    if any(x is None for x in split):
        return None
    order = sorted(range(len(paths)), key=lambda r: split[r])
    qo, kv_indptr, kv_indices, last = [], [], [], []
    for lvl in range(depth):
        q_ptr, k_ptr, k_idx, k_last = [0], [0], [], []
        for pos, r in enumerate(order):
            piece = split[r][lvl]
            if pos and piece == split[order[pos - 1]][lvl]:
                continue
            if pos:
                q_ptr.append(pos)
            x, a, b = piece
            n = nodes[x]
            k_idx.extend(n["pages"][a:b])
            k_ptr.append(len(k_idx))
            k_last.append(n["num_tokens"] - (b - 1) * page_size if b == len(n["pages"]) else page_size)
        q_ptr.append(len(order))
        qo.append(q_ptr)
        kv_indptr.append(k_ptr)
        kv_indices.append(k_idx)
        last.append(k_last)
    return order, qo, kv_indptr, kv_indices, last
