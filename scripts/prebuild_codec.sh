#!/usr/bin/env bash
# The `codec` tool and the C++ GPU tests for sm_90a, compiled here (nvcc needs no GPU) into .prebuilt/, so that a
# GPU step given CODEC_PREBUILT=.prebuilt (carried to the device) copies them instead of building: the build is
# most of a cold machine's first minutes, device time that the development host spends for free.
# Host code for any x86-64 (CODEC_NATIVE off: the device's CPU is not this one). .prebuilt/COMMIT names the
# tree it was built from, which the step's machine_*.txt then records.
#   bash scripts/prebuild_codec.sh                                    # here, after each change to the engine
#   CODEC_PREBUILT=.prebuilt bash scripts/publish.sh breadth OUT       # on the device, carry .prebuilt
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-prebuilt -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCODEC_NATIVE=OFF \
  -DCODEC_BUILD_BENCH=OFF > /dev/null
cmake --build build-prebuilt -j "$(nproc)" --target codec_tool test_engine_cuda
rm -rf .prebuilt && mkdir -p .prebuilt
cp build-prebuilt/codec build-prebuilt/tests/test_engine_cuda .prebuilt/
commit=$(git rev-parse HEAD)
git diff --quiet HEAD -- CMakeLists.txt cmake include src tests || commit="$commit with uncommitted changes"
echo "$commit (built on the development host for sm_90a by scripts/prebuild_codec.sh)" > .prebuilt/COMMIT
ls -l .prebuilt && cat .prebuilt/COMMIT
