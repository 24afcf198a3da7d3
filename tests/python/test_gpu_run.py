"""scripts/gpu_run.sh with CODEC_PREBUILT (scripts/prebuild_codec.sh's folder): the build step copies the
binaries instead of building (cmake stubbed to fail), machine.txt names their commit, and a folder that lacks
one of its files, or a profile step, is refused before anything is copied or run. The script runs from a copy
in a temporary tree, where its build-gpu/ lands."""

import os
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tree(tmp_path, files=("codec", "test_engine_cuda", "COMMIT")):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_run.sh", tmp_path / "scripts")
    stub = tmp_path / "bin"
    stub.mkdir()
    for tool in ("cmake", "nvidia-smi", "nvcc"):  # a build or a GPU query would fail the step
        (stub / tool).write_text("#!/bin/sh\nexit 3\n")
        (stub / tool).chmod(0o755)
    prebuilt = tmp_path / ".prebuilt"
    prebuilt.mkdir()
    for name in files:
        (prebuilt / name).write_text("abc123 (built here)\n" if name == "COMMIT" else f"#!/bin/sh\necho {name}\n")
        (prebuilt / name).chmod(0o755)
    return stub, prebuilt


def gpu_run(tmp_path, stub, prebuilt, steps):
    env = dict(os.environ, CODEC_PREBUILT=str(prebuilt), CODEC_GPU_STEPS=steps,
               PATH=f"{stub}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["bash", str(tmp_path / "scripts" / "gpu_run.sh"), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_build_step_copies_the_prebuilt_binaries(tmp_path):
    stub, prebuilt = tree(tmp_path)
    result = gpu_run(tmp_path, stub, prebuilt, "build")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "!!" not in result.stdout
    assert (tmp_path / "build-gpu" / "codec").read_text() == (prebuilt / "codec").read_text()
    assert (tmp_path / "build-gpu" / "tests" / "test_engine_cuda").exists()
    assert "abc123 (built here)" in (tmp_path / "out" / "machine.txt").read_text()


def test_a_prebuilt_folder_without_its_tests_is_refused(tmp_path):
    stub, prebuilt = tree(tmp_path, files=("codec", "COMMIT"))
    result = gpu_run(tmp_path, stub, prebuilt, "build")
    assert result.returncode == 1
    assert f"CODEC_PREBUILT={prebuilt} lacks codec, test_engine_cuda or COMMIT" in result.stdout
    assert not (tmp_path / "build-gpu").exists()


def test_the_profile_step_needs_a_build_of_this_tree(tmp_path):
    stub, prebuilt = tree(tmp_path)
    result = gpu_run(tmp_path, stub, prebuilt, "build profile")
    assert result.returncode == 1
    assert "the profile step needs this tree's build" in result.stdout
    assert not (tmp_path / "build-gpu").exists()
