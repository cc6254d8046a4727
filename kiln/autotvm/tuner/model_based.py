"""Model-based tuning: measure, fit a cost model, search the model for the next batch.

``SimulatedAnnealingOptimizer.find_maximums`` walks ``parallel_size`` points through the space,
each step changing one knob of each point; worse moves are accepted with a probability that
shrinks as the temperature falls. It keeps the best ``num`` unvisited points it has seen. A
space small enough to score whole is scored whole instead (exact and cheaper).
"""

from __future__ import annotations

import heapq
import logging

import numpy as np

from ..measure.measure import MeasureErrorNo
from .simple import IndexSampler
from .tuner import Tuner

logger = logging.getLogger("autotvm")


class SimulatedAnnealingOptimizer:
    def __init__(self, space, n_iter: int = 60, temp=(1.0, 0.0), parallel_size: int = 64,
                 early_stop: int = 15, exhaustive_below: int = 1500, rng=None):
        self.space, self.dims = space, space.dims
        self.n_iter, self.temp, self.parallel_size = n_iter, temp, parallel_size
        self.early_stop, self.exhaustive_below = early_stop, exhaustive_below
        self.rng = rng or np.random.default_rng()
        self.points: list[int] | None = None

    def find_maximums(self, model, num: int, exclusive: set[int]) -> list[int]:
        if len(self.space) <= self.exhaustive_below:
            candidates = [i for i in range(len(self.space)) if i not in exclusive]
            scores = model.predict(candidates)
            order = np.argsort(-scores, kind="stable")[:num]
            return [candidates[i] for i in order]
        return self._anneal(model, num, exclusive)

    def _mutate(self, idx: int) -> int:
        genes = self.space.knob_indices(idx)
        k = int(self.rng.integers(len(self.dims)))
        genes[k] = int(self.rng.integers(self.dims[k]))
        return self.space.index_of(genes)

    def _anneal(self, model, num: int, exclusive: set[int]) -> list[int]:
        if self.points is None:  # later rounds continue from where the last one ended
            self.points = [int(self.rng.integers(len(self.space))) for _ in range(self.parallel_size)]
        points = list(self.points)
        scores = model.predict(points)
        heap: list[tuple[float, int]] = []
        in_heap: set[int] = set()

        def offer(idx, score):
            if idx in exclusive or idx in in_heap:
                return False
            if len(heap) < num:
                heapq.heappush(heap, (score, idx))
            elif score > heap[0][0]:
                in_heap.discard(heapq.heapreplace(heap, (score, idx))[1])
            else:
                return False
            in_heap.add(idx)
            return True

        for p, s in zip(points, scores):
            offer(p, s)
        t0, t1 = self.temp
        quiet = 0
        for step in range(self.n_iter):
            temp = t0 + (t1 - t0) * step / max(1, self.n_iter - 1)
            fresh = [self._mutate(p) for p in points]
            fresh_scores = model.predict(fresh)
            accept = np.exp(np.minimum((fresh_scores - scores) / max(temp, 1e-9), 0.0)) > \
                self.rng.random(len(points))
            changed = False
            for i in np.nonzero(accept)[0]:
                points[i], scores[i] = fresh[i], fresh_scores[i]
            for p, s in zip(fresh, fresh_scores):
                changed |= offer(p, s)
            quiet = 0 if changed else quiet + 1
            if quiet >= self.early_stop:
                break
        self.points = points
        return [idx for _, idx in sorted(heap, reverse=True)]


class ModelBasedTuner(Tuner):
    """Random batches until ``plan_size`` results exist; then the model's best predictions, with
    a fraction ``epsilon`` of random configs so the model keeps seeing the unexpected."""

    def __init__(self, task, cost_model, optimizer, plan_size: int = 64, epsilon: float = 0.05,
                 seed=None):
        super().__init__(task)
        self.cost_model, self.optimizer = cost_model, optimizer
        self.plan_size, self.epsilon = plan_size, epsilon
        self.rng = np.random.default_rng(seed)
        self._sampler = IndexSampler(len(self.space), self.rng)
        self.trials: list[int] = []
        self.trial_pt = 0
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.train_ct = 0

    def next_batch(self, batch_size: int) -> list:
        out: list[int] = []
        while len(out) < batch_size and len(self.visited) + len(out) < len(self.space):
            idx = None
            if self.trial_pt < len(self.trials) and self.rng.random() >= self.epsilon:
                idx = self.trials[self.trial_pt]
                self.trial_pt += 1
            else:
                drawn = self._sampler.draw(1, self.visited | set(out))
                idx = drawn[0] if drawn else None
                if idx is None and self.trial_pt >= len(self.trials):
                    break
            if idx is not None and idx not in self.visited and idx not in out:
                out.append(idx)
        return [self.space.get(i) for i in out]

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            ok = res.error_no == MeasureErrorNo.NO_ERROR
            self.xs.append(inp.config.index)
            self.ys.append(self.task.flop / float(np.mean(res.costs)) if ok else 0.0)
        if len(self.xs) >= self.plan_size * (self.train_ct + 1) and max(self.ys) > 0:
            self.cost_model.fit(self.xs, self.ys)
            self.trials = self.optimizer.find_maximums(self.cost_model, self.plan_size, self.visited)
            self.trial_pt = 0
            self.train_ct += 1

    def load_history(self, data_set, min_seed_records: int = 500) -> None:
        data_set = list(data_set)
        super().load_history(data_set, min_seed_records)
        own = [(i, r) for i, r in data_set if i.task.workload == self.task.workload
               and 0 <= i.config.index < len(self.space)]
        for inp, res in own:
            self.xs.append(inp.config.index)
            ok = res.error_no == MeasureErrorNo.NO_ERROR
            self.ys.append(self.task.flop / float(np.mean(res.costs)) if ok else 0.0)
        others = [(i, r) for i, r in data_set if i.task.workload != self.task.workload]
        used = self.cost_model.fit_log(others[:min_seed_records * 4]) if others else 0
        if used or (own and max(self.ys, default=0) > 0):
            self.cost_model.fit(self.xs, self.ys)
            if self.cost_model.bst is not None:
                self.trials = self.optimizer.find_maximums(self.cost_model, self.plan_size, self.visited)
                self.trial_pt = 0
        logger.debug("load_history: %d records of this task, %d of others used", len(own), used)
