"""One build at a time writes an output directory (tusk.workflows.out_lock): a second ``tusk compile`` into an
OUT another process holds fails at once (exit 2, naming OUT and the holder's pid) and writes nothing; a holder
killed with SIGKILL blocks nothing (real processes: the lock is between processes)."""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tusk
from tusk.ir.errors import UsageError
from tusk.workflows.cli import app
from tusk.workflows.out_lock import LOCK_FILE

fcntl = pytest.importorskip("fcntl")  # elsewhere builds are not locked
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
# holds OUT's lock until killed; with "fork", also forks a child that sleeps (it must not keep the lock)
HOLDER = """
import os, sys, time
from tusk.workflows import out_lock
out_lock.acquire(sys.argv[1])
child = os.fork() if sys.argv[2:] == ["fork"] else None
if child == 0:
    time.sleep(120)
    os._exit(0)
print("held", child, flush=True)
time.sleep(120)
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("TUSK_ARCH", "TUSK_INSTRUCTION_LIMIT", "MAXHU", "TUSK_WORKERS", "TUSK_VERIFY"):
        monkeypatch.delenv(var, raising=False)
    k = tmp_path / "k"
    k.mkdir()
    shutil.copy(EXAMPLES / "tensor_add.klr", k)
    return {"k": k, "tmp": tmp_path, "env": {**os.environ, "PYTHONPATH": str(ROOT)}}


def tusk_cmd(env, out: Path, timed: bool = False) -> subprocess.CompletedProcess:
    """``python -m tusk compile`` (the entry point: its no-op and reuse shortcuts come first); ``timed``: under
    ``-X importtime`` (see :func:`imported`)."""
    return subprocess.run([sys.executable, *(["-X", "importtime"] if timed else []), "-m", "tusk", "compile",
                           str(env["k"]), "-o", str(out), "--workers", "0", "--progress", "off"],
                          capture_output=True, text=True, env=env["env"], timeout=300)


def hold(env, out: Path, *how: str) -> tuple[subprocess.Popen, int | None]:
    """A process holding OUT's lock (and the pid of the child it forked, with ``fork``)."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), *how], stdout=subprocess.PIPE, text=True,
                         env=env["env"])
    line = p.stdout.readline().split()
    assert line[:1] == ["held"], line
    return p, None if line[1] == "None" else int(line[1])


def kill(p: subprocess.Popen) -> None:
    p.kill()
    p.wait(timeout=30)  # reaped: its pid is gone, as after a real kill -9 of a build in a shell


def imported(proc: subprocess.CompletedProcess) -> set[str]:
    """The modules a ``python -X importtime`` command imported (the shortcuts import no numpy)."""
    found = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "tusk" in found, proc.stderr[-2000:]
    return found


def state(out: Path) -> dict[str, tuple]:
    """Every entry under OUT (OUT itself too) with its size, mtime and bytes."""
    found = {".": (out.stat().st_mtime_ns,)}
    for p in sorted(out.rglob("*")):
        st = p.lstat()
        found[p.relative_to(out).as_posix()] = (st.st_size, st.st_mtime_ns, p.read_bytes() if p.is_file() else None)
    return found


def lock_is_free(out: Path) -> bool:
    fd = os.open(out / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def refusal(out: Path, pid: int) -> re.Pattern:
    return re.compile(rf"error: {re.escape(str(out))} is being written by another Tusk build \(pid {pid}, started "
                      r"\d+ s ago\): wait for it to finish, or choose another -o")


def test_a_second_build_into_a_held_out_fails_at_once_and_writes_nothing(env):
    out = env["tmp"] / "out"
    assert tusk_cmd(env, out).returncode == 0
    holder, _ = hold(env, out)
    try:
        before = state(out)  # OUT as built, and the holder's lock file
        t = time.monotonic()
        proc = tusk_cmd(env, out)  # the same command: the no-op index must not answer for a held OUT either
        assert proc.returncode == 2, proc.stderr
        assert refusal(out, holder.pid).fullmatch(proc.stderr.strip()), proc.stderr
        assert proc.stdout == "" and time.monotonic() - t < 30
        res = CliRunner().invoke(app, ["compile", str(env["k"]), "-o", str(out), "--workers", "0", "--json",
                                       "--set", "unroll.enabled=false"])  # in-process, another option
        assert res.exit_code == 2 and refusal(out, holder.pid).fullmatch(res.stderr.strip()), res.output
        assert res.stdout == ""
        with pytest.raises(UsageError, match=refusal(out, holder.pid).pattern.removeprefix("error: ")):
            tusk.compile_directory(env["k"], out, workers=0)
        assert state(out) == before
    finally:
        kill(holder)
    assert (out / LOCK_FILE).exists()  # a killed holder leaves its file; the next build locks and removes it
    proc = tusk_cmd(env, out)
    assert proc.returncode == 0, proc.stderr
    assert not (out / LOCK_FILE).exists() and sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == \
        [".tusk"]  # the no-op index: written with the lock held, it does not list the lock file
    again = tusk_cmd(env, out, timed=True)
    assert again.returncode == 0 and "numpy" not in imported(again)  # answered from that index


def test_a_fresh_out_held_by_another_build_is_not_filled_from_the_reuse_note(env):
    a, b = env["tmp"] / "a", env["tmp"] / "b"
    assert tusk_cmd(env, a).returncode == 0  # leaves the reuse note a build into a fresh -o copies from
    holder, _ = hold(env, b)
    try:
        proc = tusk_cmd(env, b)
        assert proc.returncode == 2 and refusal(b, holder.pid).fullmatch(proc.stderr.strip()), proc.stderr
        assert [p.name for p in b.iterdir()] == [LOCK_FILE]
    finally:
        kill(holder)
    proc = tusk_cmd(env, b, timed=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "numpy" not in imported(proc)  # the note answered (the holder's file left behind is no output)
    assert not (b / LOCK_FILE).exists() and (b / "tensor_add" / "tensor_add.bir.json").is_file()


def test_a_process_forked_by_the_holder_does_not_keep_the_lock_after_its_death(env):
    out = env["tmp"] / "out"
    holder, child = hold(env, out, "fork")
    try:
        assert not lock_is_free(out)
        kill(holder)
        os.kill(child, 0)  # the child still runs, with a copy of the holder's descriptors (but not the lock's)
        assert lock_is_free(out)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_build_killed_with_sigkill_blocks_nothing(env):
    """kill -9 of ``tusk compile`` alone, while its local workers (forked from it) run: the next build, started
    at once, takes OUT without waiting or any clean-up by hand."""
    import psutil

    shutil.copytree(EXAMPLES, env["k"], dirs_exist_ok=True)  # cold: many seconds of work once the cluster is up
    out, workers = env["tmp"] / "out", []
    p = subprocess.Popen([sys.executable, "-m", "tusk", "compile", str(env["k"]), "-o", str(out), "--workers", "2",
                          "--progress", "plain", "--no-report"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env["env"], start_new_session=True)
    try:
        seen, deadline = b"", time.monotonic() + 120
        while b"worker(s) ready" not in seen and p.poll() is None and time.monotonic() < deadline:
            if select.select([p.stdout], [], [], 0.2)[0]:
                seen += os.read(p.stdout.fileno(), 65536)
        assert b"worker(s) ready" in seen, seen
        workers = psutil.Process(p.pid).children(recursive=True)
        assert workers and not lock_is_free(out)
        p.kill()  # the build alone, not its process group
        p.wait(timeout=30)
        assert lock_is_free(out)  # at once, though its workers may not have noticed their parent's death yet
        proc = tusk_cmd(env, out)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not (out / LOCK_FILE).exists()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for w in workers:
            with contextlib.suppress(psutil.Error):
                w.kill()


def test_a_refused_build_leaves_neither_its_out_nor_the_parents_it_made(tmp_path):
    """A request refused after OUT was locked (a --scheduler that does not answer, say) removes OUT and the
    parents made for it when they are empty; parents that were there stay."""
    from tusk.workflows import out_lock

    (tmp_path / "there").mkdir()
    out = tmp_path / "there" / "new" / "deeper" / "out"
    key = out_lock.acquire(out)
    assert (out / LOCK_FILE).exists()
    out_lock.drop_if_empty(out)
    out_lock.release(key)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there"] and not any((tmp_path / "there").iterdir())


def test_a_symbolic_link_in_place_of_the_lock_file_is_refused_and_its_target_left_alone(env):
    """A link at OUT/.tusk-lock: opened through it, the build truncated and wrote the file it names."""
    out = env["tmp"] / "out"
    out.mkdir()
    victim = env["tmp"] / "victim.txt"
    victim.write_text("precious")
    (out / LOCK_FILE).symlink_to(victim)
    proc = tusk_cmd(env, out)
    assert proc.returncode == 2 and f"{LOCK_FILE} is a symbolic link" in proc.stderr, proc.stderr
    assert victim.read_text() == "precious"
