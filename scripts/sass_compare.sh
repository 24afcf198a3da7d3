#!/usr/bin/env bash
# Whether a kernel change leaves the machine code as it was: compiles the CUDA
# sources (src/engine/cuda/**/*.cu) of REV and of the working tree for each
# architecture and compares the SASS of every kernel, instruction by
# instruction (register names included; only addresses and encodings are
# dropped). A refactor that claims to cost nothing proves it this way, without
# a GPU.
#   bash scripts/sass_compare.sh REV [ARCH...]      (default archs: sm_80 sm_90 sm_90a)
# Needs nvcc and cuobjdump (CUOBJDUMP=path overrides; the CUDA toolkit's, or
# the copy in the triton wheel). Exit 0 when every kernel is identical.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bash scripts/sass_compare.sh REV [ARCH...]" >&2; exit 2; }
rev=$1; shift
archs=("$@"); [ ${#archs[@]} -gt 0 ] || archs=(sm_80 sm_90 sm_90a)
cuobjdump=${CUOBJDUMP:-cuobjdump}
command -v "$cuobjdump" > /dev/null || { echo "!! cuobjdump not found (set CUOBJDUMP)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old"
git archive "$rev" include src | tar -x -C "$work/old"
flags=(-O3 -DNDEBUG -DCODEC_HAS_CUDA=1 -std=c++20 -cubin -DCODEC_CUDA_ARCHITECTURES=\"sass_compare\")
# drop addresses, encodings, each file's header (a kernel may move to another
# file) and the per-path hash of anonymous namespaces
norm() {
  grep -vE '^\s*$|^\s*(code for sm_|\.target)|nvdisasm warning' |
    sed -E 's#/\*[0-9a-f]{4,}\*/##; s#/\* 0x[0-9a-f]+ \*/##; s/_GLOBAL__N__[0-9a-f]+_/_GLOBAL__N__/g; s/[[:space:]]+$//'
}
status=0
for arch in "${archs[@]}"; do
  for side in old new; do
    root=$PWD; [ $side = old ] && root=$work/old
    : > "$work/$side.$arch.sass"
    for src in $(find "$root/src/engine/cuda" -name "*.cu" | sort); do
      nvcc "${flags[@]}" -arch="$arch" -I"$root/include" -I"$root/src" "$src" -o "$work/$side.cubin"
      "$cuobjdump" -sass "$work/$side.cubin" 2> /dev/null | norm >> "$work/$side.$arch.sass"
    done
  done
  python3 - "$work/old.$arch.sass" "$work/new.$arch.sass" "$arch" <<'PY' || status=1
import re, sys
def kernels(path):
    out, name = {}, None
    for line in open(path):
        m = re.search(r'Function : (\S+)', line)
        if m:
            name = m.group(1); out[name] = []
        elif name:
            out[name].append(line.strip())
    return out
old, new, arch = kernels(sys.argv[1]), kernels(sys.argv[2]), sys.argv[3]
bad = 0
for name in sorted(set(old) | set(new)):
    a, b = old.get(name), new.get(name)
    count = lambda k: sum(1 for l in k if re.match(r'[A-Z@]', l)) if k else 0
    same = a == b
    bad += not same
    print(f"{arch} {'identical' if same else 'DIFFERS  '} {count(a):6d} -> {count(b):6d} instructions  {name}")
sys.exit(1 if bad else 0)
PY
done
[ $status = 0 ] && echo "every kernel identical" || echo "!! some kernels differ"
exit $status
