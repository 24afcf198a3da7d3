# Run 47, call 3b: on call 3's machine, still warm (its build, PAT and FlashInfer's compiled kernels
# there), the 12 workloads of the peer set that call 3's 400 s did not reach (carry .whl and .pat).
mkdir -p $OUT/v
CODEC_GPU_STEPS="peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat \
  CODEC_PEER_WORKLOADS="shape:DT,flat:64,sysprompt:512,sysprompt:512@1,long,loogle:8,fewshot,shape:2,shape:5,ratio:0.8,ratio:0.2,ratio:0.05" \
  timeout 160 bash scripts/gpu_run.sh $OUT/v > $OUT/v/gpu_run.log 2>&1; echo rc $?
python3 scripts/peers_table.py --best $OUT/v/peers/peers.json 2>&1 | tail -16
cd $OUT && tar czf v.tgz v && rm -rf v
