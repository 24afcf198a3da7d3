"""The README as a front door: its first Python example comes within the
first 80 lines, runs as written and computes what it says (fp16 output and
fp32 natural-log lse of each request's attention over its pages, against
float64); its C++ example makes the calls of the consumer project that the
package check builds. tests/python/test_docs.py runs its other examples."""

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


def test_a_newcomer_reaches_the_python_example_early():
    lines = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text().splitlines()
    first = lines.index("```python") + 1
    assert first <= 80, f"the README's first Python example starts on line {first}, past line 80"


def test_the_cpp_quick_start_makes_the_package_consumers_calls():
    """Every codec:: name the README's C++ example uses is one the consumer
    project that the package check builds and runs uses too."""
    root = pathlib.Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    blocks = re.findall(r"```cpp\n(.*?)```", readme, flags=re.S)
    assert len(blocks) == 1, "the README has one C++ example"
    consumer = (root / "tests/package/consumer/main.cpp").read_text()
    names = set(re.findall(r"codec::\w+(?:::\w+)*", blocks[0]))
    assert {"codec::make_planner_setup", "codec::make_plan", "codec::run_cpu"} <= names, names
    missing = sorted(n for n in names if n not in consumer)
    assert not missing, f"the README's C++ example uses what the package consumer does not: {missing}"
    for header in re.findall(r"#include <(codec/[^>]+)>", blocks[0]):
        assert f"<{header}>" in consumer, header
