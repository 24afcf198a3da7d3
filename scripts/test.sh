#!/usr/bin/env bash
# Builds and runs every test: the C++ suite in the release build, then under
# AddressSanitizer + UndefinedBehaviorSanitizer; coverage-guided fuzzing of
# every reader of outside input (CODEC_FUZZ_SECONDS per target, default 60);
# the C++ package (install, a consumer project); the Python package (`pip
# install .` into a virtual environment with torch, transformers and
# accelerate, then pytest: the torch tests and the transformers engine's run
# on the CPU engine; the extension has the CUDA engine where a GPU is). Fails on the first failure. GPU tests report themselves
# skipped, with the reason, without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's header says how far into the run it starts: a slow step shows in any log's tail.
step() { echo "== $* [$((SECONDS / 60)) min]"; }
bash scripts/install_deps.sh
jobs=$(nproc)
for preset in release asan; do
  step "$preset: build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  step "$preset: tests"
  ctest --preset "$preset" -j "$jobs"
done
# Random forests and bad inputs (codec fuzz): fixed seeds, so that a failure replays.
step "fuzz: 3,000 CPU cases (release), 1,000 more under the sanitizers"
./build/codec fuzz --count 3000 --seed 1
./build-asan/codec fuzz --count 1000 --seed 2
step "fuzz targets (libFuzzer): ${CODEC_FUZZ_SECONDS:-60} s each"
bash scripts/fuzz.sh "${CODEC_FUZZ_SECONDS:-60}"
step "C++ package: library-only configure, install, consumer project"
bash tests/package/check_package.sh build
step "Python package: pip install . and pytest"
venv=build/venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.0" "numpy>=1.22" "pytest>=7"
# The GPU machine's versions, from PyPI: every torch test and the transformers
# engine's tests run on the CPU (first time ~1-2 min and 4.9 GB, the CUDA
# libraries of PyPI's torch wheel included; then a check that they are there).
"$venv/bin/python" -m pip install -q torch==2.11.0 transformers==5.17.0 accelerate==1.15.0
# No build isolation: the build tools above, and the build folder
# (build/python-*) kept between runs. Without a GPU the Python tests run on
# the CPU engine, and the release build above has compiled every kernel
# already: the extension is built without them (its bindings compile the same
# either way), which halves the time a machine without a GPU spends in nvcc.
python_build=()
nvidia-smi -L > /dev/null 2>&1 || python_build=(-C cmake.define.CODEC_CUDA=OFF)
"$venv/bin/python" -m pip install -q --no-build-isolation "${python_build[@]}" .
# A missing one is an error, not skipped tests; the last line counts the torch and transformers tests.
CODEC_TESTS_REQUIRE=torch,transformers,accelerate "$venv/bin/python" -m pytest -rs -q -p no:cacheprovider tests/python
step "every test passed"
