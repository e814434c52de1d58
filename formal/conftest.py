"""pytest: attach each proof of a formal test as an ``innet`` user property (the terminal summary reads it);
fail a passed proof whose row in its block's docs page (``python -m tools.proofs --docs``) is not this
run's (the docs' mode, depth and property count are the proofs'); leave the deep proofs
(``@pytest.mark.deep``, minutes each) to ``make formal-deep`` (``INNET_FORMAL_DEEP=1``)."""
import os

import pytest

from formal import runner
from testbenches.runner import plain_nodeid
from tools import proofs


def _undocumented(nodeid, done):
    """The messages of the results ``done`` of test ``nodeid`` whose docs row differs from the run's."""
    block = proofs.block_of(plain_nodeid(nodeid))
    if block is None or not proofs.page(block).is_file():     # no page yet, or a tree without docs
        return []
    try:
        rows = proofs.documented(block)
    except ValueError as error:                 # no proofs section in the page
        return [str(error)]
    stale = []
    for result in done:
        want = proofs.row({"name": result.name, "mode": result.mode, "depth": result.depth,
                           "properties": result.properties})
        if want not in rows:
            have = next((r for r in rows if r.startswith(f"| `{result.name}` |")), "no row")
            stale.append(f"{proofs.page(block).relative_to(proofs.ROOT)}: {have}; this run: {want}")
    return stale


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After the test body, move its proofs' results into ``item.user_properties`` (as record_property
    does); a passed test whose proofs' docs rows are stale fails, naming the command that rewrites them."""
    done = runner.results()
    if call.when == "call":
        item.user_properties += [("innet", {
            "kind": "formal", "name": result.name, "mode": result.mode, "depth": result.depth,
            "seconds": round(result.seconds, 2), "properties": result.properties, "engine": result.engine,
            "params": result.params}) for result in done]
    outcome = yield
    report = outcome.get_result()
    if call.when == "call" and report.passed:
        stale = _undocumented(item.nodeid, done)
        if stale:
            report.outcome = "failed"
            report.longrepr = ("the docs' proofs table is not this run's: run `make formal` then "
                               "`python -m tools.proofs --docs`\n  " + "\n  ".join(stale))


def pytest_collection_modifyitems(config, items):
    """Deselect the deep proofs unless ``INNET_FORMAL_DEEP=1`` (``make formal-deep``: them alone)."""
    deep = os.environ.get("INNET_FORMAL_DEEP", "").strip() == "1"
    chosen = [item for item in items if (item.get_closest_marker("deep") is not None) == deep
              or not item.nodeid.startswith("formal/")]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
        items[:] = chosen
