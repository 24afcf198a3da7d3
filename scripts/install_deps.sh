#!/usr/bin/env bash
# Installs what building and testing CoDec needs, from Debian's packages.
# Idempotent: does nothing when everything is present.
#   bash scripts/install_deps.sh        the build, the tests, the tool
#   bash scripts/install_deps.sh fuzz   and the fuzz targets' (scripts/fuzz.sh)
set -euo pipefail
packages=(
  g++ cmake make         # C++20 compiler and build
  libgtest-dev           # GoogleTest: the test suite
  libbenchmark-dev       # Google Benchmark: planner speed
  nlohmann-json3-dev     # JSON: workload files, cost tables, --json output
  libcli11-dev           # CLI11: the codec command line
  python3-dev python3-venv  # the Python package: headers for its extension, a venv for its tests
)
fuzz_packages=(
  clang libfuzzer-14-dev  # libFuzzer and clang's sanitizers: the fuzz targets (tests/fuzz)
  libomp-14-dev           # OpenMP for clang: the library the fuzz targets link
)
[[ ${1:-} == fuzz ]] && packages+=("${fuzz_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  # A build tool installed outside Debian's packages (pip's cmake, a toolkit's) will do.
  case $p in g++|cmake|make) command -v "$p" > /dev/null && continue ;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
