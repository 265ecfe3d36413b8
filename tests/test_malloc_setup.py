"""The memory settings of Tusk's processes: numpy's huge-page request is turned off only where huge pages
stall a page fault, and never against the user's own choice."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tusk.workflows import malloc_setup


@pytest.mark.parametrize("text, stalls", [
    ("always defer defer+madvise [madvise] never\n", True),
    ("[always] defer defer+madvise madvise never\n", True),
    ("always defer [defer+madvise] madvise never\n", True),
    ("always [defer] defer+madvise madvise never\n", False),
    ("always defer defer+madvise madvise [never]\n", False),
    ("", False),
])
def test_which_defrag_settings_stall(tmp_path, text, stalls):
    f = tmp_path / "defrag"
    f.write_text(text)
    assert malloc_setup.huge_pages_stall(str(f)) is stalls


def test_an_unreadable_setting_does_not_stall(tmp_path):
    assert malloc_setup.huge_pages_stall(str(tmp_path / "absent")) is False


def _numpy_setting(env: dict) -> str:
    code = ("import os\nfrom tusk.workflows import malloc_setup\nmalloc_setup.THP_DEFRAG = os.environ['T']\n"
            "malloc_setup.keep_freed_memory()\nimport numpy\n"
            "print(os.environ.get('NUMPY_MADVISE_HUGEPAGE'), malloc_setup.environment().get('NUMPY_MADVISE_HUGEPAGE'))")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and Linux's THP settings")
def test_the_process_and_its_workers_get_the_setting_unless_the_user_chose(tmp_path, monkeypatch):
    import os

    stall = tmp_path / "stall"
    stall.write_text("always defer defer+madvise [madvise] never\n")
    calm = tmp_path / "calm"
    calm.write_text("always [defer] defer+madvise madvise never\n")
    base = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    assert _numpy_setting({**base, "T": str(stall)}) == ["0", "0"]
    assert _numpy_setting({**base, "T": str(calm)}) == ["None", "None"]
    assert _numpy_setting({**base, "T": str(stall), "NUMPY_MADVISE_HUGEPAGE": "1"}) == ["1", "1"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and Linux's THP settings")
def test_numpy_already_imported_is_turned_off_too(tmp_path, monkeypatch):
    stall = tmp_path / "stall"
    stall.write_text("[madvise]\n")
    code = ("import numpy, os, importlib\n"
            "multiarray = importlib.import_module('numpy._core.multiarray' if numpy.__version__ >= '2' "
            "else 'numpy.core.multiarray')\nfrom tusk.workflows import malloc_setup\n"
            "malloc_setup.THP_DEFRAG = os.environ['T']\nmalloc_setup.keep_freed_memory()\n"
            "print(multiarray._set_madvise_hugepage(True))")  # returns the setting it replaces
    import os

    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "T": str(stall)}, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "False"
