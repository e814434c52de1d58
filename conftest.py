"""pytest: check the toolchain once, and stop with one clear line when a tool is missing."""
import pytest

from formal import runner as formal_runner
from testbenches import runner


def pytest_sessionstart(session):
    try:
        runner.verilator_env()
        formal_runner.tools()
    except (runner.ToolMissing, formal_runner.ToolMissing) as error:
        pytest.exit(f"innet: {error}", returncode=3)
