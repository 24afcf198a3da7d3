# Run 37, call 1b: the second half of call 1 (its changed-plans A/B ran out of time after one row),
# on the same warm machine and build-gpu: the plans 69ee6f8 changed unmeasured, --beside-wide 0.8 (the
# default, `old`) against 1, two rounds alternating; the second round stopped at the call's 300 s
# (each table's rows that ran both sides are kept). No carry: build-gpu was still there from call 1.
mkdir -p $OUT/v; cmake --build build-gpu -j 16 --target codec_tool > /dev/null 2>&1
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { timeout $((280 - SECONDS)) ./build-gpu/codec bench --backend cuda --reps 20 "$@" 2>/dev/null; }
for r in 1 2; do for p in 0.8 1; do l=$([ $p = 0.8 ] && echo old || echo p1)
  b --dtype fp16 --workload batch:32,batch:64 --beside-wide $p | row "$l r$r fp16" >> $OUT/v/ab_changed.log
  b --dtype fp16 --model mistral-7b --workload batch:32,batch:64 --beside-wide $p | row "$l r$r fp16-mistral" >> $OUT/v/ab_changed.log
  b --model llama4-scout --workload sysprompt:512 --beside-wide $p | row "$l r$r llama4" >> $OUT/v/ab_changed.log
  b --dtype fp16 --model mqa --workload seq:512,batch:64,ratio:0.2,loogle:16 --beside-wide $p | row "$l r$r fp16-mqa" >> $OUT/v/ab_changed.log
  b --model mqa --workload batch:32,ratio:0.05,ratio:0.5,loogle:8 --beside-wide $p | row "$l r$r mqa" >> $OUT/v/ab_changed.log
done; echo "round $r ${SECONDS}s"; done
python3 scripts/ab_summary.py $OUT/v/ab_changed.log
