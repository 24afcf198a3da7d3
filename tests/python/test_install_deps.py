"""scripts/install_deps.sh asks apt-get only for what is missing: a build tool
on PATH counts as present though no Debian package holds it (the GPU machine's
cmake, which has no network for apt-get), while a library counts only through
its Debian package. dpkg-query, apt-get and id (as root: no sudo) are stubbed."""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = ("g++", "cmake", "make")


def install(tmp_path, on_path, installed, *args):
    stub = tmp_path / "bin"
    stub.mkdir(parents=True)
    log = tmp_path / "apt.log"
    scripts = {
        # dpkg-query -W -f=FORMAT PACKAGE: installed only if listed
        "dpkg-query": "#!/bin/sh\ncase \" $INSTALLED \" in *\" $3 \"*) printf 'install ok installed' ;; esac\n",
        "apt-get": f"#!/bin/sh\necho \"$@\" >> {log}\n",
        "id": "#!/bin/sh\necho 0\n",
    }
    scripts.update({tool: "#!/bin/sh\n" for tool in on_path})
    for name, text in scripts.items():
        (stub / name).write_text(text)
        (stub / name).chmod(0o755)
    # PATH holds the stubs, bash and grep alone, so no real g++, cmake or make is found
    for real in ("bash", "grep"):
        (stub / real).symlink_to(shutil.which(real))
    env = dict(os.environ, PATH=str(stub), INSTALLED=" ".join(installed))
    result = subprocess.run([str(stub / "bash"), str(ROOT / "scripts" / "install_deps.sh"), *args], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines() if log.exists() else []


def libraries(group="packages"):
    """The script's packages of one list (`packages`, `fuzz_packages`) other than the build tools."""
    text = (ROOT / "scripts" / "install_deps.sh").read_text()
    listed = text.split(f"\n{group}=(", 1)[1].split("\n)", 1)[0]
    return [word for line in listed.splitlines() for word in line.split("#", 1)[0].split() if word not in TOOLS]


def test_tools_on_path_and_installed_libraries_need_nothing(tmp_path):
    assert install(tmp_path, TOOLS, libraries()) == []


@pytest.mark.parametrize("tool", TOOLS)
def test_a_tool_missing_from_path_is_installed(tmp_path, tool):
    calls = install(tmp_path, [t for t in TOOLS if t != tool], libraries())
    assert calls[-1].split()[-1:] == [tool] and calls[-1].split()[:1] == ["install"]


def test_a_missing_library_is_installed_though_its_tools_are_present(tmp_path):
    first, *rest = libraries()
    calls = install(tmp_path, TOOLS, rest)
    assert calls == ["update -qq", f"install -y -qq {first}"]


def test_the_fuzz_packages_come_only_when_asked_for(tmp_path):
    fuzz = libraries("fuzz_packages")
    assert "clang" in fuzz
    assert install(tmp_path / "plain", TOOLS, libraries()) == []
    calls = install(tmp_path / "fuzz", TOOLS, libraries(), "fuzz")
    assert calls == ["update -qq", "install -y -qq " + " ".join(fuzz)]
