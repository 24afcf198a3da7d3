# Run 30, call 5: no wide tasks for nodes under 2,048 tokens (kCudaWideMinTokens; uncommitted tree)
# against ab46884 (old = abtmp/old.tar), alternating, two rounds, after the GPU tests of the new build.
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_AB_ROUNDS=2 CODEC_AB_OLD_TREE=abtmp/old.tar timeout 480 bash scripts/gpu_ab.sh $V -- \
  "--workload depth:6" "--workload shape:5" "--workload sysprompt:64" "--workload long" "--workload depth:5" \
  > $V/ab_driver.log 2>&1
echo "ab rc $?"; grep -E "PASSED|FAILED|SKIPPED" $V/ab_driver.log | tail -3
python3 scripts/ab_summary.py $V/ab.log 2>&1 | tail -8
