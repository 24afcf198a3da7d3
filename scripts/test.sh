#!/usr/bin/env bash
# Builds and runs every test: the release build, then the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer. Fails on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
jobs=$(nproc)
for preset in release asan; do
  echo "== $preset: build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "== $preset: tests"
  ctest --preset "$preset" -j "$jobs"
done
