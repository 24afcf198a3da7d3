"""Hydragen-style decode attention, a peer for bench/peers.py, written from
the paper's description (Juravsky et al., "Hydragen: High-Throughput LLM
Inference with Shared Prefixes", 2024): attention over a shared prefix is
computed for all the queries that share it at once, as two batched matrix
products (inter-sequence batching: the prefix's K and V are read once and
the products run on tensor cores), each request's own suffix alone, and the
parts are combined through their softmax denominators (log-sum-exp). The
paper runs the prefix part on a fused attention kernel; kernel="flash" does
that here (torch's FlashAttention op, which returns the log-sum-exp, with
the query heads of a KV head folded into its query length), and
kernel="matmul" materialises the scores as two plain products. Here
every node of the prefix forest with several requests is one such prefix;
the nodes of a single request are batched together, padded to the longest.
Torch only, any device: K and V are gathered per node into dense tensors
once, outside the timed call, as Hydragen keeps a prefix contiguous."""

import torch

from .cascade import request_paths


def _node_requests(forest):
    """The requests under each node of a forest."""
    reqs = [[] for _ in forest["nodes"]]
    for r, path in enumerate(request_paths(forest)):
        for x in path:
            reqs[x].append(r)
    return reqs


class Hydragen:
    """Attention of q [B, Hq, D] over the forest's KV, pages k and v [pages,
    page_size, Hkv, D] (NHD); __call__ returns out [B, Hq, D] in q's dtype."""

    def __init__(self, forest, k, v, num_qo_heads, sm_scale, kernel="matmul"):
        if kernel not in ("matmul", "flash"):
            raise ValueError(f"kernel: 'matmul' or 'flash', not {kernel!r}")
        self.kernel = kernel
        self.hq, self.hkv, self.dim = num_qo_heads, k.shape[2], k.shape[3]
        self.scale = sm_scale
        self.batch = len(forest["request_node"])
        dev = k.device

        def dense(node):  # [Hkv, tokens, D]
            pages = torch.tensor(node["pages"], dtype=torch.long, device=dev)
            n = node["num_tokens"]
            return (k[pages].reshape(-1, self.hkv, self.dim)[:n].transpose(0, 1).contiguous(),
                    v[pages].reshape(-1, self.hkv, self.dim)[:n].transpose(0, 1).contiguous())

        self.shared, singles = [], []
        for node, reqs in zip(forest["nodes"], _node_requests(forest)):
            if node["num_tokens"] == 0 or not reqs:
                continue
            if len(reqs) > 1:
                self.shared.append((torch.tensor(reqs, dtype=torch.long, device=dev),) + dense(node))
            else:
                singles.append((reqs[0], node))
        # single-request nodes in padded batches, each request at most once per batch
        self.single = []
        while singles:
            seen, batch, rest = set(), [], []
            for r, node in singles:
                (rest if r in seen else batch).append((r, node))
                seen.add(r)
            singles = rest
            longest = max(node["num_tokens"] for _, node in batch)
            kb = torch.zeros((len(batch), self.hkv, longest, self.dim), dtype=k.dtype, device=dev)
            vb = torch.zeros_like(kb)
            valid = torch.zeros((len(batch), longest), dtype=torch.bool, device=dev)
            for i, (_, node) in enumerate(batch):
                kn, vn = dense(node)
                kb[i, :, :kn.shape[1]], vb[i, :, :kn.shape[1]] = kn, vn
                valid[i, :kn.shape[1]] = True
            reqs = torch.tensor([r for r, _ in batch], dtype=torch.long, device=dev)
            self.single.append((reqs, kb, vb, valid[:, None, None, :]))

    def _softmax_parts(self, s, v):
        """o = softmax(s) v and the log-sum-exp of s (fp32)."""
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None]).to(v.dtype)
        return torch.matmul(p, v).float(), lse

    def _prefix_parts(self, q, k, v):
        """Attention of q [Hkv, M, D] over one prefix's k, v [Hkv, n, D]: o (fp32) and lse."""
        if self.kernel == "matmul":
            return self._softmax_parts(torch.matmul(q, k.transpose(1, 2)).float() * self.scale, v)
        op = (torch.ops.aten._scaled_dot_product_flash_attention if q.is_cuda
              else torch.ops.aten._scaled_dot_product_flash_attention_for_cpu)
        o, lse = op(q[None], k[None], v[None], scale=self.scale)[:2]
        return o[0].float(), lse[0]

    def __call__(self, q):
        g = self.hq // self.hkv
        out = torch.zeros((self.batch, self.hq, self.dim), dtype=torch.float32, device=q.device)
        lse = torch.full((self.batch, self.hq), float("-inf"), dtype=torch.float32, device=q.device)

        def combine(reqs, o, l):  # o [r, Hq, D], l [r, Hq]: fold into the running parts of those requests
            old = lse[reqs]
            new = torch.logaddexp(old, l)
            out[reqs] = out[reqs] * torch.exp(old - new)[..., None] + o * torch.exp(l - new)[..., None]
            lse[reqs] = new

        for reqs, kn, vn in self.shared:  # every query row under the node in one product per kv head
            r = reqs.numel()
            qn = q[reqs].view(r, self.hkv, g, self.dim).permute(1, 0, 2, 3).reshape(self.hkv, r * g, self.dim)
            o, l = self._prefix_parts(qn, kn, vn)  # [Hkv, r·G, D], [Hkv, r·G]
            combine(reqs, o.view(self.hkv, r, g, self.dim).permute(1, 0, 2, 3).reshape(r, self.hq, self.dim),
                    l.view(self.hkv, r, g).permute(1, 0, 2).reshape(r, self.hq))
        for reqs, kb, vb, valid in self.single:  # [L, Hkv, G, D] against [L, Hkv, n, D]
            n = reqs.numel()
            qs = q[reqs].view(n, self.hkv, g, self.dim)
            s = torch.matmul(qs, kb.transpose(2, 3)).float() * self.scale
            o, l = self._softmax_parts(s.masked_fill(~valid, float("-inf")), vb)
            combine(reqs, o.reshape(n, self.hq, self.dim), l.reshape(n, self.hq))
        return out.to(q.dtype)
