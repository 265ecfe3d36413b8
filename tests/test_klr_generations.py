"""Errors for KLR files of another generation say so and name the KLR commit Tusk follows; the error for a
file that is not KLR describes KLR's real first bytes (d9 d9 f7), not 'KLR'."""

from __future__ import annotations

from pathlib import Path

import pytest

from tusk.ir import klr
from tusk.ir.errors import FormatError
from tusk.ir.klr.kernel import KLR_COMMIT
from tusk.workflows import show

FIXTURES = Path(__file__).parent / "data" / "klr"


def test_the_commit_is_the_one_the_fixtures_were_written_by():
    assert f"KLR commit {KLR_COMMIT}" in (FIXTURES / "README.md").read_text()


@pytest.mark.parametrize("name, says", [
    ("neg_wrong_version", "written by an older KLR"),
    ("neg_kernel_contents", "another KLR generation"),
    ("neg_cpp_writer_prop_bytes", "another KLR generation"),
])
def test_other_generation_errors_say_so(name, says):
    with pytest.raises(FormatError) as e:
        klr.load_lnc_kernel(FIXTURES / f"{name}.klr")
    assert says in e.value.message and f"KLR commit {KLR_COMMIT}" in e.value.message


def test_not_klr_error_names_the_real_magic(tmp_path):
    bad = tmp_path / "k.klr"
    bad.write_bytes(b"KLR\x00\x00\x0c")
    with pytest.raises(FormatError) as e:
        show.file_format(bad)
    assert "d9 d9 f7" in e.value.message and "byte 12" in e.value.message
    assert "bytes 'KLR'" not in e.value.message
