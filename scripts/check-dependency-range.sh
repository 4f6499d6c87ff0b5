#!/usr/bin/env bash
# Runs the test suite against one end of the dependency ranges in pyproject.toml, in a fresh virtual environment:
#   scripts/check-dependency-range.sh lowest [PYTEST ARGS…]   the lowest version of every direct dependency
#   scripts/check-dependency-range.sh newest [PYTEST ARGS…]   the newest versions the ranges allow (what pip picks)
# torch stays at the README's CPU build (2.13.0) either way. Uses uv (installed into a throwaway environment) for
# its lowest-version resolution. The environment is made under $KS_RANGE_VENV (default /tmp/kernelscope-<end>).
set -euo pipefail
cd "$(dirname "$0")/.."
end="${1:?usage: check-dependency-range.sh lowest|newest [pytest args…]}"
shift
case "$end" in
  lowest) resolution=lowest-direct ;;
  newest) resolution=highest ;;
  *) echo "check-dependency-range: lowest or newest, not '$end'" >&2; exit 2 ;;
esac
venv="${KS_RANGE_VENV:-/tmp/kernelscope-$end}"
tools="$(mktemp -d)"
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/uv" && "$tools/uv/bin/pip" install -q uv
rm -rf "$venv"
"$tools/uv/bin/uv" venv -q --python "$(command -v python3)" "$venv"
links=()
for folder in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$folder"); done
"$tools/uv/bin/uv" pip install -q --python "$venv/bin/python" --resolution "$resolution" "${links[@]}" \
  torch==2.13.0 -e '.[test]'
"$venv/bin/python" -m pip --version >/dev/null 2>&1 || true
echo "check-dependency-range: $end versions:" >&2
"$tools/uv/bin/uv" pip list --python "$venv/bin/python" 2>/dev/null | grep -iE \
  '^(msgspec|polars|numpy|jinja2|rich|matplotlib|cmarkgfm|pycxxfilt|pillow|tokenizers|accelerate|duckdb|transformers|torch|pytest|ruff|playwright|hypothesis|markdown-it-py|ray) ' >&2
"$venv/bin/python" -m pytest "$@"
