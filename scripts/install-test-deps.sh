#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine: the package with its test extras (torch pinned to the
# CPU build that lies on disk), Debian's Chromium for the browser test of the HTML report, and a CJK font for the
# Chinese figures. Each system package is installed on its own condition: a machine with Chromium but no CJK font
# still gets the font.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install torch==2.13.0 -e '.[test]'
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# fc-list ships with fontconfig, which Chromium pulls in; without it no font can be found either.
if ! command -v fc-list >/dev/null 2>&1 || [ -z "$(fc-list :lang=zh family 2>/dev/null)" ]; then
  missing+=(fonts-wqy-zenhei)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "install-test-deps: ${missing[*]} missing and no root apt-get: the browser test or the Chinese figures" \
         "will be skipped" >&2
  fi
fi
