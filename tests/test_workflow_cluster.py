"""Builds on real Dask clusters: local processes, a killed worker, an external scheduler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.passes_for_tests import TEST_REGISTRY, pipeline_toml, write_kernels
from tests.programs import every_family_module, tiled_exp_module
from tusk import stages
from tusk.cache import Store
from tusk.workflows.cli import app
from tusk.workflows.graph import BuildUnit, InlineExecutor, build, client_executor, local_cluster_executor
from tusk.workflows.pipeline import Entry, _labelled, resolve

ROOT = Path(__file__).resolve().parent.parent
PASSES = [("test_expand", {}), ("test_scale", {"factor": 3.0}), ("test_count", {}),
          ("test_per_function", {"tag": "c"})]


@pytest.fixture(autouse=True)
def registered_test_passes(monkeypatch):
    for name, target in TEST_REGISTRY.items():
        monkeypatch.setitem(stages.REGISTRY, name, target)


def _steps(*extra):
    return resolve(_labelled([Entry("test_scale", {"factor": 2.0}), Entry("test_count"),
                              Entry("test_per_function"), *extra])).steps


def _units(n=4):
    return [BuildUnit(f"t{k}", tiled_exp_module(tiles=k + 1)) for k in range(n)] + \
        [BuildUnit("family", every_family_module())]


def _finals(rep):
    return {u.unit.name: u.final for u in rep.units}


def test_local_cluster_build_gives_the_same_hashes_as_an_inline_build(tmp_path):
    inline = build(_units(), _steps(), Store(tmp_path / "a"), executor=InlineExecutor)
    rep = build(_units(), _steps(), Store(tmp_path / "b"),
                executor=lambda: local_cluster_executor(2, local_directory=str(tmp_path / "w")))
    assert rep.cluster_started and all(u.ok for u in rep.units)
    assert _finals(rep) == _finals(inline)
    assert len(rep.executions()) == len(inline.executions()) == 15


def test_a_worker_killed_mid_build_does_not_break_the_build(tmp_path):
    import dask
    from distributed import Client, LocalCluster

    steps = _steps(Entry("test_sleep", {"seconds": 0.6}))
    with dask.config.set({"temporary-directory": str(tmp_path / "w")}), LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      local_directory=str(tmp_path / "w")) as cluster, \
            Client(cluster) as client:
        pids = client.run(os.getpid)
        killed = {}

        def kill_one_busy_worker():
            deadline = time.time() + 30
            while time.time() < deadline and not killed:
                for addr, keys in client.processing().items():
                    if any(str(k).startswith("test_sleep") for k in keys):
                        time.sleep(0.3)  # let the pass get going
                        os.kill(pids[addr], signal.SIGKILL)
                        killed[addr] = keys
                        return
                time.sleep(0.05)

        t = threading.Thread(target=kill_one_busy_worker)
        t.start()
        rep = build(_units(2), steps, Store(tmp_path / "s"), executor=client_executor(client))
        t.join()
    assert killed, "no worker was killed"
    assert all(u.ok for u in rep.units), [u.error for u in rep.units]
    assert {u for u, s in rep.executions() if s == "test_sleep"} == {"t0", "t1", "family"}
    reference = build(_units(2), steps, Store(tmp_path / "ref"), executor=InlineExecutor)
    assert _finals(rep) == _finals(reference)


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture
def external_cluster(tmp_path, request):
    """A `dask scheduler` and two `dask worker` processes on loopback.

    Parametrised with a directory, the second worker runs in a mount namespace of its own with an empty
    tmpfs over that directory: it sees another file system there than the client does.
    """
    private = getattr(request, "param", None)
    sched_file = tmp_path / "scheduler.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DASK_TEMPORARY_DIRECTORY=str(tmp_path / "w"))
    common = {"env": env, "cwd": str(tmp_path), "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--dashboard-address", ":0", "--scheduler-file", str(sched_file)],
                              **common)]
    try:
        deadline = time.time() + 60
        while not sched_file.exists() and time.time() < deadline:
            time.sleep(0.1)
        for k in range(2):
            worker = [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sched_file),
                      "--nworkers", "1", "--nthreads", "1", "--dashboard-address", ":0", "--local-directory",
                      str(tmp_path / "w")]
            if private and k == 1:
                hidden = tmp_path / private
                hidden.mkdir(parents=True, exist_ok=True)
                worker = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                          f'mount -t tmpfs tmpfs "{hidden}" && exec "$@"', "sh", *worker]
            procs.append(subprocess.Popen(worker, **common))
        from distributed import Client

        time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        with Client(address, timeout=30) as c:
            c.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def test_external_scheduler_build_gives_the_same_hashes_as_a_local_build(tmp_path, external_cluster):
    kernels = tmp_path / "kernels"
    write_kernels(kernels, 4)
    pipe = tmp_path / "p.toml"
    pipe.write_text(pipeline_toml(*PASSES))
    out = tmp_path / "out"
    runner = CliRunner()

    def run(*args):
        res = runner.invoke(app, ["compile", str(kernels), "-o", str(out), "--pipeline", str(pipe), "--json", *args])
        assert res.exit_code == 0, res.output
        rep = json.loads(res.stdout)
        return rep, {k["kernel"]: k["units"][0]["final"] for k in rep["kernels"]}

    remote, remote_finals = run("--scheduler", external_cluster, "--cache-dir", str(tmp_path / "c1"))
    assert remote["cluster_started"] and remote["executed"] == 16
    assert external_cluster in remote["executor"]
    local, local_finals = run("--workers", "0", "--cache-dir", str(tmp_path / "c2"))
    assert local["executed"] == 16 and local_finals == remote_finals


@pytest.mark.skipif(not _can_unshare(), reason="needs mount namespaces (unshare -m)")
@pytest.mark.parametrize("external_cluster", ["shared"], indirect=True)
def test_a_worker_that_cannot_see_the_store_is_named_and_nothing_is_built(tmp_path, external_cluster):
    kernels = tmp_path / "kernels"
    write_kernels(kernels, 2)
    pipe = tmp_path / "p.toml"
    pipe.write_text(pipeline_toml(*PASSES))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["compile", str(kernels), "-o", str(out), "--pipeline", str(pipe), "--scheduler",
                                   external_cluster, "--cache-dir", str(tmp_path / "shared" / "cache")])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, text
    assert "not every Dask worker can use the store" in text and "does not see the probe" in text
    assert "fsspec URL" in text and text.count("worker tcp://") == 1  # the one worker that cannot, named
    assert not out.exists()
