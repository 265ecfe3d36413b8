"""The executors' own rules: tasks that may run anywhere go out no more at a time than there are worker threads,
the most urgent, then the biggest, first; a chain's task goes at once."""

from __future__ import annotations

import threading
import time

import pytest

from tusk.workflows.executors import DaskExecutor

RAN: list[str] = []
GATE = threading.Event()


def _task(name: str, wait: bool = False) -> dict:
    if wait:
        GATE.wait(30)
    RAN.append(name)
    return {"status": "executed", "name": name}


@pytest.fixture
def one_thread_client():
    from distributed import Client, LocalCluster

    # in this process: the tasks' log is this module's list
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
    client = Client(cluster)
    RAN.clear()
    GATE.clear()
    yield client
    client.close()
    cluster.close()


def test_held_tasks_go_out_one_per_thread_most_urgent_then_by_batch_then_biggest_first(one_thread_client):
    ex = DaskExecutor(one_thread_client, description="test")
    ex.owns_client = False
    ex.warm_up([])
    assert ex.slots == 1
    ex.submit("chain", _task, "chain", True)  # runs at once and keeps the one thread busy
    ex.submit("first", _task, "first", anywhere=True, size=1)  # one held task at a time: this one goes out
    early, late = ex.next_batch(), ex.next_batch()
    # a later batch's big parts wait for an earlier batch's small ones: a kernel's split is not starved
    for name, size, priority, batch in [("late-big", 10_000, 0, late), ("small", 10, 0, early),
                                        ("big", 300, 0, early), ("mid", 100, 0, early), ("urgent", 1, 5, late),
                                        ("last", 10_000, -1000, early)]:
        ex.submit(name, _task, name, anywhere=True, size=size, priority=priority, batch=batch)
    ex.submit("unbatched", _task, "unbatched", anywhere=True, size=1)  # a batch of its own, after both
    assert set(ex._futures) == {"chain", "first"} and len(ex) == 9
    GATE.set()
    done = [ex.next()[0] for _ in range(9)]
    assert RAN == ["chain", "first", "urgent", "big", "mid", "small", "late-big", "unbatched", "last"]
    assert sorted(done) == sorted(RAN) and len(ex) == 0


def test_a_chain_task_is_not_held_back_by_held_ones(one_thread_client):
    ex = DaskExecutor(one_thread_client, description="test")
    ex.owns_client = False
    ex.warm_up([])
    ex.submit("part", _task, "part", True, anywhere=True, size=5)
    ex.submit("part2", _task, "part2", anywhere=True, size=4)
    ex.submit("step", _task, "step")  # handed over at once, though the one thread runs a part
    assert set(ex._futures) == {"part", "step"} and len(ex) == 3
    GATE.set()
    deadline = time.time() + 30
    got = set()
    while len(got) < 3 and time.time() < deadline:
        got.add(ex.next()[0])
    assert got == {"part", "part2", "step"} and RAN[0] == "part"


def test_workers_that_join_an_existing_cluster_take_held_tasks_too(one_thread_client, monkeypatch):
    from tusk.workflows import executors

    monkeypatch.setattr(executors, "SLOTS_EVERY", 0.0)
    ex = DaskExecutor(one_thread_client, description="test")
    ex.owns_client = False
    ex.warm_up([])
    assert ex.slots == 1
    one_thread_client.cluster.scale(2)
    one_thread_client.wait_for_workers(2, timeout=30)
    ex.submit("a", _task, "a", True, anywhere=True, size=2)
    ex.submit("b", _task, "b", True, anywhere=True, size=1)
    assert ex.slots == 2 and set(ex._futures) == {"a", "b"}
    GATE.set()
    assert {ex.next()[0], ex.next()[0]} == {"a", "b"}


def test_where_each_kind_of_task_may_run():
    from tusk.workflows.graph import TaskKind

    # (may run on any worker, held for a free thread, priority)
    assert TaskKind.STEP.placement(3) == (False, False, 0)        # the worker holding its input
    assert TaskKind.MERGE.placement(0) == (False, False, 0)
    assert TaskKind.PART.placement(2) == (True, True, 0)          # from the store, biggest first
    assert TaskKind.CHECK.placement(1) == (True, True, 0)
    # part 0 where the module is, but taking a thread: a check sent beside it queued ahead of the placement
    assert TaskKind.EMIT_PART.placement(0) == (False, True, 1)
    assert TaskKind.EMIT_PART.placement(1) == (True, True, 1)
    assert TaskKind.EMIT_PLACE.placement(1) == (True, True, 2)    # from a file: the first free thread
    assert TaskKind.TIMING.placement(0) == (True, False, -1000)   # last, never holding a part back
    assert TaskKind.KERNEL.placement(0) == (True, False, 0)


def test_the_streams_of_an_owned_client_batch_for_at_most_2_ms(one_thread_client):
    from tusk.workflows.executors import ROUND_TRIP_INTERVAL, quicker_round_trips

    cluster = one_thread_client.cluster
    assert one_thread_client.scheduler_comm.interval > ROUND_TRIP_INTERVAL  # Dask's own: 10 ms
    quicker_round_trips(one_thread_client, cluster.scheduler)
    assert one_thread_client.scheduler_comm.interval == ROUND_TRIP_INTERVAL
    assert all(s.interval <= ROUND_TRIP_INTERVAL for s in cluster.scheduler.stream_comms.values())
    ex = DaskExecutor(one_thread_client, description="test")
    ex.owns_client = False
    ex.submit("a", _task, "a")
    assert ex.next()[0] == "a"


def test_round_trips_leave_what_has_no_interval_alone():
    from tusk.workflows.executors import quicker_round_trips

    class Odd:
        scheduler_comm = None
    quicker_round_trips(Odd(), object())  # neither attribute: nothing to do, no error
