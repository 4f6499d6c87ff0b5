"""Rebuild the trace corpus (benchmarks/corpus/manifest.toml) from local git mirrors of its source repositories.

The corpus is ~50 MB of public traces, too large for this repository; only small ones are committed (under
tests/data/public/). This developer script needs the repositories as git directories (e.g. the snapshots the
project's `fetch` tool brings into /work/.mirror/<owner>+<name>/repo, or any clone): CI cannot reach GitHub and
does not run it.

    python benchmarks/corpus/build_corpus.py [--mirrors /work/.mirror] [--out /work/corpus]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def git_dir(mirrors: Path, repo: str) -> Path:
    """The git directory of a mirror: <owner>+<name>/repo (bare, or a checkout's repo/.git), else the folder."""
    base = mirrors / repo.replace("/", "+")
    for candidate in (base / "repo" / ".git", base / "repo"):
        if candidate.exists():
            return candidate
    return base


def tar_member(archive: bytes, member: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        extracted = tar.extractfile(member)
        if extracted is None:
            raise SystemExit(f"{member}: not a file in its archive")
        return extracted.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--out", type=Path, default=Path("/work/corpus"))
    args = parser.parse_args()
    manifest = tomllib.loads((ROOT / "benchmarks/corpus/manifest.toml").read_text())
    for entry in manifest["trace"]:
        if entry["source"] == "kernelscope":  # our own captures, in this repository
            data = (ROOT / entry["source_path"]).read_bytes()
        else:
            data = subprocess.run(["git", "--git-dir", str(git_dir(args.mirrors, entry["source"])), "show",
                                   f"{entry['commit']}:{entry['source_path']}"], capture_output=True, check=True).stdout
        if "member" in entry:  # a file inside a tar archive of the repository
            data = tar_member(data, entry["member"])
        if len(data) != entry["bytes"]:
            raise SystemExit(f"{entry['path']}: {len(data)} bytes, the manifest says {entry['bytes']}")
        target = args.out / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"{hashlib.sha256(data).hexdigest()[:12]}  {entry['path']}")


if __name__ == "__main__":
    main()
