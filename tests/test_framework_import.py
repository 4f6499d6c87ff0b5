"""transformers imported without the optional libraries no workload uses (workload/framework.py)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelscope.workload.framework import modules_hidden


def _fake_package(root: Path, name: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("VALUE = 42\n", encoding="utf-8")


def test_a_hidden_module_looks_absent_within_the_block_and_imports_after(tmp_path, monkeypatch):
    _fake_package(tmp_path, "ks_fake_optional")
    monkeypatch.syspath_prepend(str(tmp_path))
    with modules_hidden(("ks_fake_optional",)):
        assert importlib.util.find_spec("ks_fake_optional") is None
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("ks_fake_optional")
    assert "ks_fake_optional" not in sys.modules
    assert importlib.import_module("ks_fake_optional").VALUE == 42
    del sys.modules["ks_fake_optional"]


def test_a_module_imported_already_is_left_as_it_is(tmp_path, monkeypatch):
    _fake_package(tmp_path, "ks_fake_loaded")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = importlib.import_module("ks_fake_loaded")
    with modules_hidden(("ks_fake_loaded",)):
        assert importlib.import_module("ks_fake_loaded") is loaded
    assert sys.modules["ks_fake_loaded"] is loaded
    del sys.modules["ks_fake_loaded"]


@pytest.mark.slow
def test_transformers_loads_its_generation_code_without_sklearn_which_imports_afterwards(tmp_path):
    """A stand-in scikit-learn that leaves a mark when imported: transformers' generation code is loaded without
    it, and the process can still import it afterwards."""
    (tmp_path / "sklearn").mkdir()
    marker = tmp_path / "imported"
    (tmp_path / "sklearn" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write('x')\n__version__ = '1.5.0'\n", encoding="utf-8")
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from kernelscope.workload.framework import import_transformers
        transformers = import_transformers()
        assert "transformers.generation.candidate_generator" in sys.modules
        assert not Path({str(marker)!r}).exists(), "transformers imported sklearn"
        assert sys.modules.get("sklearn", "absent") == "absent"
        import sklearn
        assert Path({str(marker)!r}).exists()
        print(transformers.AutoConfig.__name__)
    """)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "AutoConfig"

