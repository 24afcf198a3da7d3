"""scripts/gpu_ab.sh times each build it makes under its own label (old, new,
a patched one; cmake stubbed), and refuses a bad CODEC_AB_PATCHES entry before
it copies or builds anything: a missing patch, a label given twice, or a label
that is not a word or would shadow old or new (whose rows ab_summary.py reads
as the baseline and the change)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_ab(tmp_path, patches):
    # a cmake that fails: were the entry let through, nothing would build
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "cmake").write_text("#!/bin/sh\nexit 3\n")
    (stub / "cmake").chmod(0o755)
    env = dict(os.environ, CODEC_AB_OLD_ARGS="--split none", CODEC_AB_PATCHES=patches, TMPDIR=str(tmp_path),
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


def rotation(tmp_path, patches, workloads="depth:2"):
    """A tree whose stub cmake builds a `codec` that prints the tree's VARIANT
    as its time (new 0.0200, old 0.0300), run through two rounds with
    CODEC_AB_PATCHES `patches` (name → text, each as abtmp/NAME.patch). A
    real build writes into the working tree, and a copy made meanwhile fails
    ("file changed as we read it"): here every tar that copies after a build
    has begun fails so."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    (tree / "abtmp").mkdir()
    for name in ("gpu_ab.sh", "ab_summary.py"):
        (tree / "scripts" / name).write_bytes((ROOT / "scripts" / name).read_bytes())
    (tree / "VARIANT").write_text("0.0200\n")
    (tree / "abtmp" / "VARIANT").write_text("0.0300\n")
    for name, text in patches.items():
        (tree / "abtmp" / f"{name}.patch").write_text(text)
    stub = tmp_path / "bin"
    stub.mkdir()
    building = tmp_path / "building"  # made by the first cmake call
    (stub / "tar").write_text(f"""#!/bin/bash
sleep 0.2  # long enough for a build started beside this copy to begin
if [ -e {building} ] && [ "$1" != -xf ]; then echo "tar: .: file changed as we read it" >&2; exit 1; fi
exec {shutil.which("tar")} "$@"
""")
    (stub / "tar").chmod(0o755)
    (stub / "cmake").write_text(f"""#!/bin/bash
touch {building}
""" + """[ "$1" = --build ] || exit 0
mkdir -p "$2/tests"
printf '#!/bin/bash\\na="$*"; w=${a##*--workload }\\nfor w in ${w//,/ }; do echo "$w  1.0000  8  5120  %s  0.0350  1.99  ok"; done\\n' \\
  "$(cat "$2/../VARIANT")" > "$2/codec"
printf '#!/bin/sh\\necho "[  PASSED  ] stub"\\n' > "$2/tests/test_engine_cuda"
chmod +x "$2/codec" "$2/tests/test_engine_cuda"
""")
    (stub / "cmake").chmod(0o755)
    env = dict(os.environ, CODEC_AB_ROUNDS="2", TMPDIR=str(tmp_path), PATH=f"{stub}{os.pathsep}{os.environ['PATH']}",
               CODEC_AB_PATCHES=";".join(f"{name}=abtmp/{name}.patch" for name in patches))
    result = subprocess.run(["bash", "scripts/gpu_ab.sh", "out", "VARIANT", "--", f"--workload {workloads}"], cwd=tree,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    log = (tree / "out" / "ab.log").read_text()
    rows = [line for line in log.splitlines() if line.startswith("###")]
    assert [row.split(" | ")[0] for row in rows] == [f"### {label} r{r} --workload {workloads}"
                                                    for r in (1, 2) for label in ("old", "new", *patches)
                                                    for _ in workloads.split(",")]
    return result.stdout, log, rows


def test_the_rotation_times_each_build(tmp_path):
    """old, new and a patched build, each its own CLI, timed under its label."""
    stdout, log, rows = rotation(tmp_path, {"fast": "--- a/VARIANT\n+++ b/VARIANT\n@@ -1 +1 @@\n-0.0200\n+0.0100\n"})
    assert "!!" not in stdout, log
    assert [row.split()[-4] for row in rows] == ["0.0300", "0.0200", "0.0100"] * 2
    assert (tmp_path / "codec_ab_fast" / "build" / "codec").exists()  # the builds' trees go under TMPDIR


def test_a_run_of_several_workloads_logs_each_row(tmp_path):
    """One argument list naming several workloads: a line per row, which
    ab_summary.py sums up per workload."""
    stdout, log, rows = rotation(tmp_path, {}, "depth:2,seq:128")
    assert [row.split(" | ")[1].split()[0] for row in rows] == ["depth:2", "seq:128"] * 4
    summary = subprocess.run([sys.executable, str(ROOT / "scripts" / "ab_summary.py"), str(tmp_path / "tree" / "out" / "ab.log")],
                             capture_output=True, text=True, check=True).stdout
    assert "--workload depth:2,seq:128 seq:128" in summary and "new/old 0.667" in summary, summary
    assert "geometric mean new/old over 2: 0.6667" in summary, summary


def test_a_patch_that_does_not_apply_builds_nothing(tmp_path):
    """A stale patch is named, and its rows stay empty: its tree is not built
    unpatched, which would time the new build under the patch's label."""
    stdout, log, rows = rotation(tmp_path, {"stale": "--- a/VARIANT\n+++ b/VARIANT\n@@ -1 +1 @@\n-0.0999\n+0.0100\n"})
    assert "!! stale: copy or patch failed" in stdout, log
    assert [row.split(" | ")[1] for row in rows if row.startswith("### stale")] == ["", ""]
    assert not (tmp_path / "codec_ab_stale").exists()
