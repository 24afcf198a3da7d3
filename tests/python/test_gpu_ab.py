"""scripts/gpu_ab.sh refuses a bad CODEC_AB_PATCHES entry before it copies or
builds anything: a missing patch, a label given twice, or a label that is not
a word or would shadow old or new (whose rows ab_summary.py reads as the
baseline and the change)."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_ab(tmp_path, patches):
    # a cmake that fails: were the entry let through, nothing would build
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "cmake").write_text("#!/bin/sh\nexit 3\n")
    (stub / "cmake").chmod(0o755)
    env = dict(os.environ, CODEC_AB_OLD_ARGS="--split none", CODEC_AB_PATCHES=patches,
               PATH=f"{stub}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_ab.sh"), str(out), "--", "--workload depth:2"],
                            env=env, capture_output=True, text=True, timeout=60)
    return result, out


def a_patch(tmp_path, name="v.patch"):
    patch = tmp_path / name
    patch.write_text("")
    return patch


def test_a_missing_patch_is_named(tmp_path):
    missing = tmp_path / "missing.patch"
    result, out = run_ab(tmp_path, f"a={a_patch(tmp_path)};b={missing}")
    assert result.returncode == 1
    assert f"{missing}: no such patch (CODEC_AB_PATCHES entry 'b={missing}')" in result.stderr
    assert not out.exists()


def test_a_label_given_twice_is_refused(tmp_path):
    result, out = run_ab(tmp_path, f"a={a_patch(tmp_path)};a={a_patch(tmp_path, 'w.patch')}")
    assert result.returncode == 1
    assert "CODEC_AB_PATCHES label 'a' given twice" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("label", ["old", "new", "two words", "a/b", ""])
def test_a_label_must_be_a_new_word(tmp_path, label):
    result, out = run_ab(tmp_path, f"{label}={a_patch(tmp_path)}")
    assert result.returncode == 1
    assert f"CODEC_AB_PATCHES label '{label}': a word other than old and new" in result.stderr
    assert not out.exists()
