#!/usr/bin/env python3
"""TPOT against batch size, one panel per workload family and a line per
backend and mode (eager, or the engine's CUDA graphs, with or without its
asynchronous batching), from bench/e2e_decode.py's result files (e2e_<workload>.json; the
per-backend files of runs before 21 are skipped); several runs of one
workload: the latest file given wins. Needs matplotlib.

  python3 scripts/e2e_plot.py OUT.png results/h200/runN/e2e/*.json
"""
import json
import sys
from collections import defaultdict


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = defaultdict(dict)  # family -> {(backend, requests): tpot}
    for path in sys.argv[2:]:
        result = json.load(open(path))
        if "rows" not in result:
            continue  # an older run's per-backend file
        family = result["workload"].partition(":")[0]
        for backend, row in result["rows"].items():
            if "tpot_ms" in row:  # a backend that failed has its error instead
                mode = ("graphs, async" if row.get("async_batching") else "graphs") if row.get("cuda_graph") else ""
                label = backend + (f" ({mode})" if mode else "")
                points[family][(label, result["requests"])] = row["tpot_ms"]
    if not points:
        sys.exit("no e2e_<workload>.json result among the files")
    fig, axes = plt.subplots(1, len(points), figsize=(5 * len(points), 4), squeeze=False)
    # one color per backend in every panel; graphs dashed, with asynchronous batching dotted
    names = sorted({b.partition(" ")[0] for data in points.values() for b, _ in data})
    color = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    for ax, (family, data) in zip(axes[0], sorted(points.items())):
        for backend in sorted({b for b, _ in data}):
            xs = sorted(n for b, n in data if b == backend)
            ax.plot(xs, [data[(backend, n)] for n in xs], marker="o", label=backend,
                    color=color[backend.partition(" ")[0]],
                    linestyle=":" if "async" in backend else "--" if "graphs" in backend else "-")
        ax.set_title(family)
        ax.set_xlabel("requests")
        ax.set_ylabel("TPOT (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=120)
    print(f"wrote {sys.argv[1]}: {', '.join(f'{k} ({len(v)} points)' for k, v in sorted(points.items()))}")


if __name__ == "__main__":
    main()
