#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader of outside input (tests/fuzz/):
# builds the fuzz preset (clang, libFuzzer, ASan + UBSan) and runs each target
# for SECONDS (default 60) from its seeds, the inputs of past crashes and the
# corpus earlier runs grew (build-fuzz/corpus/<target>, not committed).
#   bash scripts/fuzz.sh [SECONDS]      CODEC_FUZZ_TARGETS="page_table" picks targets
# A crash, a sanitizer report, a leak, an input slower than 30 s or one taking
# more than 4 GB fails the run and prints that input (base64); it belongs in
# tests/fuzz/regressions/<target>/, which every build replays as a test.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
seconds=${1:-60}
targets=${CODEC_FUZZ_TARGETS:-"workload_json cost_table page_table"}
bash scripts/install_deps.sh fuzz
cmake --preset fuzz > /dev/null
cmake --build --preset fuzz -j "$(nproc)"
for target in $targets; do
  corpus=build-fuzz/corpus/$target crashes=build-fuzz/crashes/$target log=build-fuzz/fuzz_$target.log
  mkdir -p "$corpus" "$crashes"
  inputs=("tests/fuzz/seeds/$target")
  [[ -d tests/fuzz/regressions/$target ]] && inputs+=("tests/fuzz/regressions/$target")
  [[ $target == cost_table ]] && inputs+=(data/cost_tables)
  dict=()
  [[ -f tests/fuzz/$target.dict ]] && dict=("-dict=tests/fuzz/$target.dict")
  echo "== fuzz $target: $seconds s"
  if ! "build-fuzz/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
      -print_final_stats=1 "${dict[@]}" -artifact_prefix="$crashes/" "$corpus" "${inputs[@]}" > "$log" 2>&1; then
    grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' "$log" | tail -n 60
    for input in "$crashes"/*; do
      echo "-- the input that failed, $input ($(stat -c %s "$input") bytes), base64:"
      base64 "$input" | head -c 8000
      echo
    done
    echo "fuzz $target FAILED: add the input above to tests/fuzz/regressions/$target/ and fix the reader" >&2
    exit 1
  fi
  # The last status line (coverage: cov = edges, ft = features) and the rate.
  grep -E '^#[0-9]+\s+DONE' "$log" | tail -n 1
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log"
done
