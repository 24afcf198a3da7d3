#!/usr/bin/env bash
# Measures what results/README.md publishes, one step per call, each within one
# 10-minute device command. Every step writes its raw files into OUT/current/
# (copy them over results/current/) and its logs into OUT/logs/STEP/, then
# scripts/publish_results.py rewrites the page's tables and plots from them.
#   bash scripts/publish.sh STEP OUT
# Steps:
#   planner  on the 2-core development host, no GPU: bench_planner's derive + plan at 64, 256
#            and 1,024 requests, two runs of a median of 7 -> planner_speed.txt
#   kernels  build, every built-in workload (codec bench --workload all) -> bench_all.json
#   peers1   build, PAT, the peer set's first 9 workloads -> peers_1.json
#   peers2   build, PAT, its other 12 -> peers_2.json
#   e2e      build, pip install, loogle:8 in transformers' continuous batching, the engine's CUDA
#            graphs: CoDec, the floor, FlashInfer decode (prefill chunks on SDPA) and FlashInfer
#            prefill (prefill chunks in its plan) -> e2e_loogle_8.json
#   e2e_prefill build, pip install, issue 51's engine targets: loogle:8 eager, the engine's FIFO scheduler (decode
#            rows first) in steps of 2,048 tokens (the questions' prefill spread over steps that mix with decode
#            rows), codec, noop, fi_prefill and fi_decode (its prefill chunks on the causal SDPA)
#            -> e2e_prefill_loogle_8.json; ~9 minutes on a cold machine (the build, FlashInfer's first
#            compiles, four backends): run it as a call's only step
#   e2e_gptoss  build, pip install, issue 53's target: gpt-oss-20b's shape (sliding windows, sinks), one
#            8,192-token prompt sampled 64 times (samples:64), eager: CoDec, the floor, FlashInfer's
#            attention-sink wrapper (the peer that computes gpt-oss's sinks), decode (prefill chunks on its
#            prefill wrapper) and prefill wrappers, three rounds, two sequences a backend checked against the
#            model's eager forward -> e2e_gpt-oss-20b_samples_64.json (on a cold H100 the JIT builds of the
#            first FlashInfer backend's window and sink kernels outlasted the call's last 4 minutes: call it
#            again at once, while the machine is warm; they are kept in build-gpu/fi-jit)
#   breadth  build, CoDec against its floor on what issues 51-53 add: q_len 2, 4 and 8 and a 4x4 draft
#            tree on the sharing workloads, verify:8 at one and four tokens, soft-cap 50 with sinks against
#            plain attention, the window workloads, an fp8 cache against bf16 -> breadth_<kind>.json
#            (FlashInfer on the same batches: peers_sweep)
#   peers_sweep  build, FlashInfer's decode, prefill, attention-sink and cascade wrappers beside CoDec on what
#            issues 51-53 add, one call a CODEC_PEER_KIND and CODEC_PEER_HALF (1: the peer set's first 9
#            workloads, 2: its other 12; tree takes loogle:8 and batch:64 in one call): q2, q4, q8 (--q-len),
#            tree (--tree 4,4), fp8 (--dtype fp8), capped (--soft-cap 50 --sinks), window (--window 4096)
#            -> sweep_peers_<kind>_<half>.json
#   pyapi    build, pip install, bench/python_api.py -> python_api.json
# The GPU steps go through scripts/gpu_run.sh and also write machine_<table>.txt (GPU, driver,
# nvcc, the tree's commit: pass CODEC_TREE_COMMIT=$(git rev-parse HEAD), evaluated here, since the
# device's copy of .git may be stale). With CODEC_PREBUILT=.prebuilt (scripts/prebuild_codec.sh, here;
# carry .prebuilt) they copy the binaries built here instead of building, and record their commit. peers1 and peers2 carry .whl and .pat (scripts/fetch_peer_wheels.sh,
# fetch_pat.sh and prebuild_pat.sh, here, first); on a cold machine the build, PAT's link and
# FlashInfer's first compiles take ~5 of a step's minutes, on a warm one the build and PAT are
# reused. e2e, e2e_prefill, e2e_gptoss and pyapi carry .whl. Then, here:
#   cp OUT/current/* results/current/
#   python3 scripts/publish_results.py results/current --page results/README.md --plots results
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2; }
[ $# -eq 2 ] || usage
step=$1
case $step in planner|kernels|peers1|peers2|peers_sweep|e2e|e2e_prefill|e2e_gptoss|breadth|pyapi) ;; *) usage ;; esac
if [ "$step" = peers_sweep ]; then
  kind=${CODEC_PEER_KIND:-} half=${CODEC_PEER_HALF:-1}
  case $kind in
    q2|q4|q8) sweep_args="--q-len ${kind#q}" ;;
    tree) sweep_args="--tree 4,4" half=1 ;;
    fp8) sweep_args="--dtype fp8" ;;
    capped) sweep_args="--soft-cap 50 --sinks" ;;
    window) sweep_args="--window 4096" ;;
    *) echo "peers_sweep: CODEC_PEER_KIND '$kind' is not one of q2 q4 q8 tree fp8 capped window"; exit 2 ;;
  esac
  case $half in 1|2) ;; *) echo "peers_sweep: CODEC_PEER_HALF '$half' is not 1 or 2"; exit 2 ;; esac
fi
out=$(mkdir -p "$2" && cd "$2" && pwd) || exit 2
cur=$out/current logs=$out/logs/$step${kind:+_${kind}_$half}
mkdir -p "$cur" "$logs"
status=0
peers="fi_decode,fi_cascade,sdpa,hydragen,pat"
first="seq:128,seq:512,seq:2048,batch:4,batch:16,batch:64,depth:2,depth:4,depth:6"
rest="ratio:0.05,ratio:0.2,ratio:0.8,shape:2,shape:5,shape:DT,long,loogle:8,fewshot,flat:64,sysprompt:512,sysprompt:512@1"
gpu_run() {  # gpu_run STEPS [VAR=VALUE...]: scripts/gpu_run.sh into the step's log folder
  local steps=$1; shift
  env CODEC_GPU_STEPS="$steps" "$@" timeout "${CODEC_PUBLISH_TIMEOUT:-580}" bash scripts/gpu_run.sh "$logs" \
    > "$logs/gpu_run.log" 2>&1
  local rc=$?
  grep -E "^== |^!!" "$logs/gpu_run.log" | tail -20
  [ $rc -eq 0 ] || { echo "!! $step: gpu_run.sh exit $rc ($logs/gpu_run.log)"; status=1; }
}
keep() {  # keep SRC NAME: a raw file into current/, or a failure
  if [ -s "$1" ]; then cp "$1" "$cur/$2" && echo "wrote current/$2"; else echo "!! $step: no $1"; status=1; return 1; fi
}
peer_step() {  # peer_step N WORKLOADS
  local s="build peers"
  PYTHONPATH=build-gpu/pat python3 -c "import prefix_attn" 2> /dev/null || s="build pat peers"  # PAT built once a machine
  gpu_run "$s" CODEC_PEERS="$peers" CODEC_PEER_WORKLOADS="$2"
  keep "$logs/peers/peers.json" "peers_$1.json" && keep "$logs/machine.txt" machine_peers.txt &&
    head -1 "$logs/peers/peers.log" > "$cur/peers_versions.txt"
}
case $step in
  planner)
    if ! { cmake --preset release > "$logs/configure.log" 2>&1 &&
           cmake --build --preset release -j "$(nproc)" --target bench_planner > "$logs/build.log" 2>&1; }; then
      echo "!! planner: build failed ($logs)"; exit 1
    fi
    { git rev-parse HEAD; lscpu | head -15; nproc; } > "$cur/machine_planner.txt" 2>&1
    for _ in 1 2; do
      ./build/bench/bench_planner --benchmark_filter=DeriveAndPlan --benchmark_repetitions=7 \
        --benchmark_report_aggregates_only=true 2>&1
    done > "$cur/planner_speed.txt" || exit 1
    grep _median "$cur/planner_speed.txt"
    ;;
  kernels)
    gpu_run "build bench"
    keep "$logs/bench_all.json" bench_all.json && keep "$logs/machine.txt" machine_kernels.txt ;;
  peers1) peer_step 1 "$first" ;;
  peers2) peer_step 2 "$rest" ;;
  peers_sweep)
    workloads=$first; [ "$half" = 2 ] && workloads=$rest; [ "$kind" = tree ] && workloads=loogle:8,batch:64
    gpu_run "build peers" CODEC_PEERS=fi_decode,fi_prefill,fi_sink,fi_cascade CODEC_PEER_WORKLOADS="$workloads" \
      CODEC_PEER_ARGS="$sweep_args"
    keep "$logs/peers/peers.json" "sweep_peers_${kind}_$half.json" && keep "$logs/machine.txt" machine_sweep_peers.txt ;;
  e2e)
    gpu_run "build install e2e" CODEC_E2E_MODES=graphs CODEC_E2E_GRAPH_BACKENDS=codec,noop,fi_decode,fi_prefill \
      CODEC_E2E_WORKLOADS=loogle:8 CODEC_E2E_ARGS=--step-profile
    keep "$logs/e2e/graphs/e2e_loogle_8.json" e2e_loogle_8.json && keep "$logs/machine.txt" machine_e2e.txt ;;
  e2e_prefill)
    gpu_run "build install e2e" CODEC_E2E_MODES=eager CODEC_E2E_BACKENDS=codec,noop,fi_prefill,fi_decode \
      CODEC_E2E_WORKLOADS=loogle:8 \
      CODEC_E2E_ARGS="--scheduler fifo --max-batch-tokens 2048"
    keep "$logs/e2e/eager/e2e_loogle_8.json" e2e_prefill_loogle_8.json &&
      keep "$logs/machine.txt" machine_e2e_prefill.txt ;;
  e2e_gptoss)
    gpu_run "build install e2e" CODEC_E2E_MODES=eager CODEC_E2E_BACKENDS=codec,noop,fi_sink,fi_decode,fi_prefill \
      CODEC_E2E_WORKLOADS=samples:64 CODEC_E2E_ARGS="--model gpt-oss-20b --rounds 3"
    keep "$logs/e2e/eager/e2e_gpt-oss-20b_samples_64.json" e2e_gpt-oss-20b_samples_64.json &&
      keep "$logs/machine.txt" machine_e2e_gptoss.txt ;;
  breadth)
    gpu_run "build"
    breadth() {  # breadth KIND ARGS...: codec bench ARGS -> current/breadth_KIND.json
      local kind=$1; shift
      ./build-gpu/codec bench --backend cuda --save "$logs/breadth_$kind.json" "$@" > "$logs/breadth_$kind.log" 2>&1 ||
        { echo "!! breadth $kind: codec bench failed ($logs/breadth_$kind.log)"; status=1; }
      keep "$logs/breadth_$kind.json" "breadth_$kind.json"
    }
    sharing="loogle:8,batch:64,sysprompt:512,fewshot,flat:64"
    for q in 2 4 8; do breadth "q$q" --workload "$sharing" --q-len "$q"; done
    breadth tree --workload loogle:8,batch:64 --tree 4,4
    breadth verify --workload verify:8
    breadth verify_q4 --workload verify:8 --q-len 4
    breadth plain --workload loogle:8,long,flat:64
    breadth capped --workload loogle:8,long,flat:64 --soft-cap 50 --sinks
    breadth window --workload window:4096,window:131072
    breadth bf16 --workload loogle:8,fewshot,flat:64,batch:64,long
    breadth fp8 --workload loogle:8,fewshot,flat:64,batch:64,long --dtype fp8
    keep "$logs/machine.txt" machine_breadth.txt ;;
  pyapi)
    gpu_run "build install pybench"
    keep "$logs/python_api.json" python_api.json && keep "$logs/machine.txt" machine_python_api.txt ;;
esac
exit $status
