#!/usr/bin/env bash
# A/B of a kernel change in one call on a GPU machine: old and new builds
# alternate on the same workloads, so both see the same clocks and machine
# (every kernel change in results/HISTORY.md was kept or dropped this way).
# The working tree is "new"; "old" is a copy of it in which each FILE is
# replaced by abtmp/<basename of FILE>, prepared beforehand (the device copy's
# .git may be stale; abtmp/ travels because git does not ignore it):
#   mkdir -p abtmp && git show REV:src/engine/cuda/kernels/pac.cuh > abtmp/pac.cuh
#   CODEC_AB_ROUNDS=2 bash scripts/gpu_ab.sh "$OUT" src/engine/cuda/kernels/pac.cuh -- \
#     "--workload batch:64" "--workload long --model gemma2-9b"
# With CODEC_AB_OLD_TREE=abtmp/old.tar the old build is that whole tree
# instead (a change across the API), made beforehand with e.g.
#   git archive -o abtmp/old.tar REV CMakeLists.txt cmake include src tests bench data
# and no FILE is named. With CODEC_AB_OLD_ARGS="--merge kernel" (and neither
# FILE nor an old tree) "old" is the working tree's own build run with those
# extra bench options: an A/B of a runtime choice. CODEC_AB_NEW_ARGS gives
# "new" extra options of its own, e.g. two cost tables on one build:
#   CODEC_AB_OLD_ARGS="--cost-table abtmp/old.json" CODEC_AB_NEW_ARGS="--cost-table abtmp/new.json" \
#     bash scripts/gpu_ab.sh "$OUT" -- "--workload depth:2"
# One BENCH ARGS may name several workloads ("--workload depth:2,batch:64"):
# each row is a line of the log. CODEC_AB_TESTS=0 skips the GPU tests, for a
# second A/B in one call on a build already tested.
# CODEC_AB_ALSO adds configurations of the new build, LABEL=OPTIONS separated
# by ';', timed in the same rotation, e.g. the change switched off by an option:
#   CODEC_AB_ALSO="notail=--tail-tokens 0" bash scripts/gpu_ab.sh "$OUT" -- ...
# CODEC_AB_PATCHES adds builds, LABEL=PATCH separated by ';': each a copy of
# the working tree with PATCH applied (a diff against it, e.g. a variant's
# `git diff > abtmp/x.patch`, then `git checkout -- FILE` back; a relative
# PATCH or OUT names a path from the repository root), timed in the same rotation:
#   CODEC_AB_PATCHES="nok=abtmp/nok.patch" bash scripts/gpu_ab.sh "$OUT" FILE -- ...
# The other builds' trees go under $TMPDIR (default /tmp). The GPU tests run
# on the new build first. $OUT/ab.log gets one line per run:
#   ### LABEL rROUND ARGS | the bench row (workload, times in ms, ...)
# (LABEL old, new, or one of CODEC_AB_ALSO's or CODEC_AB_PATCHES'), which scripts/ab_summary.py
# sums up (each label / old per ARGS, geometric means).
set -uo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: [CODEC_AB_ROUNDS=N] bash scripts/gpu_ab.sh OUT FILE... -- 'BENCH ARGS'..." >&2; exit 2; }
[ $# -ge 1 ] || usage
out=$1; shift
[[ $out = /* ]] || out=$PWD/$out  # the builds below write their logs from other folders
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do files+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || usage
same_build=0
if [ ${#files[@]} -eq 0 ] && [ -z "${CODEC_AB_OLD_TREE:-}" ]; then
  [ -n "${CODEC_AB_OLD_ARGS:-}" ] || usage
  same_build=1
fi
[ -z "${CODEC_AB_OLD_TREE:-}" ] || [ -f "$CODEC_AB_OLD_TREE" ] || { echo "!! $CODEC_AB_OLD_TREE missing" >&2; exit 1; }
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "!! $f: no such file in the working tree" >&2; exit 1; }
  [ -f "abtmp/$(basename "$f")" ] || { echo "!! abtmp/$(basename "$f") missing: old and new would be one build" >&2; exit 1; }
done
declare -A patch_of=()  # CODEC_AB_PATCHES: label → patch
patched=()             # their labels, in order
IFS=';' read -r -a entries <<< "${CODEC_AB_PATCHES:-}"
for e in "${entries[@]}"; do
  [ -n "$e" ] || continue  # "a=x;" as "a=x"
  label=${e%%=*} file=${e#*=}
  [ -f "$file" ] || { echo "!! $file: no such patch (CODEC_AB_PATCHES entry '$e')" >&2; exit 1; }
  case $label in old | new | *[!A-Za-z0-9_]* | '') echo "!! CODEC_AB_PATCHES label '$label': a word other than old and new" >&2; exit 1 ;; esac
  [ -z "${patch_of[$label]:-}" ] || { echo "!! CODEC_AB_PATCHES label '$label' given twice" >&2; exit 1; }
  [[ $file = /* ]] || file=$PWD/$file
  patch_of[$label]=$file
  patched+=("$label")
done
rounds=${CODEC_AB_ROUNDS:-1}
scratch=${TMPDIR:-/tmp}  # where the other builds' trees go
old=$scratch/codec_ab_old
mkdir -p "$out"
# a copy of the working tree, without its builds and, where they lie inside,
# OUT (written meanwhile) and the scratch folder (holding the copies)
copy_tree() {
  rm -rf "$1" && mkdir -p "$1" &&
    tar --exclude="./build*" --exclude=./.git --exclude="./${out#"$PWD"/}" --exclude="./${scratch#"$PWD"/}" \
      -cf - . | tar -xf - -C "$1"
}
# the CLI of the tree in folder $1, its log build_$2.log
build_tool() {
  (cd "$1" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
     cmake --build build -j 8 --target codec_tool > "$out/build_$2.log" 2>&1) || echo "!! $2 build failed"
}
{
  # Every copy is made before any build starts: a build writing into the
  # working tree while tar reads it fails the copy ("file changed as we read it").
  # A tree that could not be made whole is removed, not built: its runs find
  # no CLI, rather than time the working tree's code under another label.
  old_ready=0
  if [ $same_build = 0 ]; then
    if [ -n "${CODEC_AB_OLD_TREE:-}" ]; then
      rm -rf "$old" && mkdir -p "$old" && tar -xf "$CODEC_AB_OLD_TREE" -C "$old" && old_ready=1
    else
      copy_tree "$old" && old_ready=1
      for f in "${files[@]}"; do cp "abtmp/$(basename "$f")" "$old/$f" || old_ready=0; done
    fi
    [ $old_ready = 1 ] || { echo "!! old: copy failed"; rm -rf "$old"; }
  fi
  ready=()  # the patched trees to build
  for label in "${patched[@]}"; do
    d=$scratch/codec_ab_$label
    if copy_tree "$d" && (cd "$d" && git apply "${patch_of[$label]}"); then
      ready+=("$label")
    else
      echo "!! $label: copy or patch failed"
      rm -rf "$d"
    fi
  done
  [ $old_ready = 0 ] || build_tool "$old" old &
  for label in "${ready[@]}"; do build_tool "$scratch/codec_ab_$label" "$label" & done
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
    cmake --build build-gpu -j 8 --target codec_tool test_engine_cuda > "$out/build_new.log" 2>&1 || echo "!! new build failed"
  wait
  echo "== built $(date)"
  [ "${CODEC_AB_TESTS:-1}" = 0 ] || timeout 300 ./build-gpu/tests/test_engine_cuda 2>&1 | tail -20
  # the bench rows of one run (a line each, an empty one where there is none)
  rows() { local r; r=$(timeout 300 "$@" 2>&1 | grep -E "^[A-Za-z0-9_.-]+(:[0-9.A-Z]+)?( (t[0-9]+x[0-9]+|q[0-9]+c?|w[0-9]+|c[0-9.e+]+|s))* +[0-9.]+ "); printf '%s\n' "$r"; }
  also=()  # CODEC_AB_ALSO's configurations, LABEL=OPTIONS each
  IFS=';' read -r -a also <<< "${CODEC_AB_ALSO:-}"
  for r in $(seq 1 "$rounds"); do
    for args in "$@"; do
      for config in old new "${also[@]}" "${patched[@]}"; do
        b=${config%%=*} bin=./build-gpu/codec extra=${CODEC_AB_NEW_ARGS:-}
        if [ $b = old ]; then
          if [ $same_build = 1 ]; then extra=${CODEC_AB_OLD_ARGS}; else bin=$old/build/codec; fi
        elif [ -n "${patch_of[$config]:-}" ]; then
          bin=$scratch/codec_ab_$b/build/codec
        elif [ $b != new ]; then
          extra=${config#*=}
        fi
        # shellcheck disable=SC2086  # args and extra hold several bench options
        while IFS= read -r line; do echo "### $b r$r $args | $line"; done < <(rows "$bin" bench --backend cuda $args $extra)
      done
    done
  done
  echo "== done $(date)"
} 2>&1 | tee "$out/ab.log" | grep -E "^(###|==|!!|\[  )"
