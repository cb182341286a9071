"""Discrete-event engine: a virtual clock in integer microseconds and a heap
of events.

An event is the tuple ``(time_us, seq, fn, a, b)``; ``seq`` is a global
counter, so events at the same time run in the order they were scheduled
(deterministic tie-break, and the tuple comparison never reaches ``fn``).
Running an event calls ``fn(a, b)`` with ``engine.now`` set to its time.
All randomness of a run comes from ``engine.rng`` (``random.Random(seed)``).
"""
import heapq
import random

US_PER_MS = 1000
US_PER_S = 1000000


class Engine:
    def __init__(self, seed=0):
        self.now = 0                  # virtual time, microseconds
        self.rng = random.Random("engine:%s" % (seed,))
        self._heap = []
        self._seq = 0
        self.events_run = 0

    def at(self, t_us, fn, a=None, b=None):
        """Schedule fn(a, b) at absolute time t_us (not before now)."""
        if t_us < self.now:
            t_us = self.now
        self._seq += 1
        heapq.heappush(self._heap, (t_us, self._seq, fn, a, b))

    def after(self, dt_us, fn, a=None, b=None):
        self._seq += 1
        heapq.heappush(self._heap, (self.now + (dt_us if dt_us > 0 else 0), self._seq, fn, a, b))

    def pending(self):
        return len(self._heap)

    def next_time(self):
        return self._heap[0][0] if self._heap else None

    def run_until(self, t_us, stop=None):
        """Run every event with time <= t_us, then set the clock to t_us.
        If `stop` is given it is called after each event; when it returns
        true the run stops early (clock at that event's time). Returns True
        when stopped early."""
        heap = self._heap
        pop = heapq.heappop
        n = 0
        try:
            if stop is None:
                while heap and heap[0][0] <= t_us:
                    t, _, fn, a, b = pop(heap)
                    self.now = t
                    fn(a, b)
                    n += 1
            else:
                while heap and heap[0][0] <= t_us:
                    t, _, fn, a, b = pop(heap)
                    self.now = t
                    fn(a, b)
                    n += 1
                    if stop():
                        return True
        finally:
            self.events_run += n
        if t_us > self.now:
            self.now = t_us
        return False
