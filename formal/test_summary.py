"""The formal summary's rules: a bounded run needs a recorded reason; every recorded reason names a task."""
import re
import tomllib
from pathlib import Path

import pytest
from amaranth.hdl import Fragment

from formal.runner import BOUNDED, FormalFailure, bounded_reason, prove
from formal.summary import kind_of, markdown, rows
from formal.test_runner import Spec


def test_bmc_without_reason_fails():
    """A safety property checked only to a depth, with no reason in bounded.toml, fails before it runs."""
    spec = Spec(limit=9, bound=9)
    with pytest.raises(FormalFailure, match="without a recorded reason"):
        prove(spec, "runner_unrecorded_bmc", depth=4, mode="bmc")
    Fragment.get(spec, None)        # refused unelaborated: elaborated here, so Amaranth does not warn it unused


def test_reasons_name_tasks():
    """Every entry of bounded.toml matches a task name a formal test (or the mutants' miter) uses (no stale
    reason), and says why."""
    paths = [*Path(BOUNDED).parent.rglob("test_*.py"), Path(BOUNDED).parents[1] / "tools" / "miter.py"]
    sources = "\n".join(path.read_text() for path in paths)
    names = set(re.findall(r'"([a-z0-9_]+)"', sources)) | set(re.findall(r'f"([a-z0-9_]+)\{', sources))
    for pattern, entry in tomllib.loads(BOUNDED.read_text()).items():
        stem = pattern.rstrip("*")
        assert any(name.startswith(stem) if pattern.endswith("*") else name == stem for name in names), pattern
        assert len(entry["reason"].split()) >= 8, f"{pattern}: the reason must say why and what would close it"
        assert bounded_reason(stem) == entry["reason"]


def test_table():
    found = [("formal/test_runner.py::test_x", "passed", {"name": "runner_fails", "mode": "bmc", "depth": 12,
                                                          "seconds": 1.25, "engine": "smtbmc yices", "params": "-"}),
             ("formal/test_a.py::test_y", "passed", {"name": "a_liveness", "mode": "prove", "depth": 3})]
    table = rows(found)
    assert [row["block"] for row in table] == ["a", "runner"]
    assert table[1]["bounded_reason"].startswith("The runner's self-test")
    assert kind_of("a_liveness", "prove") == "liveness" and kind_of("a", "cover") == "cover"
    assert "| runner | runner_fails | safety | bmc | smtbmc yices | 12 | 1.2" in markdown(table)
