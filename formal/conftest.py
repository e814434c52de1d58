"""pytest: attach each proof of a formal test as an ``innet`` user property (the terminal summary reads it)."""
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
