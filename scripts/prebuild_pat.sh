#!/usr/bin/env bash
# PAT's four kernel objects for sm_90a, compiled here (nvcc needs no GPU) into
# .pat/prebuilt/, so that gpu_run.sh's pat step only compiles PAT's bindings
# and links: the kernels take ~6 minutes of nvcc each, device time otherwise.
# Flags as PAT's setup.py under torch's BuildExtension; CUTLASS from the
# FlashInfer wheel in .whl/ (scripts/fetch_peer_wheels.sh), torch's headers
# from PYTHON's torch, which need not import (the CPU wheel carries the CUDA
# headers too).
#   bash scripts/fetch_pat.sh && bash scripts/prebuild_pat.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
[ -f .pat/setup.py ] || { echo "no .pat/: run scripts/fetch_pat.sh first" >&2; exit 1; }
wheel=$(compgen -G ".whl/flashinfer_python-*.whl" | head -1) ||
  { echo "no FlashInfer wheel in .whl/: run scripts/fetch_peer_wheels.sh first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m zipfile -e "$wheel" "$tmp/fi" > /dev/null
cutlass=$tmp/fi/flashinfer/data/cutlass
# torch's two include folders, found without importing torch (a wheel installed
# without its CUDA libraries does not import, and its headers are all this needs)
torch_inc=$("$python" -c "import importlib.util, os; t = os.path.dirname(importlib.util.find_spec('torch').origin);
print(os.path.join(t, 'include'), os.path.join(t, 'include', 'torch', 'csrc', 'api', 'include'))")
mkdir -p .pat/prebuilt
flags=(-std=c++20 -O3 --use_fast_math -lineinfo --expt-relaxed-constexpr --expt-extended-lambda
       --compiler-options -fPIC -gencode=arch=compute_90a,code=sm_90a
       -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_prefix_attn
       -I.pat/csrc -I"$cutlass/include" -I"$cutlass/tools/util/include")
for inc in $torch_inc; do flags+=(-I"$inc"); done
printf '%s\n' .pat/csrc/pat_fwd_split_*.cu | xargs -P "$(nproc)" -I{} sh -c \
  'nvcc "$@" -c {} -o .pat/prebuilt/$(basename {} .cu).o || exit 255' _ "${flags[@]}"
ls -la .pat/prebuilt
