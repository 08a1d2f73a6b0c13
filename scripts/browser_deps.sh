#!/usr/bin/env bash
# Headless Chromium for the report's browser test (tests/sweep/test_report_browser.py), installed by
# `make test` only (not by `make demo`, whose ten minutes it would eat): root and apt-get, else a note and
# the test skips with its reason.
set -uo pipefail
command -v chromium >/dev/null && command -v chromedriver >/dev/null && exit 0
install() { apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  install || { apt-get update -qq >/dev/null 2>&1 && install; } && exit 0
fi
echo "note: chromium not installed (needs root and apt-get); the report's browser test will be skipped"
