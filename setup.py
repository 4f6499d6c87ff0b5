"""Builds the optional native fast path of the Kineto reader (src/kernelscope/load/kineto/native/, on simdjson).

Everything else is declared in pyproject.toml. simdjson's single-file sources come from the pysimdjson wheel, a
build requirement (pyproject.toml): it ships them next to its own module. The extension is optional: where it
cannot be built (no C++ compiler), the install goes on and kernelscope decodes every trace with msgspec
(docs/importing.md); the tables are the same either way.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension, setup


def _simdjson_dir() -> str | None:
    spec = importlib.util.find_spec("simdjson")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return str(folder) if (folder / "simdjson.cpp").is_file() and (folder / "simdjson.h").is_file() else None


def _extensions() -> list[Extension]:
    folder = _simdjson_dir()
    if folder is None:
        print("kernelscope: simdjson sources not found; the Kineto reader's native fast path is not built")
        return []
    return [Extension(
        "kernelscope.load.kineto._kineto_scan",
        sources=["src/kernelscope/load/kineto/native/kineto_scan.cpp", str(Path(folder) / "simdjson.cpp")],
        include_dirs=[folder],
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-DNDEBUG"],
        optional=True,
    )]


setup(ext_modules=_extensions())
