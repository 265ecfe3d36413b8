"""The estimate of the time a build has left, from the seconds earlier builds took.

What remains of a unit is a serial chain: its steps run one after another
(each needs the one before), then its outputs are written.  The chains of
different units are independent, so with *W* worker slots the build's rest
lasts about as long as the chains packed onto *W* slots, longest first
(:func:`packed`) -- never less than the longest chain, however many
workers there are: one large kernel's tail is serial.  After the steps
come the build's own phases (stopping the cluster, putting the outputs in
place, writing the timelines, the build trace and the report), one after
another, as long as they took last time.

A step without history is estimated as the same step of other units took
(their mean); when nothing of what remains has any history there is no
estimate ("estimating").
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


def packed(chains: list[float], slots: int) -> float:
    """How long ``chains`` (independent, each serial) take on ``slots`` workers: longest first onto the
    least loaded slot."""
    loads = [0.0] * max(1, min(slots, len(chains) or 1))
    heapq.heapify(loads)
    for c in sorted(chains, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + c)
    return max(loads) if chains else 0.0


@dataclass
class Chain:
    """What is left of one unit: the expected seconds of each step not resolved yet, in order (None:
    unknown), and how long its running step has run."""

    steps: list[tuple[str, float | None]]
    running_for: float = 0.0


def typical(known: list[dict[str, float]]) -> dict[str, float]:
    """Mean seconds of each step over the units that have a history for it."""
    sums: dict[str, list[float]] = {}
    for k in known:
        for label, secs in k.items():
            sums.setdefault(label, []).append(secs)
    return {label: sum(v) / len(v) for label, v in sums.items()}


def remaining(chains: list[Chain], unseen: int, slots: int, phases_left: list[float | None],
              typical_steps: dict[str, float]) -> float | None:
    """Seconds left (see the module docstring); None without history for any of it."""
    known = False
    lengths = []
    for c in chains:
        total = 0.0
        for i, (label, secs) in enumerate(c.steps):
            if secs is None:
                secs = typical_steps.get(label)
            if secs is None:
                continue
            known = True
            total += max(0.0, secs - c.running_for) if i == 0 else secs
        lengths.append(total)
    if unseen and lengths:
        mean = sum(lengths) / len(lengths)
        lengths += [mean] * unseen
    post = [p for p in phases_left if p is not None]
    if not known and not post and (chains or unseen):
        return None
    if not chains and not unseen and not post and any(p is None for p in phases_left):
        return None
    return packed(lengths, slots) + sum(post)
