"""scripts/gpu_ab.sh refuses a bad CODEC_AB_PATCHES entry before it copies or
builds anything: a missing patch, or a label that is not a word or would
shadow old or new (whose rows ab_summary.py reads as the baseline and the
change)."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_ab(tmp_path, patches):
    env = dict(os.environ, CODEC_AB_OLD_ARGS="--split none", CODEC_AB_PATCHES=patches)
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_ab.sh"), str(out), "--", "--workload depth:2"],
                            env=env, capture_output=True, text=True, timeout=60)
    return result, out


def test_a_missing_patch_is_named(tmp_path):
    result, out = run_ab(tmp_path, f"a=x.patch;b={tmp_path / 'missing.patch'}")
    assert result.returncode == 1
    assert "x.patch: no such patch (CODEC_AB_PATCHES entry 'a=x.patch')" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("label", ["old", "new", "two words", "a/b", ""])
def test_a_label_must_be_a_new_word(tmp_path, label):
    patch = tmp_path / "v.patch"
    patch.write_text("")
    result, out = run_ab(tmp_path, f"{label}={patch}")
    assert result.returncode == 1
    assert f"CODEC_AB_PATCHES label '{label}': a word other than old and new" in result.stderr
    assert not out.exists()
