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
# The adaptive search against every split vector within the caps, where that is
# few enough to enumerate (codec plan refuses the others: see the .err lines).
: > "$out/plan_h200_exhaustive.jsonl"
for w in $(python3 -c "import json; print(' '.join(r['workload'] for r in json.load(open('$out/plan_h200.json'))))"); do
  ./build/codec plan --workload "$w" --split exhaustive --json 2>> "$out/plan_h200_exhaustive.err" \
    | python3 -c "import json,sys; [print(json.dumps(r)) for r in json.load(sys.stdin)]" >> "$out/plan_h200_exhaustive.jsonl" || true
done
for b in 4 16 64; do
  ./build/codec bench --workload "batch:$b" --reps 5 --json > "$out/bench_batch_$b.json"
done
./build/codec bench --workload batch:64 --reps 5 | tee "$out/bench_batch_64.txt"
