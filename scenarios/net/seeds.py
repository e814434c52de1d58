"""Seeds of the scenarios: one run seed (``INNET_SEED``, default 1) and independent streams drawn from it."""
import random

__all__ = ["seed", "stream"]


def seed():
    """The run's seed: ``INNET_SEED`` if set, else 1 (the run the docs report)."""
    from testbenches import runner
    return runner.traffic_seed(default=1)


def stream(seed_value, *names):
    """A ``random.Random`` for one part of a run (``names``, e.g. ``("jitter", 3)``): parts draw from their
    own streams, so adding one part leaves the others' draws unchanged."""
    return random.Random("/".join(map(str, (seed_value, *names))))
