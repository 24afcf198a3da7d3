# Run 41, call 4c: test_gpu_ab.py after the fix (every copy made before any build starts), five times.
set -uo pipefail
for i in 1 2 3 4 5; do python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_ab.py 2>&1 | tail -1; done
