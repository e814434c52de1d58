"""``tools.priority_pool.PriorityPool``: the lowest rank waiting runs first, then the first submitted; a call's
exception reaches its future; a pool needs a positive number of jobs."""
import threading

import pytest

from tools.priority_pool import PriorityPool


def test_lowest_rank_first_then_first_submitted():
    started, order = threading.Event(), []
    with PriorityPool(1) as pool:
        busy = pool.submit(0, started.wait, 10)        # holds the one worker while the others queue
        waiting = [pool.submit(rank, order.append, name) for rank, name in
                   ((2, "screening a"), (0, "tests a"), (1, "static"), (0, "tests b"), (2, "screening b"))]
        started.set()
        assert busy.result() is True
        for future in waiting:
            future.result()
    assert order == ["tests a", "tests b", "static", "screening a", "screening b"]


def test_an_exception_reaches_the_future():
    with PriorityPool(2) as pool:
        future = pool.submit(0, int, "not a number")
        with pytest.raises(ValueError, match="not a number"):
            future.result()
        assert pool.submit(0, int, "7").result() == 7


@pytest.mark.parametrize("jobs", [0, -1, 1.5, "2"])
def test_bad_jobs(jobs):
    with pytest.raises(ValueError, match="jobs"):
        PriorityPool(jobs)
