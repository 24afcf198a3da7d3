"""What the Python tests share: the markers `torch` (a test that needs torch)
and `transformers` (one that needs torch and transformers' continuous
batching), and a line at the end of pytest's summary that counts each kind,
so that a run shows at a glance whether its torch and engine tests ran or
only skipped.

CODEC_TESTS_REQUIRE (comma-separated module names, e.g. "torch,transformers")
turns a missing optional dependency into an error instead of skipped tests:
scripts/test.sh installs them and sets it, so CI cannot skip them unnoticed."""

import importlib.util
import os

import pytest

KINDS = {"torch": "needs torch; skips with the reason where it is not installed",
         "transformers": "needs torch and transformers' continuous batching (counted among the torch tests too)"}


def pytest_configure(config):
    for name, text in KINDS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    required = [m.strip() for m in os.environ.get("CODEC_TESTS_REQUIRE", "").split(",") if m.strip()]
    missing = [m for m in required if importlib.util.find_spec(m) is None]
    if missing:
        raise pytest.UsageError(f"CODEC_TESTS_REQUIRE names {', '.join(missing)}, which this Python cannot import")


_COUNTS = {}


def pytest_terminal_summary(terminalreporter):
    """How many tests of each kind passed, failed and skipped."""
    for name in KINDS:
        _COUNTS[name] = dict.fromkeys(("passed", "failed", "skipped"), 0)
    for outcome in ("passed", "failed", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            keywords = getattr(report, "keywords", {})  # a module skipped as it is collected has none
            if "transformers" in keywords:
                _COUNTS["transformers"][outcome] += 1
            if "torch" in keywords or "transformers" in keywords:
                _COUNTS["torch"][outcome] += 1


def pytest_unconfigure(config):
    """The counts, after pytest's own summary line."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _COUNTS:
        reporter.write_line("; ".join(f"{name} tests: {c['passed']} passed, {c['failed']} failed, "
                                      f"{c['skipped']} skipped" for name, c in _COUNTS.items()))
