"""The scenarios' results in the docs are their runs': after a scenario run at the default seed (1,
``INNET_SEED`` unset), each CSV it wrote must have in ``docs/scenarios.md`` the row that
``python -m tools.scenario_table`` computes from it."""
import os
from pathlib import Path

import pytest

from tools import scenario_table


@pytest.fixture(autouse=True)
def results_documented(request):
    yield
    if os.environ.get("INNET_SEED", "").strip() or not scenario_table.DOCS.exists():
        return
    written = [Path(f) for name, value in request.node.user_properties if name == "innet" and isinstance(value, dict)
               for f in value.get("files", ())]
    for path in written:
        if path.suffix == ".csv" and path.stem in scenario_table.SUMMARIES and path.exists():
            want, have = scenario_table.row(path.stem, path), scenario_table.documented(path.stem)
            assert have == want, (f"docs/scenarios.md's row of {path.stem} is not this run's: run "
                                  f"`python -m tools.scenario_table --docs`\n  docs: {have}\n  run:  {want}")
