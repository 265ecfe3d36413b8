"""Reliability and security regressions (issue 14): each test failed on the code before its fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tusk.workflows.cli import app

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for v in ("TUSK_ARCH", "TUSK_INSTRUCTION_LIMIT", "MAXHU", "TUSK_WORKERS", "TUSK_SCHEDULER"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "default-cache"))


def kernels(d: Path, *names: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for n in names or ("tiled_exp.json",):
        shutil.copy(EXAMPLES / n, d / n)
    return d


def tusk(*args: str):
    res = runner.invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.exit_code, " ".join(res.output.split())


BUILD_REPORT = {"report.html", "build-trace.json", "timeline.json", "tusk.log"}  # rewritten by every build


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name not in BUILD_REPORT}


# --------------------------------------------------------------------------- 5: only a store is a store


def test_a_non_empty_directory_is_not_adopted_as_the_cache(tmp_path):
    user = tmp_path / "mine"
    (user / "trash").mkdir(parents=True)
    (user / "trash" / "keep.txt").write_text("my file")
    (user / "tmp").mkdir()
    (user / "tmp" / "old.txt").write_text("old")
    before = tree(user)
    k = kernels(tmp_path / "k")
    code, text = tusk("compile", str(k), "-o", str(tmp_path / "out"), "--cache-dir", str(user), "--workers", "0")
    assert code == 2 and "is not a Tusk store" in text and "empty or new directory" in text
    assert tree(user) == before and not (tmp_path / "out").exists()
    for cmd in (["gc", "--max-size", "0"], ["clear"], ["verify"], ["verify", "--remove"]):
        code, text = tusk("cache", *cmd, "--cache-dir", str(user))
        assert code != 0 and "is not a Tusk store" in text, (cmd, text)
        assert tree(user) == before


def test_an_empty_or_new_directory_becomes_a_store(tmp_path):
    k = kernels(tmp_path / "k")
    (tmp_path / "empty").mkdir()
    for cache in (tmp_path / "empty", tmp_path / "new" / "cache"):
        code, _ = tusk("compile", str(k), "-o", str(tmp_path / f"out-{cache.name}"), "--cache-dir", str(cache),
                       "--workers", "0")
        assert code == 0 and (cache / "TUSK_STORE.json").is_file()


def test_cache_clear_on_a_regular_file_is_an_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("data")
    code, text = tusk("cache", "clear", "--cache-dir", str(f))
    assert code != 0 and "is a file" in text and "cleared" not in text
    assert f.read_text() == "data"


# --------------------------------------------------------------------------- 11: unwritable directories


@pytest.mark.parametrize("where", ["out", "cache"])
def test_unwritable_output_or_cache_directories_are_clear_errors(tmp_path, where):
    k = kernels(tmp_path / "k")
    out = "/proc/tusk-test-out" if where == "out" else str(tmp_path / "out")
    cache = "/proc/tusk-test-cache" if where == "cache" else str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "tusk", "compile", str(k), "-o", out, "--cache-dir", cache,
                           "--workers", "0"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert ("output directory" if where == "out" else "cache") in proc.stdout + proc.stderr


# --------------------------------------------------------------------------- 12: kernel names


@pytest.mark.parametrize("filename", ["...json", "..json", "a\\b.json", "x" * 230 + ".json"])
def test_a_kernel_whose_name_is_no_directory_name_fails_and_touches_nothing(tmp_path, filename):
    parent = tmp_path / "parent"
    k = kernels(parent / "k", "tiled_exp.json")
    shutil.copy(EXAMPLES / "tiled_exp.json", k / filename)
    out = parent / "out"
    code, text = tusk("compile", str(k), "-o", str(out), "--workers", "0", "--json")
    assert code == 1
    report = json.loads(runner.invoke(app, ["compile", str(k), "-o", str(out), "--workers", "0", "--json"]).stdout)
    (bad,) = report["failed"]
    assert "rename the file" in bad["error"] and bad["fault"] == "input"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and p.name not in BUILD_REPORT) \
        == ["tiled_exp"]
    assert sorted(p.name for p in parent.iterdir()) == ["k", "out"]  # nothing written next to OUT
    assert not (out / "tusk.log").exists()


# --------------------------------------------------------------------------- 2: the default pipeline's ceiling


# runs a command and prints its peak RSS in KiB on stderr, last (a fresh process: its children are only that one)
PEAK_RSS = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")


def _big_loop_kernel(path: Path, trips: tuple[int, ...]) -> None:
    from tusk.ir import bir_json
    from tusk.ir.builder import Builder

    b = Builder("main")
    t = b.sbuf("t", (128, 4), addr=0)
    y = b.dram("y", (128, 4), kind="ExternalOutput")

    def nest(depth: int) -> None:
        if depth == len(trips):
            b.dma(y.ap(), t.ap())
            return
        with b.loop(f"i{depth}", 0, trips[depth]):
            nest(depth + 1)

    nest(0)
    bir_json.save(b.module(), path)


@pytest.mark.parametrize("trips", [(30_000_000,), (6000, 5000), (10**12,)], ids=["30M", "6000x5000", "1e12"])
def test_the_default_pipeline_refuses_an_unroll_past_the_ceiling_before_allocating(tmp_path, trips):
    k = tmp_path / "k"
    k.mkdir()
    _big_loop_kernel(k / "big.json", trips)
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "tusk", "compile", str(k), "-o",
                           str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), "--workers", "0", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (bad,) = json.loads(proc.stdout)["failed"]
    assert "Compiler generated too many instructions" in bad["error"] and bad["fault"] == "input"
    peak_kib = int(proc.stderr.strip().splitlines()[-1])
    assert peak_kib < 1_000_000  # refused before the clones, not after a few GB


# --------------------------------------------------------------------------- 9: const files stay inside


def _const_kernel(path: Path, const_path: str) -> None:
    from tusk.ir import bir_json
    from tusk.ir.builder import Builder

    b = Builder("main")
    x = b.dram("x", (128, 4), kind="ExternalInput")
    w = b.dram("w", (128, 4), kind="Const", const_path=const_path)
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    b.dma(t.ap(), x.ap())
    b.dma(t.ap(), w.ap())
    b.dma(y.ap(), t.ap())
    bir_json.save(b.module(), path)


def test_an_absolute_const_file_outside_the_kernel_directory_is_refused(tmp_path):
    k = kernels(tmp_path / "k", "tiled_exp.json")
    _const_kernel(k / "leak.json", "/etc/passwd")
    out = tmp_path / "out"
    code, text = tusk("compile", str(k), "-o", str(out), "--workers", "0")
    assert code == 1 and "refusing const file /etc/passwd" in text and "inside the kernel's directory" in text
    assert not any(b"root:" in p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "report.html")
    assert (out / "tiled_exp" / "tiled_exp.bir.json").is_file()  # the other kernel is built


def test_a_directory_the_user_names_may_hold_const_files(tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "w.bin").write_bytes(b"\x01\x02\x03")
    _const_kernel(k / "named.json", str(weights / "w.bin"))
    out = tmp_path / "out"
    code, text = tusk("compile", str(k), "-o", str(out), "--workers", "0")
    assert code == 1 and "refusing const file" in text
    code, text = tusk("compile", str(k), "-o", str(out), "--workers", "0",
                      "--set", f"translate_nki_ast_to_bir.const_dir={weights}")
    assert code == 0, text
    assert any(p.read_bytes() == b"\x01\x02\x03" for p in (out / "named").rglob("w.bin"))


# --------------------------------------------------------------------------- 8: tampering is noticed


def test_an_edited_note_or_record_is_not_trusted_and_cache_verify_reports_it(tmp_path):
    k = kernels(tmp_path / "k", "tiled_exp.json", "tensor_add.klr")
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ("compile", str(k), "-o", str(out), "--cache-dir", str(cache), "--workers", "0")
    assert tusk(*args)[0] == 0
    clean = tree(out)
    for note in (cache / "notes" / "kernel-interface").rglob("*.json"):  # an input shape, edited
        data = json.loads(note.read_text())
        if data["value"].get("ins"):
            data["value"]["ins"][0][2] = [64, 64]
            note.write_text(json.dumps(data))
    stats = json.loads((out / "tiled_exp" / "stats.json").read_text())
    last = stats["units"][0]["steps"][-1]["key"]  # the record of the kernel's last step, which a rebuild reads
    record = next((cache / "actions").rglob(f"{last}.json"))
    outputs = [json.loads(r.read_text()).get("output") for r in (cache / "actions").rglob("*.json")]
    data = json.loads(record.read_text())
    data["output"] = next(o for o in outputs if o and o != data["output"])  # pointed at another stored object
    record.write_text(json.dumps(data))
    code, text = tusk("cache", "verify", "--cache-dir", str(cache))
    assert code == 1 and "damaged or edited note" in text and "edited record" in text
    shutil.rmtree(out)
    code, _ = tusk(*args)
    assert code == 0
    assert {p: b for p, b in tree(out).items() if not p.endswith("stats.json")} == \
        {p: b for p, b in clean.items() if not p.endswith("stats.json")}
    assert tusk("cache", "verify", "--cache-dir", str(cache))[0] == 0  # the rebuild replaced both


# --------------------------------------------------------------------------- 6: a scheduler that never answers


def test_a_scheduler_that_accepts_but_never_answers_fails_fast(tmp_path):
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(8)], daemon=True).start()
    k = kernels(tmp_path / "k")
    t = time.time()
    proc = subprocess.run([sys.executable, "-m", "tusk", "compile", str(k), "-o", str(tmp_path / "out"),
                           "--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and time.time() - t < 10, proc.stderr
    assert "did not answer" in proc.stdout + proc.stderr and not (tmp_path / "out").exists()
    server.close()


# --------------------------------------------------------------------------- 13: no process outlives a build


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_no_worker_process_outlives_an_interrupted_build(tmp_path, sig):
    import signal
    import time

    import psutil

    from tests.passes_for_tests import pipeline_toml

    k = kernels(tmp_path / "k", "tiled_exp.json", "tiled_matmul.json")
    pipe = tmp_path / "p.toml"
    pipe.write_text(pipeline_toml(("test_sleep", {"seconds": 60.0})))
    p = subprocess.Popen([sys.executable, "-m", "tusk", "compile", str(k), "-o", str(tmp_path / "out"),
                          "--cache-dir", str(tmp_path / "c"), "--workers", "2", "--pipeline", str(pipe)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        deadline = time.time() + 60
        kids: list = []
        while time.time() < deadline and len(kids) < 2:  # both workers started
            time.sleep(0.5)
            kids = psutil.Process(p.pid).children(recursive=True)
        time.sleep(2)  # and busy
        kids = psutil.Process(p.pid).children(recursive=True)
        p.send_signal(getattr(signal, sig))
        p.wait(timeout=30)
        time.sleep(5)
        alive = [c.pid for c in kids if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        assert alive == [], f"{len(alive)} process(es) still alive 5 s after {sig}"
        if sig == "SIGINT":
            assert p.returncode == 130
    finally:
        if p.poll() is None:
            p.kill()


WATCHDOG_SCRIPT = """
import os, signal, sys, time
from pathlib import Path
from tusk.workflows import interrupts
from tusk.workflows.outputs import STAGING_PREFIX, remove_own_temp_dirs
out = Path(sys.argv[1])
(out / f"{STAGING_PREFIX}k-{os.getpid()}-0a1b2c3d").mkdir(parents=True)
interrupts.GRACE = 1.0
with interrupts.handled(at_kill=lambda: remove_own_temp_dirs(out)):
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # as while a cluster starts: fd 2 is the log, not the terminal
    # a build that swallows the interrupt (a lock left held, a hung close).  The handler raises once, and the
    # try holds everything from the moment the test may send it: raised while "ready" was still being printed
    # (before a try), or at a loop's jump back (outside a try around the sleep alone), it ended the script
    # with exit -2
    try:
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    while True:
        time.sleep(0.05)
"""


def test_an_interrupt_the_build_swallows_still_ends_it_and_says_so(tmp_path):
    """The watchdog ends a build that did not stop by itself, tells the terminal (not the log) why, and
    removes the build's staging directory."""
    import signal

    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-c", WATCHDOG_SCRIPT, str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 130, err
        assert "interrupted: the build's processes were killed" in err, err
        assert list(out.iterdir()) == []
    finally:
        if p.poll() is None:
            p.kill()


# --------------------------------------------------------------------------- 4: verified by default


def _out_of_bounds_kernel(path: Path) -> None:
    """A load whose SB destination starts a million elements past its tensor."""
    from tusk.ir import bir_json
    from tusk.ir.builder import Builder

    b = Builder("main")
    x = b.dram("x", (128, 4), kind="ExternalInput")
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    b.dma(t.ap(), x.ap())
    b.dma(y.ap(), t.ap())
    m = b.module()
    fn = m.functions[0]
    first_out = int(fn.insts["ops"][0]) + [int(r) for r in fn.operands["role"][:2]].index(2)
    fn.operands["offset"][first_out] = 10**6
    bir_json.save(m, path)


def test_out_of_bounds_access_patterns_are_refused_by_default(tmp_path):
    k = kernels(tmp_path / "k", "tiled_exp.json")
    _out_of_bounds_kernel(k / "oob.json")
    args = ["compile", str(k), "-o", str(tmp_path / "out"), "--workers", "0", "--json"]
    res = runner.invoke(app, args)
    report = json.loads(res.stdout)
    assert res.exit_code == 1 and [f["kernel"] for f in report["failed"]] == ["oob"]
    assert report["failed"][0]["fault"] == "input"
    assert (tmp_path / "out" / "tiled_exp" / "tiled_exp.bir.json").is_file()
    res = runner.invoke(app, [*args, "--no-verify", "--cache-dir", str(tmp_path / "c2")])
    assert res.exit_code == 0, res.output  # the user asked not to check
