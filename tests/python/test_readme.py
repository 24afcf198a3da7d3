"""The README's Python example runs as written."""

import pathlib
import re


def test_readme_python_example_runs():
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "the README has no Python example"
    exec(compile(blocks[0], "README.md", "exec"), {})
