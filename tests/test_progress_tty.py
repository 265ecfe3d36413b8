"""`tusk compile` on a terminal: the live lines name the running kernel and pass (run under a pseudo-terminal)."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.passes_for_tests import pipeline_toml, write_kernels

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")


def run_in_pty(args: list[str], env: dict, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``args`` with a pseudo-terminal as stdin/stdout/stderr; (exit code, everything it drew)."""
    import pty

    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 110, 0, 0))  # 40 rows, 110 columns
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=str(ROOT), close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    else:
        proc.kill()
    os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def test_live_progress_names_the_running_kernel_and_pass(tmp_path):
    write_kernels(tmp_path / "k", 2)
    pipe = tmp_path / "p.toml"
    pipe.write_text(pipeline_toml(("translate_nki_ast_to_bir", {}), ("test_sleep", {"seconds": 1.2})))
    env = {**os.environ, "TUSK_CACHE_DIR": str(tmp_path / "cache"), "TERM": "xterm-256color",
           "COLUMNS": "110", "LINES": "40", "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    code, screen = run_in_pty([sys.executable, "-m", "tusk", "compile", str(tmp_path / "k"), "-o",
                               str(tmp_path / "out"), "--pipeline", str(pipe), "--workers", "0"], env)
    text = ANSI.sub("", screen)
    assert code == 0, text[-3000:]
    frames = [line for chunk in text.split("\r") for line in chunk.split("\n")]
    running = [line for line in frames if re.search(r"\bk[01]\s+test_sleep\s+\d+\.\ds", line)]
    assert running, text[-3000:]                   # "  k0  test_sleep  0.6s": kernel, pass, seconds so far
    assert any("compiling" in line and "steps" in line and "cached" in line and "run" in line for line in frames)
    assert "tusk compile ->" in text and "report:" in text   # the summary follows the live view
    assert "distributed" not in text and "Traceback" not in text


def test_a_cluster_build_prints_no_dask_log_lines(tmp_path):
    write_kernels(tmp_path / "k", 2)
    pipe = tmp_path / "p.toml"
    pipe.write_text(pipeline_toml(("translate_nki_ast_to_bir", {}), ("test_sleep", {"seconds": 0.2})))
    env = {**os.environ, "TUSK_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "tusk", "compile", str(tmp_path / "k"), "-o", str(tmp_path / "out"),
                          "--pipeline", str(pipe), "--workers", "2"], env=env, cwd=str(ROOT), capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = (res.stdout + res.stderr).splitlines()
    assert any(line.startswith("started local cluster") for line in lines)
    assert any(re.match(r"\[\d/2\] k\d: 2 pass\(es\) ran", line) for line in lines)  # plain lines off a terminal
    noise = [line for line in lines if "distributed." in line or "tornado" in line or "Traceback" in line]
    assert not noise, "\n".join(noise)


def test_live_running_lines_are_what_the_workers_run_and_the_rest_is_queued(tmp_path):
    write_kernels(tmp_path / "k", 3)
    pipe = tmp_path / "p.toml"
    pipe.write_text(pipeline_toml(("translate_nki_ast_to_bir", {}), ("test_sleep", {"seconds": 2.0})))
    env = {**os.environ, "TUSK_CACHE_DIR": str(tmp_path / "cache"), "TERM": "xterm-256color",
           "COLUMNS": "110", "LINES": "40", "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    code, screen = run_in_pty([sys.executable, "-m", "tusk", "compile", str(tmp_path / "k"), "-o",
                               str(tmp_path / "out"), "--pipeline", str(pipe), "--workers", "2"], env, timeout=240)
    text = ANSI.sub("", screen)
    assert code == 0, text[-3000:]
    frames = [line for chunk in text.split("\r") for line in chunk.split("\n")]
    running = [line for line in frames if re.search(r"\bk[012]\s+test_sleep\s+w[12]\s+\d+\.\ds", line)]
    assert running, text[-3000:]  # "  k0  test_sleep  w1  0.6s": what a worker said it executes, and where
    workers = {re.search(r"\s(w[12])\s", line).group(1) for line in running}
    assert workers == {"w1", "w2"}, running
    assert any(re.search(r"\b1 queued\b", line) for line in frames), text[-3000:]
    assert any("writing report.html" in line for line in frames)        # a post-build phase, shown live
    assert any("ETA" in line for line in frames)


def test_piped_lines_show_every_post_build_phase_and_the_summary_time_is_the_commands(tmp_path):
    write_kernels(tmp_path / "k", 2)
    env = {**os.environ, "TUSK_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "tusk", "compile", str(tmp_path / "k"), "-o", str(tmp_path / "out"),
                          "--workers", "0"], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=240)
    wall = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    for phase in ("putting the outputs in place", "writing the engine timelines", "writing the build trace",
                  "writing report.html"):
        assert any(line.startswith("[2/2] ") and phase in line for line in lines), (phase, res.stdout[-2000:])
    said = float(re.search(r"; ([0-9.]+)s; cache ", res.stdout).group(1))
    # from the process's start to the summary: all of it but the interpreter's exit (a loaded machine: ~1 s)
    assert wall - max(1.5, 0.25 * wall) <= said <= wall + 0.05, (said, wall)
