"""The allocator setting: made before Polars loads, never over the user's own, never too late."""

from __future__ import annotations

import os
import subprocess
import sys

from kernelscope.allocator import POLARS_ALLOCATOR_CONF, POLARS_ALLOCATOR_ENV, TABLES_ALLOCATOR_CONF


def _in_fresh_interpreter(code: str, env_value: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != POLARS_ALLOCATOR_ENV}
    if env_value is not None:
        env[POLARS_ALLOCATOR_ENV] = env_value
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


_REPORT = (
    "import os\n"
    "from kernelscope.allocator import configure_polars_allocator\n"
    "{before}"
    "print(configure_polars_allocator(), os.environ.get('{env}'))\n"
)


def test_set_before_polars_loads() -> None:
    out = _in_fresh_interpreter(_REPORT.format(before="", env=POLARS_ALLOCATOR_ENV))
    assert out == f"True {POLARS_ALLOCATOR_CONF}"


def test_users_own_setting_is_kept() -> None:
    out = _in_fresh_interpreter(_REPORT.format(before="", env=POLARS_ALLOCATOR_ENV), env_value="narenas:1")
    assert out == "False narenas:1"


def test_not_set_once_polars_is_loaded() -> None:
    out = _in_fresh_interpreter(_REPORT.format(before="import polars\n", env=POLARS_ALLOCATOR_ENV))
    set_, value = out.split(" ", 1)
    assert set_ == "False" and POLARS_ALLOCATOR_CONF not in value


def test_the_cli_loads_no_polars_before_setting_it() -> None:
    # entry() sets the allocator first: importing the command-line module must not have loaded Polars already.
    out = _in_fresh_interpreter("import sys\nimport kernelscope.cli\nprint('polars' in sys.modules)")
    assert out == "False"


def test_commands_that_hold_traces_set_theirs_and_others_the_tables_one() -> None:
    code = ("import os, sys\nfrom kernelscope import cli\n"
            "try:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print(os.environ.get('{POLARS_ALLOCATOR_ENV}', 'unset'))")
    env = {k: v for k, v in os.environ.items() if k != POLARS_ALLOCATOR_ENV}

    def after(*argv: str) -> str:
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
        return done.stdout.strip().splitlines()[-1]

    # A missing file ends either command at once: what is set is what main() chose (and Polars' own defaults).
    assert after("import", "no-such-trace.json") == POLARS_ALLOCATOR_CONF
    # (Polars, loaded by report before it finds the run missing, puts its own defaults first: the last word is ours.)
    report = after("report", "no-such-run")
    assert report.endswith(TABLES_ALLOCATOR_CONF) and POLARS_ALLOCATOR_CONF not in report
    assert after("--help") == "unset"  # argparse exits before a command is chosen


_HEAP = (
    "import psutil\n"
    "from kernelscope.allocator import trim_native_heap\n"
    "process = psutil.Process()\n"
    # 200 MB in 64 KiB blocks from glibc's heap, then all freed but the last: the freed blocks lie below a live one,
    # so glibc cannot give them back on its own.
    "blocks = [bytearray(65536) for _ in range(3200)]\n"
    "last = blocks[-1]\n"
    "del blocks\n"
    "before = process.memory_info().rss\n"
    "trimmed = trim_native_heap()\n"
    "print(trimmed, (before - process.memory_info().rss) // 2**20)\n"
)


def test_trimming_gives_freed_heap_memory_back() -> None:
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError):
        glibc = False
    trimmed, returned_mb = _in_fresh_interpreter(_HEAP).split()
    if not glibc:
        assert trimmed == "False"
        return
    assert trimmed == "True"
    assert int(returned_mb) > 100  # of the ~200 MB freed


def test_trimming_elsewhere_does_nothing(monkeypatch) -> None:
    from kernelscope import allocator

    monkeypatch.setattr(allocator.os, "confstr", lambda name: "musl")
    assert allocator.trim_native_heap() is False
