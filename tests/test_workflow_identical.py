"""Every way of building gives the bytes of an in-process serial cold build: two workers, a cache hit, a
second output directory with the same cache."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"
KERNELS = ("tiled_exp.json", "rmsnorm.klr", "lnc2_matmul.klr", "tiled_matmul.json", "banded_exp.json")


def outputs(out: Path) -> dict[str, bytes]:
    """Every output file but the build's own records (stats, report, traces), with OUT's path taken out
    (the BIR-JSON names its artifact directory, which is OUT/<kernel>)."""
    skip = {"stats.json", "report.html", "build-trace.json", "timeline.json", "index.json", "tusk.log"}
    return {str(p.relative_to(out)): p.read_bytes().replace(str(out).encode(), b"OUT")
            for p in sorted(out.rglob("*")) if p.is_file() and p.name not in skip}


def compile_(k: Path, out: Path, cache: Path, *extra: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "tusk", "compile", str(k), "-o", str(out), "--cache-dir",
                           str(cache), "--progress", "off", *extra], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_two_workers_a_cache_hit_and_another_out_write_the_bytes_of_a_serial_build(tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    for name in KERNELS:
        shutil.copy(EXAMPLES / name, k / name)
    shutil.copytree(EXAMPLES / "shared_constants", k / "shared_constants")
    compile_(k, tmp_path / "serial", tmp_path / "c0", "--workers", "0", "--stages")
    serial = outputs(tmp_path / "serial")
    assert any(p.endswith(".bir.json") for p in serial) and any("/stages/" in p for p in serial)
    compile_(k, tmp_path / "two", tmp_path / "c2", "--workers", "2", "--stages")
    assert outputs(tmp_path / "two") == serial
    # the same cache into another OUT (every record hits), and into the first OUT after its outputs are gone
    compile_(k, tmp_path / "again", tmp_path / "c0", "--workers", "2", "--stages")
    assert outputs(tmp_path / "again") == serial
    for p in (tmp_path / "serial").rglob("*.bir.json"):
        p.unlink()
    compile_(k, tmp_path / "serial", tmp_path / "c0", "--workers", "0", "--stages")
    assert outputs(tmp_path / "serial") == serial


def test_a_final_module_written_in_parts_is_the_whole_write(tmp_path):
    """The graph's parallel write: part tasks render their parts (bir_json.write_part); part 0 starts the file,
    the others wait in files of their own until place tasks copy them to their offsets, and the file is
    renamed into place."""
    from tusk.cache import Store
    from tusk.examples import bir_kernels
    from tusk.workflows.graph import BuildUnit, build
    from tusk.workflows.pipeline import Entry, _labelled, resolve

    steps = resolve(_labelled([Entry("unroll"), Entry("build_fdeps")])).steps
    module = bir_kernels.tiled_exp(tiles=12)[0]
    store = Store(tmp_path / "store")

    def outputs(name):
        def on_final(u, h):
            return [(h, tmp_path / f"{name}.bir.json", str(tmp_path / "art"))]
        return on_final

    whole = build([BuildUnit("k", module)], steps, store, on_final=outputs("whole"))
    seen = []
    parted = build([BuildUnit("k", module)], steps, store, on_final=outputs("parts"), write_parts=3,
                   on_event=lambda e: seen.append(e.what if type(e).__name__ == "TaskSubmitted" else None))
    assert [w for w in seen if w and w.startswith("write_bir_json")] == \
        [f"write_bir_json part {k}/3" for k in (1, 2, 3)] + [f"write_bir_json place {k}/3" for k in (2, 3)]
    assert whole.unit("k").ok and parted.unit("k").ok
    data = (tmp_path / "parts.bir.json").read_bytes()
    assert data == (tmp_path / "whole.bir.json").read_bytes() and b'"artifact_path":"' + str(tmp_path).encode() in data
    assert not list(tmp_path.glob("*.parts*"))  # the parts' file is the output now
