"""bench/e2e_check.py: logprobs compared only on the steps whose token history
the two runs share."""

import numpy as np
import pytest

from bench.e2e_check import compare_on_shared_history


def test_steps_after_the_runs_part_are_not_compared():
    ref = {0: ([5, 6, 7, 8], [-0.1, -0.2, -0.3, -0.4]), 1: ([1, 2], [-1.0, -2.0])}
    got = {0: ([5, 6, 9, 8], [-0.1, -0.25, -5.0, -0.4]), 1: ([1, 2], [-1.0, -2.0])}
    r = compare_on_shared_history(ref, got)
    assert r["steps_compared"] == 4  # request 0: steps 0, 1 (step 2's token differs); request 1: both
    assert r["mean_shared_steps"] == 2.0
    a, b = np.array([-0.1, -0.2, -1.0, -2.0]), np.array([-0.1, -0.25, -1.0, -2.0])
    assert r["logprob_rel_l2"] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a))
    assert r["logprob_rel_l2_centered"] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a - a.mean()))
    assert r["logprob_max_abs"] == pytest.approx(0.05)


def test_identical_runs_have_no_error_and_different_requests_are_refused():
    run = {3: ([4, 4, 4], [-0.5, -0.6, -0.7])}
    assert compare_on_shared_history(run, run) == {"steps_compared": 3, "mean_shared_steps": 3.0,
                                                   "logprob_rel_l2": 0.0, "logprob_rel_l2_centered": 0.0,
                                                   "logprob_max_abs": 0.0}
    with pytest.raises(ValueError, match="different requests"):
        compare_on_shared_history(run, {4: ([4], [-0.5])})
