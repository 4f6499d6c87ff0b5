"""No Python file of src/, tests/ or benchmarks/ runs past 420 lines (the rule is about 400: a module keeps one job).
Exempt are kernel modules, whose length is the kernel's: files whose top-level functions are all Triton or Gluon
kernels (decorated with triton.jit or gluon.jit, with or without arguments)."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src", "tests", "benchmarks")
LIMIT = 420


def python_files(root: Path) -> list[Path]:
    """The .py files git would commit under FOLDERS (tracked, or new and not ignored); in a folder that is not a git
    checkout, every .py file there."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *FOLDERS],
                             cwd=root, capture_output=True, text=True, check=True).stdout
        names = [name for name in out.split("\0") if name.endswith(".py")]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(root)) for folder in FOLDERS for p in sorted((root / folder).rglob("*.py"))]
    return [root / name for name in names if (root / name).is_file()]


def _triton_names(tree: ast.Module) -> dict[str, str]:
    """Local names bound to a Triton module or to its jit (`import triton`, `from triton.experimental import gluon`,
    `from triton import jit`): name → what it is bound to."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "triton":
                    names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "triton"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton" and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _is_jit(decorator: ast.expr, triton_names: dict[str, str]) -> bool:
    """`@X.jit` or `@X.jit(...)` with X a Triton module (triton, gluon), or a bare `@jit` imported from one."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute) and target.attr == "jit":
        base = target.value
        while isinstance(base, ast.Attribute):
            base = base.value
        return isinstance(base, ast.Name) and base.id in triton_names
    return isinstance(target, ast.Name) and triton_names.get(target.id, "").endswith(".jit")


def is_kernel_module(text: str) -> bool:
    tree = ast.parse(text)
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    names = _triton_names(tree)
    return bool(functions) and all(any(_is_jit(d, names) for d in f.decorator_list) for f in functions)


def oversized(root: Path) -> list[str]:
    """`path: N lines` for every file over LIMIT that is not a kernel module."""
    found = []
    for path in python_files(root):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > LIMIT and not is_kernel_module(text):
            found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_file_is_over_the_limit():
    files = python_files(ROOT)
    assert len(files) > 100  # the listing found the tree
    assert oversized(ROOT) == [], f"split these by concept (at most {LIMIT} lines a file)"


def test_the_check_finds_a_long_file_and_spares_only_kernel_modules(tmp_path):
    """The checker itself, on a copy of benchmarks/engine (whose persistent_kernels.py is a kernel module over the
    limit) with three files planted: a long module of plain functions, a long kernel module with one plain helper
    (not a kernel module), and a long Gluon kernel module (exempt)."""
    engine = tmp_path / "benchmarks" / "engine"
    shutil.copytree(ROOT / "benchmarks" / "engine", engine, ignore=shutil.ignore_patterns("__pycache__"))
    kernels = (engine / "persistent_kernels.py").read_text(encoding="utf-8")
    assert len(kernels.splitlines()) > LIMIT and is_kernel_module(kernels)  # the real case the exemption is for
    plain = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(110))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "long.py").write_text(plain)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "mixed.py").write_text(kernels + "\n\ndef host_helper():\n    return 1\n")
    gluon = "from triton.experimental import gluon\n\n\n" + "".join(
        f"@gluon.jit\ndef k{i}(x):\n    pass\n\n\n" for i in range(90))
    (engine / "gluon_kernels.py").write_text(gluon)
    assert sorted(oversized(tmp_path)) == [f"src/long.py: {len(plain.splitlines())} lines",
                                           f"tests/mixed.py: {len(kernels.splitlines()) + 4} lines"]
