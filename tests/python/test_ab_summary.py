"""scripts/ab_summary.py, the summary every A/B on the GPU is read through:
each configuration's best and median rounds against old's, per row and as
geometric means, and rows missing a side reported, not averaged."""

import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from ab_summary import summarise  # noqa: E402


def row(label, rnd, args, workload, ms):
    return f"### {label} r{rnd} {args}| {workload}   1.0000    8    5120    {ms:.4f}    0.0350    1.99    ok"


def test_best_and_median_rounds_against_old():
    log = [row("old", 1, "", "seq:128", 0.0200), row("new", 1, "", "seq:128", 0.0150),
           row("old", 2, "", "seq:128", 0.0180), row("new", 2, "", "seq:128", 0.0190),
           row("old", 3, "", "seq:128", 0.0190), row("new", 3, "", "seq:128", 0.0200),
           row("old", 1, "d64 ", "depth:2", 0.0100), row("new", 1, "d64 ", "depth:2", 0.0110),
           "a line that is not a row", "## 12:00:00 round 1"]
    out = summarise(log)
    assert len(out) == 3, out
    # seq:128: best 0.0150 / 0.0180, median 0.0190 / 0.0190: a gain of one fast round
    assert out[0].startswith("seq:128") and "new/old 0.833 (median 1.000)" in out[0], out[0]
    assert out[1].startswith("d64 depth:2") and "new/old 1.100 (median 1.100)" in out[1], out[1]
    best = math.sqrt(0.0150 / 0.0180 * 1.1)
    median = math.sqrt(1.0 * 1.1)
    assert out[2] == f"geometric mean new/old over 2: {best:.4f} (medians {median:.4f})", out[2]


def test_a_row_missing_a_side_is_reported_and_left_out():
    log = [row("old", 1, "", "long", 0.0720), row("new", 1, "", "long", 0.0710),
           row("old", 1, "", "batch:64", 0.3500), row("p07", 1, "", "long", 0.0700)]
    out = summarise(log)
    assert out[0].startswith("long") and "new/old 0.986" in out[0] and "p07/old 0.972" in out[0], out
    assert out[1].startswith("batch:64: incomplete"), out
    assert out[2].startswith("geometric mean new/old over 1:") and out[3].startswith("geometric mean p07/old over 1:")


def test_rows_of_several_tokens_and_variants_keep_their_tags():
    """Rows named with their tokens' and variants' tags ("loogle:8 c50 s", codec bench's label) are rows too."""
    log = [row("old", 1, "--soft-cap 50 --sinks ", "loogle:8 c50 s", 0.3000),
           row("new", 1, "--soft-cap 50 --sinks ", "loogle:8 c50 s", 0.2700),
           row("old", 1, "--q-len 4 ", "batch:64 q4", 1.0000), row("new", 1, "--q-len 4 ", "batch:64 q4", 1.1000)]
    out = summarise(log)
    assert out[0].startswith("--soft-cap 50 --sinks loogle:8 c50 s") and "new/old 0.900" in out[0], out
    assert out[1].startswith("--q-len 4 batch:64 q4") and "new/old 1.100" in out[1], out
