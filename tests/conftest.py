"""Fixtures of the model-only tests."""
import pytest

from testbenches import runner


@pytest.fixture
def rng(request):
    """A ``random.Random`` seeded from the run's traffic seed and the test's name (``INNET_SEED`` replays it)."""
    return runner.model_rng(request.node.nodeid)
