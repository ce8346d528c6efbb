#!/usr/bin/env bash
# A device call carries the working tree (64 MiB in all). The real-SGLang bundle (.sglreal, 46 MiB) and
# the committed fixtures (fixtures/real/*.xz, ~26 MiB since the real SGLang sweeps) do not fit together:
# park the fixtures (the device never needs them) before a call that carries .sglreal, unpark after.
#   bash recipes/device_tree.sh park     # moves fixtures/real/*.xz to /tmp/specprof-parked/
#   bash recipes/device_tree.sh unpark   # moves them back (git status is clean again)
#   bash recipes/device_tree.sh size     # MiB that would travel (tracked files present + untracked not ignored)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
P=/tmp/specprof-parked
case "${1:-size}" in
  park) mkdir -p "$P"; for f in fixtures/real/*.xz; do [ -e "$f" ] && mv "$f" "$P/"; done; echo "parked in $P" ;;
  unpark) for f in "$P"/*.xz; do [ -e "$f" ] && mv "$f" fixtures/real/; done; git status --short fixtures | head ;;
  size) { git ls-files -z; git ls-files -z --others --exclude-standard; } | while IFS= read -r -d '' f; do
          [ -f "$f" ] && stat -c %s "$f"; done | awk '{s+=$1} END {printf "%.1f MiB\n", s/1048576}' ;;
  *) echo "usage: $0 park|unpark|size" >&2; exit 2 ;;
esac
