"""The README's Python example runs as written and computes what it says:
fp16 output and fp32 natural-log lse of each request's attention over its
pages, against float64."""

import pathlib
import re

import numpy as np


def test_readme_python_example_runs_and_is_right():
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "the README has no Python example"
    g = {}
    exec(compile(blocks[0], "README.md", "exec"), g)
    out, lse, cache, q = g["out"], g["lse"], g["kv_cache"].astype(np.float64), g["q"].astype(np.float64)
    assert out.dtype == np.float16 and lse.dtype == np.float32
    hq, hkv, d, ps = g["num_qo_heads"], g["num_kv_heads"], g["head_dim"], g["page_size"]
    indptr, indices, last = g["kv_indptr"], g["kv_indices"], g["kv_last_page_len"]
    for r in range(indptr.size - 1):
        pages = indices[indptr[r]:indptr[r + 1]]
        n = (pages.size - 1) * ps + last[r]
        k = cache[pages, 0].reshape(-1, hkv, d)[:n]  # (tokens, kv heads, dim)
        v = cache[pages, 1].reshape(-1, hkv, d)[:n]
        for h in range(hq):
            s = k[:, h // (hq // hkv)] @ q[r, h] / np.sqrt(d)
            m = s.max()
            p = np.exp(s - m)
            want = p @ v[:, h // (hq // hkv)] / p.sum()
            np.testing.assert_allclose(out[r, h].astype(np.float64), want, rtol=0, atol=2e-3)
            np.testing.assert_allclose(lse[r, h], m + np.log(p.sum()), rtol=1e-5)
