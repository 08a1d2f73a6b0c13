#!/usr/bin/env bash
# Optional system packages from Debian: tcmalloc (20-30% faster CPU training, see benchmarks/RESULTS.md).
# Without root or apt this prints a note and carries on: everything works without them, only slower.
set -u
need=()
ls /usr/lib/*/libtcmalloc_minimal.so.4 >/dev/null 2>&1 || need+=(libtcmalloc-minimal4)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; }) ||
    echo "note: could not install ${need[*]}; continuing without (slower CPU training)"
else
  echo "note: ${need[*]} not installed and no root/apt; continuing without (slower CPU training)"
fi
exit 0
