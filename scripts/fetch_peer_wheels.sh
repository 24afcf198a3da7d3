#!/usr/bin/env bash
# Fills .whl/ with the wheels the benchmarks install on a GPU machine without
# network (scripts/gpu_run.sh): FlashInfer and the two of its import-time
# dependencies such a machine may lack, for the peers, and accelerate, which
# transformers' tensor parallelism needs (bench/e2e_decode.py --tp). Run it on
# a machine with network; ~22 MB. Python 3.12, x86-64.
#   flashinfer-python 0.6.18.post1: the newest release small enough to travel
#     (0.7.x wheels are 34-101 MB) with both wrappers the benchmark uses; it
#     compiles its kernels on first use (nvcc and ninja on the GPU machine).
#   apache-tvm-ffi: FlashInfer's kernel-loading layer; typing_extensions ≥ 4.13: needed by tvm-ffi.
#   accelerate 1.15.0: pure Python; its own dependencies come with transformers and torch.
# Other dependencies FlashInfer's metadata lists (cutlass-dsl, cudnn-frontend,
# nccl4py, cuda-tile) are not imported by these wrappers: gpu_run.sh installs with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  flashinfer-python==0.6.18.post1 apache-tvm-ffi==0.1.15.post2 typing_extensions==4.16.0 accelerate==1.15.0
ls -l .whl
