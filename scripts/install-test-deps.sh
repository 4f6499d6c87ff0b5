#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine: the package with its test extras (torch pinned to the
# CPU build that lies on disk), and Debian's Chromium with a CJK font for the browser test of the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install torch==2.13.0 -e '.[test]'
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-zenhei >/dev/null
  else
    echo "install-test-deps: no chromium and no root apt-get: the browser test will be skipped" >&2
  fi
fi
