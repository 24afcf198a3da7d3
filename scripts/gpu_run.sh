#!/usr/bin/env bash
# One call on a GPU machine: build with the CUDA engine, run every test (GPU
# tests included), compute-sanitizer memcheck and racecheck on a small GPU
# test, the benchmark suite, and ncu device-memory traffic. Logs and tables go
# to the folder given as $1 (default: build-gpu/out, ignored by git).
#   bash scripts/gpu_run.sh "$OUT"
# Set CODEC_GPU_STEPS to a subset of "build test python install arch ptx fuzz sanitize profile bench roofline ablation
# ncu peers pat pybench e2e" to run fewer steps; the default is all but roofline (every workload planned under the
# roofline model instead of the measured table), install (the python step's `pip install` alone), peers
# (FlashInfer, Hydragen-style, cuDNN and flex_attention side by side: FlashInfer needs the wheels
# scripts/fetch_peer_wheels.sh puts in .whl/; CODEC_PEER_WORKLOADS and CODEC_PEERS narrow it to some
# workloads and peer families, CODEC_PEER_ARGS passes it more arguments (--q-len 4, --dtype fp8, ...); pat builds PAT from .pat/, scripts/fetch_pat.sh, for the peers' pat family, on the kernels
# scripts/prebuild_pat.sh compiled where they are there) and pybench (bench/python_api.py: host time of plan and run through the
# Python API beside FlashInfer's, and its kernel time against codec bench's), and e2e (bench/e2e_decode.py,
# decode in transformers' continuous batching per backend, for each workload of CODEC_E2E_WORKLOADS, default
# loogle:2, in each mode of CODEC_E2E_MODES, with CODEC_E2E_BACKENDS (eager) or CODEC_E2E_GRAPH_BACKENDS (graph
# modes) and the extra arguments CODEC_E2E_ARGS if set, one process (one model) a mode; after the python or
# install step, which installs the package; keep one device call under 10 minutes). scripts/publish.sh runs the
# steps that make results/README.md's tables.
# With CODEC_PREBUILT=DIR (scripts/prebuild_codec.sh's folder, carried to the device) the build step copies its
# codec and test_engine_cuda instead of building, the test step runs those GPU tests alone, machine.txt names
# DIR/COMMIT, and the profile step is refused (it writes into the tree the binary was built from).
#   python: `pip install` of the package as a user does it offline, then every Python test (torch on the
#           GPU, CUDA graphs, torch.compile, opcheck, FlashInfer equality where the wheels are there), or
#           those CODEC_PYTESTS names (test files or node ids); without them, --tp's gloo rehearsal too, with
#           no GPU visible (it needs accelerate, in .whl/)
#   arch:   a build for sm_80 only must refuse this GPU with a clear error, not fail a launch
#   ptx:    a build of sm_80 PTX alone, JIT-compiled for this GPU, runs the GPU tests of fp8 caches, merges and
#           a captured graph on sm_80's code (mma.sync only, e4m3 converted without sm_89's instruction, the
#           merge launched in order: its code has no griddepcontrol.wait)
#   fuzz:   codec fuzz --backend cuda, 1,000 random cases against the fp64 reference
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-gpu/out}
steps=${CODEC_GPU_STEPS:-build test python arch ptx fuzz sanitize profile bench ablation ncu}
mkdir -p "$out"
status=0
step() { [[ " $steps " == *" $1 "* ]]; }
run() {  # run NAME CMD...: log to $out/NAME.log, remember failures
  local name=$1; shift
  echo "== $name: $*"
  if ! "$@" > "$out/$name.log" 2>&1; then echo "!! $name failed (see $name.log)"; status=1; fi
  tail -n 25 "$out/$name.log"
}
# The clocks and power limit too: compute- and L2-bound workloads move with the SM clock, DRAM-bound ones do not.
# The tree's commit: CODEC_TREE_COMMIT where the caller knows it (a device copy's .git may be stale), or
# the prebuilt binaries' (CODEC_PREBUILT below).
prebuilt=${CODEC_PREBUILT:-}
if [ -n "$prebuilt" ] && ! [ -x "$prebuilt/codec" -a -x "$prebuilt/test_engine_cuda" -a -f "$prebuilt/COMMIT" ]; then
  echo "!! CODEC_PREBUILT=$prebuilt lacks codec, test_engine_cuda or COMMIT (scripts/prebuild_codec.sh makes them)"
  exit 1
fi
if [ -n "$prebuilt" ] && step profile; then  # `codec profile` writes into the data/ of the tree it was built from
  echo "!! the profile step needs this tree's build: leave CODEC_PREBUILT unset"
  exit 1
fi
[ -z "$prebuilt" ] || export CODEC_COST_TABLES=$PWD/data/cost_tables  # the prebuilt codec finds this tree's tables
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
    --format=csv,noheader; nvcc --version | tail -2;
  if [ -n "$prebuilt" ]; then cat "$prebuilt/COMMIT"; else echo "${CODEC_TREE_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; fi
  date -u; } > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

if step build; then
  if [ -n "$prebuilt" ]; then
    # scripts/prebuild_codec.sh's binaries instead of a build
    { mkdir -p build-gpu/tests && cp "$prebuilt/codec" build-gpu/ && cp "$prebuilt/test_engine_cuda" build-gpu/tests/; } ||
      { echo "!! copying $prebuilt's binaries failed"; status=1; }
  else
    # sm_90a only here (the H200; wgmma needs the arch-specific target), for a faster build; the default build makes sm_80 and sm_90a.
    run configure cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real
    run build cmake --build build-gpu -j "$(nproc)"
  fi
fi
if step test && [ -n "$prebuilt" ]; then
  run test_engine_cuda ./build-gpu/tests/test_engine_cuda  # the GPU tests alone: the others need no GPU (CI's)
elif step test; then
  run ctest ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 300
  # The GPU tests again on a generic sm_90 build (no wgmma): there every task,
  # 17-64 rows included, runs on the mma.sync path that sm_80 uses, which the
  # sm_90a build above sends to wgmma.
  run configure_sm90 cmake -S . -B build-sm90 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DCODEC_BUILD_BENCH=OFF
  run build_sm90 cmake --build build-sm90 -j "$(nproc)" --target test_engine_cuda
  run test_sm90_generic ./build-sm90/tests/test_engine_cuda
fi
# Only FlashInfer needs wheels (the python, peers and pybench steps); without them the rest still runs.
install_wheels() {
  [ -d build-gpu/site ] && return 0
  if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target build-gpu/site \
      .whl/*.whl > "$out/wheels_install.log" 2>&1 || { echo "!! wheel install failed"; status=1; }
  fi
}
export PYTHONPATH="$PWD/build-gpu/pysite:$PWD/build-gpu/site${PYTHONPATH:+:$PYTHONPATH}"
export FLASHINFER_WORKSPACE_BASE="$PWD/build-gpu/fi-jit" FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS="$(nproc)"
export PYTHONUNBUFFERED=1
if step python || step install; then
  install_wheels
  # Offline, with the machine's scikit-build-core and nanobind, for this GPU only (a faster build).
  run pip_install python3 -m pip install --no-build-isolation --no-deps --upgrade --target build-gpu/pysite \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90a-real -C build-dir=build-gpu/python .
fi
if step python; then
  run pytest python3 -m pytest -rs -q -p no:cacheprovider ${CODEC_PYTESTS:-tests/python}
  # --tp's two gloo ranks on the CPU engine, which the run above skips where a
  # GPU is visible (CI runs it too, on its CPUs)
  [ -n "${CODEC_PYTESTS:-}" ] || run pytest_gloo env CUDA_VISIBLE_DEVICES= python3 -m pytest -rs -q -p no:cacheprovider \
    tests/python/test_bench_e2e.py -k test_two_tensor_parallel_ranks_decode_as_one_process
fi
if step arch; then
  run configure_sm80 cmake -S . -B build-sm80 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=80-real \
    -DCODEC_BUILD_TESTS=OFF -DCODEC_BUILD_BENCH=OFF
  run build_sm80 cmake --build build-sm80 -j "$(nproc)" --target codec_tool
  echo "== arch: a build without sm_90 kernels on this GPU"
  ./build-sm80/codec bench --backend cuda --workload depth:2 > "$out/arch.log" 2>&1
  code=$?
  cat "$out/arch.log"
  if [ $code -ne 2 ] || ! grep -q "but this CoDec build has kernels for CUDA architectures 80-real only" "$out/arch.log"; then
    echo "!! arch: expected exit 2 and the architecture error, got exit $code"; status=1
  fi
fi
if step ptx; then
  run configure_ptx80 cmake -S . -B build-ptx80 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=80-virtual \
    -DCODEC_BUILD_BENCH=OFF
  run build_ptx80 cmake --build build-ptx80 -j "$(nproc)" --target test_engine_cuda
  run test_ptx80 ./build-ptx80/tests/test_engine_cuda --gtest_filter='CudaEngine.Fp8CachesMatchTheDequantisedReference:CudaEngine.ManyPartialsPerRow:CudaEngine.GraphReplayEqualsDirectRunBitForBit:CudaEngine.EdgeCases'
fi
if step fuzz; then
  run fuzz ./build-gpu/codec fuzz --backend cuda --count 1000 --seed 1 --failures "$out/fuzz-failures"
fi
if step sanitize; then
  san="compute-sanitizer --error-exitcode 1"
  t=./build-gpu/tests/test_engine_cuda
  run memcheck $san --tool memcheck $t \
    --gtest_filter='CudaEngine.EdgeCases:CudaEngine.SmallTasksRunPacked:CudaEngine.WideTasksMatchTheReference:CudaEngine.ManyPartialsPerRow:CudaEngine.StridedQueryOutputAndLse:CudaEngine.GraphReplaysEveryPlanAtOneCapacity:CudaEngine.MergeStatesAndCopyPagesMatchTheCpu'
  run racecheck $san --tool racecheck $t \
    --gtest_filter=CudaEngine.LayoutsGiveBitIdenticalResults:CudaEngine.SmallTasksRunPacked:CudaEngine.WideTasksMatchTheReference
  run synccheck $san --tool synccheck $t \
    --gtest_filter=CudaEngine.EmptyNodesContributeNothing:CudaEngine.SmallTasksRunPacked:CudaEngine.WideTasksMatchTheReference
  run initcheck $san --tool initcheck $t --gtest_filter=CudaEngine.EdgeCases
fi
if step profile; then
  # The measured cost tables (data/cost_tables/<device>_d<D>_<dtype>.json): the
  # default bf16 head_dim 128, which the benchmarks below then use, and those
  # for fp16, for head_dim 64 and for head_dim 256; copies go to the output folder.
  run profile ./build-gpu/codec profile
  run profile_fp16 ./build-gpu/codec profile --dtype fp16
  run profile_d64 ./build-gpu/codec profile --model llama3.2-1b
  run profile_d256 ./build-gpu/codec profile --model gemma2-9b
  cp data/cost_tables/*.json "$out/" 2>/dev/null || true
fi
if step bench; then
  run bench_all ./build-gpu/codec bench --backend cuda --workload all --save "$out/bench_all.json"
fi
if step roofline; then
  run bench_roofline ./build-gpu/codec bench --backend cuda --workload all --cost-table roofline \
    --save "$out/bench_roofline.json"
fi
if step ablation; then
  # The paper's ablation (flat / sharing without partitioning / full CoDec) and
  # the partition granularity (adaptive vs fixed split counts vs none).
  for w in seq:512 batch:16 batch:64 depth:6 ratio:0.2 shape:4 long loogle:8 fewshot; do
    run "ablation_${w/:/_}" ./build-gpu/codec bench --backend cuda --workload "$w" \
      --split adaptive,none,fixed:2,fixed:4,fixed:8,fixed:16,fixed:32 --save "$out/ablation_${w/:/_}.json"
  done
fi
if step ncu; then
  for w in batch:4 batch:16 batch:64 depth:2 depth:4 depth:6 ratio:0.05 ratio:0.2 ratio:0.8; do
    for variant in codec flat; do
      ncu --clock-control none --metrics dram__bytes_read.sum,gpu__time_duration.sum --nvtx --nvtx-include "$variant/" --csv \
        ./build-gpu/codec bench --backend cuda --workload "$w" --reps 1 --save "$out/ncu_meta_${w/:/_}.json" \
        > "$out/ncu_${w/:/_}_$variant.csv" 2>&1 || status=1
    done
  done
  python3 scripts/ncu_summary.py "$out" | tee "$out/ncu_summary.txt"
fi
if step pat; then
  # PAT (bench/peers.py's pat family) from the source scripts/fetch_pat.sh put in .pat/: a torch
  # extension on CUTLASS (the headers the FlashInfer wheel ships), built for this GPU alone.
  install_wheels
  if [ -f .pat/setup.py ]; then
    rm -rf build-gpu/pat && cp -r .pat build-gpu/pat
    sed -i 's/"-arch=compute_80",//' build-gpu/pat/setup.py  # TORCH_CUDA_ARCH_LIST picks the target instead
    if compgen -G ".pat/prebuilt/*.o" > /dev/null; then  # scripts/prebuild_pat.sh's kernels: link them, compile the bindings
      sed -i '/_sm80.cu",/d; s|sources=\[|extra_objects=sorted(__import__("glob").glob(os.path.join(HERE, "prebuilt", "*.o"))), sources=[|' \
        build-gpu/pat/setup.py
    fi
    (cd build-gpu/pat && CUTLASS_ROOT=$PWD/../site/flashinfer/data/cutlass TORCH_CUDA_ARCH_LIST=9.0a \
       python3 setup.py build_ext --inplace) > "$out/pat_build.log" 2>&1 || { echo "!! pat build failed"; status=1; }
    tail -n 5 "$out/pat_build.log"
    PYTHONPATH="$PWD/build-gpu/pat:$PYTHONPATH" python3 -c "import prefix_attn" >> "$out/pat_build.log" 2>&1 ||
      { echo "!! pat: the build does not import (pat_build.log)"; status=1; }
  else
    echo "!! pat: no .pat/ (bash scripts/fetch_pat.sh, then carry .pat)"; status=1
  fi
fi
export PYTHONPATH="$PWD/build-gpu/pat:$PYTHONPATH"
if step peers; then
  install_wheels
  mkdir -p "$out/peers"
  # CODEC_PEER_ARGS: bench/peers.py's other arguments (--q-len 4, --tree 4,4, --dtype fp8, --window 4096, ...)
  run peers/peers python3 -m bench.peers --codec build-gpu/codec --out "$out/peers" \
    ${CODEC_PEER_WORKLOADS:+--workloads "$CODEC_PEER_WORKLOADS"} ${CODEC_PEERS:+--peers "$CODEC_PEERS"} \
    ${CODEC_PEER_ARGS:-}
fi
if step pybench; then
  install_wheels
  run python_api python3 -m bench.python_api --codec build-gpu/codec --out "$out"
fi
if step e2e; then
  # Each workload in each mode of CODEC_E2E_MODES (default eager): eager, graphs (the engine's CUDA graphs of
  # decode steps) or async (graphs with its asynchronous batching). Graph modes run CODEC_E2E_GRAPH_BACKENDS
  # (default codec,noop; fi_decode and fi_cascade run there too, their graph wrappers planned on the host before each
  # replay).
  install_wheels
  for m in ${CODEC_E2E_MODES:-eager}; do
    case $m in
      eager) flags=(); backends=${CODEC_E2E_BACKENDS:-} ;;
      graphs) flags=(--cuda-graph); backends=${CODEC_E2E_GRAPH_BACKENDS:-codec,noop} ;;
      async) flags=(--cuda-graph --async-batching); backends=${CODEC_E2E_GRAPH_BACKENDS:-codec,noop} ;;
      *) echo "!! e2e: unknown mode $m (eager, graphs or async)"; status=1; continue ;;
    esac
    mkdir -p "$out/e2e/$m"
    workloads=$(echo ${CODEC_E2E_WORKLOADS:-loogle:2} | tr -s ' ' ,)  # one process, one model, for the mode's
    run "e2e/$m/run" python3 -m bench.e2e_decode --out "$out/e2e/$m" --workload "$workloads" "${flags[@]}" \
      ${backends:+--backends "$backends"} ${CODEC_E2E_ARGS:-}
  done
fi
echo "== gpu_run status $status"
exit $status
