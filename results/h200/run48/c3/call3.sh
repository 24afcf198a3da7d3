# Run 48, call 3 (a fresh machine, main at d682612): the README's first command as a newcomer runs it,
# `bash scripts/run.sh`: its dependency check, the release preset's build (sm_80 and sm_90a) and the
# default benchmark (batch:64, CoDec and flat, checked against fp64) on the GPU.
set -uo pipefail
mkdir -p $OUT/v
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse HEAD; } > $OUT/v/machine.txt 2>&1
timeout 580 bash scripts/run.sh > $OUT/v/run.log 2>&1
echo "run.sh rc $?"; grep -vE "^\[ *[0-9]+%\]" $OUT/v/run.log | tail -25
ts end
