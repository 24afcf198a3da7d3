"""Would pricing a block's later tasks below the table pick better small-tree
plans? Run 39 measured seven small trees under every split policy
(h200/run39/c6/model_vs_measured.txt: the model's prediction, makespan +
merge, beside the measured time). Here each prediction loses delta µs for
every task past the first on its busiest block (ceil(tasks / 264) tasks: the
trees' tasks are near equal), the plan with the least prediction is picked,
and its measured time is set against the best measured of that tree; the
geometric mean over the trees is printed first on each line.
  python3 results/h200/run42/cpu/later_task_discount.py"""
import math
import re
from pathlib import Path

here = Path(__file__).resolve()
table = here.parents[2] / "run39" / "c6" / "model_vs_measured.txt"
data, tree = {}, None
for line in table.read_text().splitlines():
    if not line.startswith(" "):
        tree = line.strip()
        data[tree] = []
        continue
    m = re.match(r"\s+(\S+)\s+tasks\s+(\d+).*predicted\s+([\d.]+) us\s+measured\s+([\d.]+)", line)
    if m:
        data[tree].append((m[1], int(m[2]), float(m[3]), float(m[4])))
for delta in (0, 1, 2, 3, 4, 4.5, 5):
    picks, log_sum = [], 0.0
    for tree, rows in data.items():
        pred = [(p - delta * (math.ceil(t / 264) - 1), policy, measured) for policy, t, p, measured in rows]
        _, policy, measured = min(pred)
        best = min(r[3] for r in rows)
        picks.append(f"{tree} {policy} {measured / best:.3f}")
        log_sum += math.log(measured / best)
    print(f"delta {delta:>3} µs: {math.exp(log_sum / len(data)):.4f} | " + ", ".join(picks))
