# Run 41, call 4b: test_gpu_ab.py alone, its failure in call 4 shown whole, with the machine's git.
set -uo pipefail
git --version; command -v git patch
python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_ab.py 2>&1 | tail -40
