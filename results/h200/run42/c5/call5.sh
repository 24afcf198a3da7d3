# Run 42, call 5 (call 4's machine, still warm: its build and PAT): the peer
# set's families on sysprompt:64 and :256, which run 41's launch change moved
# and issue 17's peer set leaves out (carry .whl, .pat).
mkdir -p $OUT/v && CODEC_GPU_STEPS="peers" CODEC_PEER_WORKLOADS=sysprompt:64,sysprompt:256 CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat timeout 250 bash scripts/gpu_run.sh $OUT/v > $OUT/v/gpu_run.log 2>&1; echo rc $?; grep -E "^== |!!" $OUT/v/gpu_run.log | tail; python3 scripts/peers_table.py --best $OUT/v/peers/peers.json 2>&1 | tail -8; cd $OUT && tar czf v.tgz v && rm -rf v
