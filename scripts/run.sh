#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job: the default workload
# (batch:64, qwen3-4b heads, bf16, page 16) through CoDec and the flat
# baseline, verified against the fp64 reference, on the best available device.
# Extra arguments go to `codec bench` (e.g. --workload all).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target codec_tool -j "$(nproc)"
exec ./build/codec bench "$@"
