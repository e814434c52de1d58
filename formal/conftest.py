"""pytest: attach each proof of a formal test as an ``innet`` user property (the terminal summary reads it);
leave the deep proofs (``@pytest.mark.deep``, minutes each) to ``make formal-deep`` (``INNET_FORMAL_DEEP=1``)."""
import os

import pytest

from formal import runner


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After the test body, move its proofs' results into ``item.user_properties`` (as record_property does)."""
    done = runner.results()
    if call.when == "call":
        item.user_properties += [("innet", {
            "kind": "formal", "name": result.name, "mode": result.mode, "depth": result.depth,
            "seconds": round(result.seconds, 2), "properties": result.properties, "engine": result.engine,
            "params": result.params}) for result in done]
    yield


def pytest_collection_modifyitems(config, items):
    """Deselect the deep proofs unless ``INNET_FORMAL_DEEP=1`` (``make formal-deep``: them alone)."""
    deep = os.environ.get("INNET_FORMAL_DEEP", "").strip() == "1"
    chosen = [item for item in items if (item.get_closest_marker("deep") is not None) == deep
              or not item.nodeid.startswith("formal/")]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
        items[:] = chosen
