# Run 40, call 4: sysprompt:256 on call 1's one-pass build against call 3's hybrid on one
# machine (the hybrid lost 3% there where one pass everywhere won 2%), with sysprompt:512
# and long beside it, three rounds alternating (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
rm -rf /tmp/onepass /tmp/hybrid && mkdir -p /tmp/onepass /tmp/hybrid
tar --exclude="./build*" --exclude=./.git --exclude=./abtmp --exclude=./.whl --exclude=./.pat --exclude=./results -cf - . | tar -xf - -C /tmp/hybrid
cp -r /tmp/hybrid/. /tmp/onepass/ && cp abtmp/pac_wide_onepass.cuh /tmp/onepass/src/engine/cuda/kernels/pac_wide.cuh
build() { (cd $1 && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build -j 8 --target codec_tool > build.log 2>&1) || echo "!! build of $1 failed"; }
build /tmp/onepass & build /tmp/hybrid
wait
ts built
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
for r in 1 2 3; do
  for c in onepass hybrid; do
    timeout 60 /tmp/$c/build/codec bench --backend cuda --workload sysprompt:256,sysprompt:512,long 2>/dev/null | row "$c r$r" >> $V/ab.log
  done
  ts "round $r"
done
sed -i 's/### onepass /### old /' $V/ab.log  # ab_summary's baseline label: onepass is the baseline here
python3 scripts/ab_summary.py $V/ab.log
ts end
