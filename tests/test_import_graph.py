"""The import graph of src/kernelscope: no cycle (lazy imports inside functions count), no private name of one
module used by another, and dynamic imports only where a registry needs them. test_contracts.py checks the order
of the stages; this file the shape of the graph inside them."""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "kernelscope"
# Modules that may import by name at run time, and why.
DYNAMIC_IMPORTS = {
    "kernelscope.cli": "the registry of verbs: each command's module is loaded when the parser is built",
    "kernelscope.workload.framework": "third-party transformers modules loaded early, never kernelscope's",
}


@dataclass
class ImportGraph:
    edges: dict[str, set[str]] = field(default_factory=dict)
    private: list[str] = field(default_factory=list)  # "importer: module._name"
    dynamic: set[str] = field(default_factory=set)


def _extension_modules(root: Path) -> set[str]:
    """Compiled modules setup.py declares (they have no .py file to find)."""
    setup = root / "setup.py"
    return set(re.findall(r'Extension\(\s*"([\w.]+)"', setup.read_text())) if setup.is_file() else set()


def import_graph(package: Path) -> ImportGraph:
    modules: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    known = set(modules) | _extension_modules(package.parents[1])
    graph = ImportGraph(edges={m: set() for m in modules})

    def target(name: str) -> str:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package_name = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        aliases: dict[str, str] = {}  # local name → kernelscope module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("kernelscope"):
                        graph.edges[module].add(target(alias.name))
                        aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "kernelscope"
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package_name.split(".")[: len(package_name.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                if not base.startswith("kernelscope"):
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    graph.edges[module].add(target(full))
                    if full in known:
                        aliases[alias.asname or alias.name] = full
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        graph.private.append(f"{module}: {base}.{alias.name}")
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in ("import_module", "__import__"):
                    graph.dynamic.add(module)
        for node in ast.walk(tree):  # module._name, on a kernelscope module this one imported
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                    and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and aliases[node.value.id] != module:
                graph.private.append(f"{module}: {aliases[node.value.id]}.{node.attr}")
        graph.edges[module].discard(module)
    return graph


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in edges), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


GRAPH = import_graph(PACKAGE)


def test_no_import_cycle():
    assert cycles(GRAPH.edges) == []


def test_no_private_name_is_used_across_modules():
    assert GRAPH.private == []


def test_dynamic_imports_only_in_the_registries():
    assert GRAPH.dynamic <= set(DYNAMIC_IMPORTS), sorted(GRAPH.dynamic - set(DYNAMIC_IMPORTS))


def test_the_checks_find_a_cycle_and_a_private_name_built_into_a_copy(tmp_path):
    """The checker itself: a copy of the package with one lazy import that closes a cycle and one use of another
    module's private name is caught (both were once in the tree, hidden by function-level imports)."""
    copy = tmp_path / "src" / "kernelscope"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copyfile(ROOT / "setup.py", tmp_path / "setup.py")
    filenames = copy / "filenames.py"
    filenames.write_text(filenames.read_text() + "\n\ndef _closes_a_cycle():\n"
                         "    from kernelscope.report.templating import write_csv_tables\n    return write_csv_tables\n")
    ranges = copy / "ranges.py"
    ranges.write_text(ranges.read_text() + "\n\ndef _uses_a_private_name():\n"
                      "    from kernelscope import filenames\n    return filenames._UNSAFE\n")
    graph = import_graph(copy)
    assert any("kernelscope.filenames" in c for c in cycles(graph.edges))
    assert "kernelscope.ranges: kernelscope.filenames._UNSAFE" in graph.private
