# Run 39, call 7 (call 6's build, warm): four more rounds of the splits that came closest to the
# planner's in call 6, on shape:DT, depth:2, seq:512 and seq:2048 (no carry). Run as one command line.
V=$OUT/v; mkdir -p $V
for r in 3 4 5 6; do
  timeout 60 ./build-gpu/codec bench --backend cuda --workload shape:DT,depth:2,seq:512,seq:2048 \
    --split adaptive,fixed:8,fixed:16,fixed:32 2>/dev/null | sed "s/^/r$r /" >> $V/splits.log
  timeout 60 ./build-gpu/codec bench --backend cuda --workload shape:DT,depth:2,seq:512,seq:2048 --blocks 132 \
    2>/dev/null | sed "s/^/r$r blocks132 /" >> $V/splits.log
done
sed -n '/^python3 - /,/^PY$/p' results/h200/run39/c6/call6.sh | sed '1d;$d' > /tmp/p.py; python3 /tmp/p.py $V/splits.log
cd $OUT && tar czf v.tgz v && rm -rf v
