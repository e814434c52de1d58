"""A pool of ``jobs`` worker threads that takes the most urgent call waiting first.

``PriorityPool(jobs).submit(rank, fn, *args)`` returns a ``Future``; of the calls waiting, a worker takes
the lowest ``rank``, then the one submitted first. A mutation campaign (``tools.mutants``) ranks a mutant's
later stages (its tests, its miter: the longest calls) before the next screening, so they start as soon as
they exist instead of after every block's screening, and the run does not end on one long call.
"""
import itertools
import queue
import threading
from concurrent.futures import Future

__all__ = ["PriorityPool"]


class PriorityPool:
    """``jobs`` workers, the lowest rank first (the module doc); a context manager, as ``ThreadPoolExecutor``
    (leaving it waits for the calls submitted)."""

    def __init__(self, jobs):
        if not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
        self.waiting, self.order = queue.PriorityQueue(), itertools.count()
        self.workers = [threading.Thread(target=self._work, daemon=True) for _ in range(jobs)]
        for worker in self.workers:
            worker.start()

    def submit(self, rank, fn, *args):
        future = Future()
        self.waiting.put((rank, next(self.order), future, fn, args))
        return future

    def _work(self):
        while True:
            _, _, future, fn, args = self.waiting.get()
            if fn is None:
                return
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as error:
                    future.set_exception(error)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for _ in self.workers:
            self.waiting.put((float("inf"), next(self.order), None, None, ()))
        for worker in self.workers:
            worker.join()
