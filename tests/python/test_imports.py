"""The package's modules import one another without a circle, lazy imports
inside functions included (the torch custom ops once read the wrapper's
fields by importing decode.py, which imported them back). Read from the
source: runs anywhere."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "python"


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name):
    """A module of the source tree, or the extension (codec._codec, built, not in the tree)."""
    path = ROOT / name.replace(".", "/")
    return name == "codec._codec" or path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path, name):
    """The codec modules a file imports, anywhere in it (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "codec"}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] != "codec":
                continue
            for a in node.names:  # `from . import x` imports the module x where there is one
                sub = f"{target}.{a.name}"
                found.add(sub if is_module(sub) else target)
    return found - {name}


def test_no_module_of_the_package_imports_itself_back():
    files = {module_name(p): p for p in (ROOT / "codec").rglob("*.py")}
    graph = {name: {m for m in imports(p, name) if m in files} for name, p in files.items()}
    assert "codec.decode" not in graph["codec._torch_ops"]

    def cycle_from(start, path, seen):
        for nxt in sorted(graph[start]):
            if nxt == path[0]:
                return path + [nxt]
            if nxt not in seen:
                seen.add(nxt)
                found = cycle_from(nxt, path + [nxt], seen)
                if found:
                    return found
        return None

    for name in sorted(graph):
        if name == "codec" or name.endswith(".integrations"):
            continue  # a package's __init__ imports its modules, which may import their siblings through it
        cycle = cycle_from(name, [name], {name})
        assert cycle is None, " -> ".join(cycle)
