#!/usr/bin/env bash
# Reproduces the CPU-side results in results/cpu/: planner speed (Google
# Benchmark), plan quality for the H200 over every built-in workload, and the
# CPU engine on the batch sweep. Raw outputs are kept next to the tables.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target codec_tool bench_planner
out=results/cpu
mkdir -p "$out"
{ uname -m; nproc; grep -m1 "model name" /proc/cpuinfo || true; date -u; git rev-parse HEAD; } > "$out/machine.txt"
./build/bench/bench_planner --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  | tee "$out/bench_planner.txt"
./build/codec plan --workload all | tee "$out/plan_h200.txt"
./build/codec plan --workload all --json > "$out/plan_h200.json"
for b in 4 16 64; do
  ./build/codec bench --workload "batch:$b" --reps 5 --json > "$out/bench_batch_$b.json"
done
./build/codec bench --workload batch:64 --reps 5 | tee "$out/bench_batch_64.txt"
