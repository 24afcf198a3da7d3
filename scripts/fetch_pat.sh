#!/usr/bin/env bash
# PAT (ASPLOS'26, prefix-aware decode attention; MIT licence) as a peer for
# bench/peers.py: its source goes into .pat/ (ignored by git, carried to an
# offline GPU machine, where `CODEC_GPU_STEPS="build pat peers"` builds it and
# CODEC_PEERS=fi_decode,fi_cascade,hydragen,pat times it). The commit is
# pinned; SOURCE is a clone URL or a local clone.
#   bash scripts/fetch_pat.sh [SOURCE]      # default https://github.com/flashserve/PAT
set -euo pipefail
cd "$(dirname "$0")/.."
source=${1:-https://github.com/flashserve/PAT}
commit=a76087a
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q --no-checkout "$source" "$tmp/pat"  # no work tree: its datasets are large
rm -rf .pat && mkdir -p .pat
# the kernels, the prefix tree and its Python package: ~200 KB, no datasets
git -C "$tmp/pat" archive "$commit" csrc prefix_attn setup.py LICENSE NOTICE | tar -xf - -C .pat
echo "PAT $commit in .pat/ ($(du -sh .pat | cut -f1))"
