"""The bandwidth calendar skips exhausted buckets: every booking ends exactly where a bucket-by-bucket walk ends."""

from __future__ import annotations

import numpy as np

from tusk.sim.timing import Calendar, CostTable


class WalkingCalendar:
    """The calendar as it was before the skip: every bucket from the start visited (the reference)."""

    def __init__(self, costs: CostTable):
        self.B = float(costs.bucket)
        self.pool_cap = costs.dma_engines * self.B
        self.dram_cap = costs.dram_bytes_per_cycle * self.B
        self.pool: list[float] = []
        self.dram: list[float] = []

    def book(self, t: float, work: float, nbytes: float, rate: float) -> float:
        if work <= 0:
            return t
        B, ratio, remaining = self.B, nbytes / work, work
        k = int(t // B)
        lo = t if t > k * B else k * B
        while True:
            while k >= len(self.pool):
                self.pool.append(self.pool_cap)
                self.dram.append(self.dram_cap)
            can = min(rate * ((k + 1) * B - lo), self.pool[k])
            if ratio > 0.0:
                if self.dram[k] < can * ratio:
                    can = self.dram[k] / ratio
                if can >= remaining:
                    self.pool[k] -= remaining
                    self.dram[k] -= remaining * ratio
                    return lo + remaining / rate
                self.pool[k] -= can
                self.dram[k] -= can * ratio
            else:
                if can >= remaining:
                    self.pool[k] -= remaining
                    return lo + remaining / rate
                self.pool[k] -= can
            remaining -= can
            k += 1
            lo = k * B


def test_bookings_end_where_a_bucket_by_bucket_walk_ends():
    costs = CostTable(dma_engines=4, bucket=64.0)
    rng = np.random.default_rng(7)
    for trial in range(6):
        fast, slow = Calendar(costs), WalkingCalendar(costs)
        t = 0.0
        for k in range(2000):
            t += float(rng.exponential(700.0))
            work = float(rng.choice([0.0, rng.uniform(1, 5000), 256.0 * rng.integers(1, 40)]))
            nbytes = work * float(rng.choice([0.0, rng.uniform(0.1, 30.0)]))
            rate = float(rng.choice([1.0, 2.0, 4.0, 16.0]))
            start = t - float(rng.uniform(0, 3000))  # bookings reach back into buckets filled earlier
            start = max(start, 0.0)
            assert fast.book(start, work, nbytes, rate) == slow.book(start, work, nbytes, rate), (trial, k)
        skipped = sum(1 for j, s in enumerate(fast.skip) if s != j + fast.base)
        assert skipped > 0  # the bookings did exhaust buckets, and the skip was exercised


def test_forgetting_old_buckets_keeps_the_skip_consistent():
    costs = CostTable(dma_engines=2, bucket=16.0)
    fast, slow = Calendar(costs), WalkingCalendar(costs)
    t = 0.0
    for k in range(20_000):
        t += 155.0  # just under the engines' capacity: buckets fill up and stay full
        assert fast.book(t, 300.0, 900.0, 2.0) == slow.book(t, 300.0, 900.0, 2.0)
        if k % 1024 == 0:
            fast.forget_before(t)
    assert fast.base > 0
