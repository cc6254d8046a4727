"""GATuner: a genetic algorithm over the knob choices.

A config's genes are its per-knob choice indices. Each generation of ``pop_size`` is measured;
the next one keeps the ``elite_num`` best, and fills up with children of parents picked in
proportion to their GFLOPS (uniform crossover, then each gene re-drawn with ``mutation_prob``).
Children already measured are re-mutated, so no config is measured twice.
"""

from __future__ import annotations

import numpy as np

from ..measure.measure import MeasureErrorNo
from .tuner import Tuner


class GATuner(Tuner):
    def __init__(self, task, pop_size: int = 100, elite_num: int = 3, mutation_prob: float = 0.1,
                 seed=None):
        super().__init__(task)
        self.dims = self.space.dims
        self.pop_size = max(1, min(pop_size, len(self.space)))
        self.elite_num = min(elite_num, self.pop_size)
        self.mutation_prob = mutation_prob
        self.rng = np.random.default_rng(seed)
        self.scores: dict[int, float] = {}
        self.population = self._fresh(self.pop_size, set())
        self._queue = list(self.population)

    def _random_index(self) -> int:
        return self.space.index_of([int(self.rng.integers(d)) for d in self.dims])

    def _fresh(self, n: int, taken: set[int]) -> list[int]:
        out, tries = [], 0
        while len(out) < n and tries < 50 * n:
            idx = self._random_index()
            tries += 1
            if idx not in taken and idx not in self.visited and idx not in out:
                out.append(idx)
        return out

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size:
            if not self._queue:
                self._queue = self._next_generation()
                if not self._queue:
                    break
            idx = self._queue.pop(0)
            if idx not in self.visited and all(c.index != idx for c in out):
                out.append(self.space.get(idx))
        return out

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            ok = res.error_no == MeasureErrorNo.NO_ERROR
            self.scores[inp.config.index] = self.task.flop / float(np.mean(res.costs)) if ok else 0.0

    def _next_generation(self) -> list[int]:
        scored = [(self.scores.get(i, 0.0), i) for i in self.population if i in self.scores]
        if not scored:
            self.population = self._fresh(self.pop_size, set())
            return list(self.population)
        scored.sort(reverse=True)
        elites = [i for _, i in scored[:self.elite_num]]
        weights = np.array([s for s, _ in scored], dtype=np.float64)
        weights = weights + 1e-9 if weights.sum() > 0 else np.ones_like(weights)
        probs = weights / weights.sum()
        parents = [i for _, i in scored]
        children: list[int] = []
        tries = 0
        while len(children) < self.pop_size - len(elites) and tries < 20 * self.pop_size:
            tries += 1
            a, b = self.rng.choice(len(parents), size=2, p=probs)
            ga, gb = self.space.knob_indices(parents[a]), self.space.knob_indices(parents[b])
            child = [x if self.rng.random() < 0.5 else y for x, y in zip(ga, gb)]
            for k, d in enumerate(self.dims):
                if self.rng.random() < self.mutation_prob:
                    child[k] = int(self.rng.integers(d))
            idx = self.space.index_of(child)
            if idx in self.visited or idx in children:
                continue
            children.append(idx)
        if len(children) < self.pop_size - len(elites):  # converged: top up with random configs
            children += self._fresh(self.pop_size - len(elites) - len(children), set(children))
        self.population = elites + children
        return [i for i in children if i not in self.visited]
