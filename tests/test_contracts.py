"""The architecture's rules, checked on the source (docs/architecture.md): stages import only stages to their
left; the engine imports only engine_costs; analysis does no I/O, imports no heavy library and starts no thread;
verbs do not call each other; the command line answers before any heavy library is imported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kernelscope"

# Stage rank: a module may import kernelscope modules of its own rank or lower. Shared vocabulary (rank -1)
# may be imported by every module and imports only other shared vocabulary.
STAGES = {"workload": 0, "capture": 1, "load": 2, "analyze": 3, "report": 4, "export": 4, "pipeline": 5,
          "commands": 6, "api": 6, "cli": 7, "__main__": 7}
SHARED = {"contracts", "errors", "ranges", "packaged", "filenames", "inert", "progress", "engine_costs", "__init__", "data",
          "workers", "cycles", "allocator"}
ENGINE_MAY_IMPORT = {"kernelscope.engine", "kernelscope.engine_costs"}
# The package's one lazy door to a stage: `kernelscope.open_run` & co. load kernelscope.api on first use.
PACKAGE_API = ("kernelscope.__init__", "kernelscope.api")
HEAVY = ("torch", "matplotlib", "transformers", "triton", "jinja2", "markdown_it", "cmarkgfm")
# Threads and processes are the report's and the readers' business: analysis computes, the caller decides what runs
# meanwhile.
CONCURRENCY = ("concurrent", "threading", "multiprocessing", "_thread")
# Calls that read or write files; analysis gets its data passed in (load/ reads, report/ writes).
IO_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "read_parquet", "write_parquet",
            "write_csv", "read_csv", "write_ipc", "read_ipc", "mkdir", "unlink", "packaged_toml", "rmtree"}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out.append((".".join(("kernelscope", *parts)), path))
    return out


def _top(module: str) -> str:
    """The top-level part of kernelscope a module name is in ("__init__" for the package and its attributes)."""
    parts = module.split(".")
    if len(parts) < 2 or not ((PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()):
        return "__init__"
    return parts[1]


def _rank(module: str) -> int | None:
    top = _top(module)
    return -1 if top in SHARED else STAGES.get(top)


def _imports(path: Path, module: str) -> list[str]:
    """Every module name `path` imports (relative imports resolved), at any depth (lazy imports too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(module.split(".")[: -node.level] + ([base] if base else []))
            names += [f"{base}.{alias.name}" for alias in node.names] + [base]
    return names


MODULES = _modules()


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_stage_order(module: str, path: Path):
    own = _rank(module)
    if _top(module) == "engine":
        bad = [n for n in _imports(path, module) if n.startswith("kernelscope")
               and not any(n == m or n.startswith(m + ".") for m in ENGINE_MAY_IMPORT)]
        assert not bad, f"the engine imports only kernelscope.engine_costs: {module} imports {bad}"
        return
    assert own is not None, f"{module}: a new top-level module: add it to STAGES or SHARED in this test"
    for name in _imports(path, module):
        if not name.startswith("kernelscope.") or name == "kernelscope":
            continue
        other = _rank(name)
        if (module, name) == PACKAGE_API:
            continue
        if _top(name) == "engine":
            assert _top(module) == "workload", f"{module} imports the engine ({name}); only workload/ runs it"
            continue
        assert other is not None and other <= max(own, -1) and (own >= 0 or other == -1), \
            f"{module} (stage {_top(module)}) imports {name} (stage {_top(name)}): stages import only to their left"


@pytest.mark.parametrize("module, path", [(m, p) for m, p in MODULES if _top(m) == "analyze"],
                         ids=[m for m, _ in MODULES if _top(m) == "analyze"])
def test_analysis_is_pure(module: str, path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    heavy = [n for n in _imports(path, module) if n.split(".")[0] in HEAVY]
    assert not heavy, f"{module} imports {heavy}: analysis works on tables only"
    concurrent = [n for n in _imports(path, module) if n.split(".")[0] in CONCURRENCY]
    assert not concurrent, f"{module} imports {concurrent}: analysis starts no thread or process"
    calls = {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
             for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert not calls & IO_CALLS, f"{module} does file I/O ({sorted(calls & IO_CALLS)}): load/ reads, report/ writes"


def test_verbs_do_not_call_each_other():
    from kernelscope.cli import VERBS

    verbs = set(VERBS.values())
    for module, path in MODULES:
        if module in verbs:
            others = [n for n in _imports(path, module) if any(n == v or n.startswith(v + ".") for v in verbs - {module})]
            assert not others, f"{module} imports the verb module(s) {others}; shared steps live in kernelscope.pipeline"


def _loaded_after(code: str, watched: tuple[str, ...] = HEAVY + ("polars", "numpy")) -> list[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {watched!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_the_command_line_is_built_without_heavy_libraries():
    assert _loaded_after("from kernelscope.cli import build_parser; build_parser()") == []


def test_importing_the_package_loads_no_library():
    watched = (*HEAVY, "polars", "numpy", "duckdb", "ray")
    assert _loaded_after("import kernelscope; kernelscope.__version__", watched) == []
    assert _loaded_after("from kernelscope.cli import build_parser; build_parser()", watched) == []


def test_an_import_without_report_loads_no_plotting_and_no_model_library(tmp_path):
    trace = Path(__file__).parent / "data" / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
    code = (f"from kernelscope.cli import main; "
            f"main(['-q', 'import', {str(trace)!r}, '--out', {str(tmp_path / 'run')!r}, '--no-report'])")
    loaded = _loaded_after(code)
    assert (tmp_path / "run" / "kernels.parquet").is_file()
    assert not set(loaded) & set(HEAVY), loaded
