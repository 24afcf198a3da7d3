"""Every Python example of the README and docs/ runs as written, and the
pages point only at files of the repository. A block whose first line is
`# needs: torch[, transformers][, cuda]` runs where those are present (the GPU
machine's test run) and reports itself skipped elsewhere; every other block
runs here, on the CPU engine with numpy. Each block runs alone, in a module
of its own (torch.compile looks its globals up by module name), as a reader
would paste it; a failure's traceback names the page and the line."""

import importlib.util
import pathlib
import re
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(page):
    """(first line of the code, code, needs) of each ```python block of a page."""
    text = page.read_text()
    for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        code = m.group(1)
        line = text.count("\n", 0, m.start(1)) + 1
        first = code.split("\n", 1)[0]
        needs = [n.strip() for n in first.split(":", 1)[1].split(",")] if first.startswith("# needs:") else []
        yield line, code, needs


EXAMPLES = [(page, line, code, needs) for page in PAGES for line, code, needs in python_blocks(page)]


def require(needs):
    for need in needs:
        if need in ("torch", "transformers") and importlib.util.find_spec(need) is None:
            pytest.skip(f"the example needs {need}, which is not installed")
        if need == "cuda":
            import torch
            import codec
            if not (torch.cuda.is_available() and codec.cuda_available()):
                pytest.skip("the example needs a CUDA device and the CUDA engine")
        if need not in ("torch", "transformers", "cuda"):
            raise AssertionError(f"unknown need {need!r}: torch, transformers or cuda")


@pytest.mark.parametrize("page,line,code,needs", EXAMPLES,
                         ids=[f"{p.relative_to(ROOT)}:{line}" for p, line, _, _ in EXAMPLES])
def test_example_runs(page, line, code, needs, monkeypatch, tmp_path):
    require(needs)
    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    module = types.ModuleType(f"doc_example_{page.stem.lower()}_{line}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    # Blank lines before the code, so that a traceback's line numbers are the page's.
    exec(compile("\n" * (line - 1) + code, str(page.relative_to(ROOT)), "exec"), module.__dict__)


def test_every_page_with_examples_is_collected():
    pages = {p.name for p, _, _, _ in EXAMPLES}
    assert {"README.md", "PYTHON.md", "INTEGRATIONS.md"} <= pages, pages
    assert any(not needs for p, _, _, needs in EXAMPLES if p.name == "PYTHON.md"), "no CPU example in PYTHON.md"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_stay_in_the_repository_and_exist(page):
    text = page.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue  # a web address: not a file of the tree
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert path.exists(), f"{page.name} links to a file that does not exist: {target}"
