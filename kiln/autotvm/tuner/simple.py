"""Tuners without a model: random order and grid order over the config indices."""

from __future__ import annotations

import numpy as np

from .tuner import Tuner


class IndexSampler:
    """Unvisited indices of a space in random order, without repeats, for spaces of any size."""

    def __init__(self, n: int, rng: np.random.Generator, lo: int = 0):
        self.n, self.lo, self.rng = n, lo, rng
        # A full permutation is cheap up to a few million; beyond, sample and reject.
        self._perm = rng.permutation(n) + lo if n <= 4_000_000 else None
        self._pos = 0
        self._drawn: set[int] = set()

    def draw(self, k: int, visited: set[int]) -> list[int]:
        out: list[int] = []
        if self._perm is not None:
            while len(out) < k and self._pos < self.n:
                idx = int(self._perm[self._pos])
                self._pos += 1
                if idx not in visited:
                    out.append(idx)
            return out
        tries = 0
        while len(out) < k and tries < 100 * k:
            idx = int(self.rng.integers(self.n)) + self.lo
            tries += 1
            if idx not in visited and idx not in self._drawn:
                self._drawn.add(idx)
                out.append(idx)
        return out


class RandomTuner(Tuner):
    """Configs in random order. ``range_idx=(lo, hi)`` limits it to part of the space (to split
    a space among machines); ``seed`` makes the order reproducible."""

    def __init__(self, task, range_idx=None, seed=None):
        super().__init__(task)
        lo, hi = range_idx if range_idx is not None else (0, len(self.space) - 1)
        if not 0 <= lo <= hi < len(self.space):
            raise ValueError(f"range_idx {range_idx} is outside the space [0, {len(self.space) - 1}]")
        self.range = (lo, hi)
        self._sampler = IndexSampler(hi - lo + 1, np.random.default_rng(seed), lo)
        self._exhausted = False

    def has_next(self) -> bool:
        lo, hi = self.range
        return not self._exhausted and len([v for v in self.visited if lo <= v <= hi]) < hi - lo + 1

    def next_batch(self, batch_size: int) -> list:
        indices = self._sampler.draw(batch_size, self.visited)
        if not indices:
            self._exhausted = True
        return [self.space.get(i) for i in indices]


class GridSearchTuner(Tuner):
    """Configs in index order (first knob fastest), skipping those already measured."""

    def __init__(self, task, range_idx=None):
        super().__init__(task)
        lo, hi = range_idx if range_idx is not None else (0, len(self.space) - 1)
        self.range = (lo, hi)
        self._next = lo

    def has_next(self) -> bool:
        return self._next <= self.range[1]

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size and self._next <= self.range[1]:
            if self._next not in self.visited:
                out.append(self.space.get(self._next))
            self._next += 1
        return out
