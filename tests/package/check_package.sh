#!/usr/bin/env bash
# The C++ package as a user gets it: a library-only configure needs none of
# CLI11, GoogleTest or Google Benchmark; `cmake --install` of a build gives a
# prefix whose codecConfig.cmake a separate project finds; the installed flags
# carry no -march=native; the consumer builds, runs and matches fp64, and
# finds the installed cost tables.
#   bash tests/package/check_package.sh BUILD_DIR   (a configured, built tree)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: check_package.sh BUILD_DIR}
work="$build/package-check"
rm -rf "$work"
echo "-- library-only configure, with CLI11, GTest and benchmark hidden"
cmake -S . -B "$work/lib" -DCODEC_BUILD_TOOLS=OFF -DCODEC_BUILD_TESTS=OFF -DCODEC_BUILD_BENCH=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON > "$work.configure.log" 2>&1 \
  || { cat "$work.configure.log"; exit 1; }
echo "-- install $build into a prefix"
cmake --install "$build" --prefix "$work/prefix" --component codec_dev > /dev/null
test -f "$work/prefix/lib/cmake/codec/codecConfig.cmake"
test -f "$work/prefix/lib/cmake/codec/codecConfigVersion.cmake"
test -f "$work/prefix/include/codec/plan/planner.hpp"
test -f "$work/prefix/share/codec/cost_tables/nvidia_h200_d128_bf16.json"
test ! -e "$work/prefix/include/codec/workload"  # the tools' workloads are not the library's
if grep -rq -- "-march=native" "$work/prefix/lib/cmake/codec"; then
  echo "installed flags carry -march=native"; exit 1
fi
echo "-- consumer project against the prefix"
cmake -S tests/package/consumer -B "$work/consumer" -DCMAKE_PREFIX_PATH="$PWD/$work/prefix" > /dev/null
cmake --build "$work/consumer" -j "$(nproc)" > /dev/null
tables="$PWD/$work/prefix/share/codec/cost_tables"
CODEC_COST_TABLES="$tables" "$work/consumer/consumer" "$tables"
echo "-- package check passed"
