"""pytest: check the toolchain and the environment once (one clear line when something is wrong),
draw the run's traffic seed, and print what the tests attached (``innet`` user properties) at the end."""
import gc
import json
import os
import shlex
import uuid
import warnings
from collections import defaultdict
from pathlib import Path

import pytest
from _pytest.nodeid import coerce_node_id

from formal import runner as formal_runner
from formal import summary as formal_summary
from testbenches import runner

ROOT = Path(__file__).resolve().parent
#: At most this many simulation runs get a table of their own; more get a count per block.
SIM_TABLE_ROWS = 4


def pytest_addoption(parser):
    parser.addoption("--innet-replay", default=None, metavar="COMMAND",
                     help="the command that replays this run, printed with its seed at the end (make passes "
                          "`make sim` or `make test`; default: this pytest command)")
    parser.addoption("--block", default=None, metavar="NAME",
                     help="only the tests of one registered block: its testbench, proofs and `tests`, and the "
                          "tests parametrized by its name (soak, layout, bench); `make test BLOCK=NAME`")


def replay_command(config):
    """The command that replays this run: ``--innet-replay``, or the pytest command line as given."""
    given = config.getoption("innet_replay", None)
    return given or shlex.join([".venv/bin/python", "-m", "pytest", *config.invocation_params.args])


def pytest_configure(config):
    if not hasattr(config, "workerinput"):      # one token per session; xdist workers inherit it
        os.environ["INNET_SESSION"] = uuid.uuid4().hex
    try:
        runner.waves()
        seed = runner.traffic_seed()            # drawn once here; xdist workers inherit INNET_RUN_SEED
    except ValueError as error:
        pytest.exit(f"innet: {error}", returncode=4)
    config.innet_seed = seed
    block = config.getoption("block")
    if block is not None:
        from registry import BLOCKS
        if block not in BLOCKS:
            pytest.exit(f"innet: --block: unknown block '{block}' (registered: {', '.join(BLOCKS)})", returncode=4)


def pytest_sessionstart(session):
    try:
        runner.verilator_env()
        formal_runner.tools()
    except (runner.ToolMissing, formal_runner.ToolMissing) as error:
        pytest.exit(f"innet: {error}", returncode=3)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(session.config, "workerinput"):
        reporter.write_line(f"innet: traffic seed {session.config.innet_seed} ({_how_seeded()})")


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_setupnodes(config, specs):
    """pytest-xdist 3.8 writes its status line when it starts the workers and again after they collected;
    off a terminal and with ``-q`` both lines read "bringing up nodes...". Write a status line only when
    it says something new."""
    status = config.pluginmanager.getplugin("terminaldistreporter")
    if status is None or getattr(status, "_isatty", True):
        return
    written = []

    def ensure_show_status():
        line = status.getstatus()
        if written[-1:] != [line]:
            written.append(line)
            status.write_line(line)

    status.ensure_show_status = ensure_show_status


def _select_block(config, items):
    """``--block NAME``: keep the items that belong to the registered block ``NAME``."""
    from registry import BLOCKS
    name = config.getoption("block")
    block = BLOCKS[name]
    files = {block.testbench(), block.proofs(), *block.tests}

    def belongs(item):
        case = item.callspec.id if hasattr(item, "callspec") else ""
        return item.path.relative_to(ROOT).as_posix() in files or case == name or case.startswith(f"{name}-")

    kept = [item for item in items if belongs(item)]
    config.hook.pytest_deselected(items=[item for item in items if not belongs(item)])
    items[:] = kept


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """``--dist loadgroup`` for pytest 9: pytest-xdist 3.8 (on its workers) puts an item's
    ``xdist_group`` into its node id by setting ``item._nodeid``, which pytest 9 no longer reads (the
    id lives in ``item._id``), so every group was split over the workers and the tests of one
    parameter set waited for each other's build. Do the same through ``_id``; reports then carry
    ``@group`` (``runner.plain_nodeid`` drops it). ``--block`` selects first; ``INNET_FIRST`` (node ids,
    comma-separated) runs those tests first, in its order (``make mutants``: the tests likeliest to fail)."""
    if config.getoption("block"):
        _select_block(config, items)
    first = {nodeid: k for k, nodeid in enumerate(os.environ.get("INNET_FIRST", "").split(",")) if nodeid}
    if first:
        items[:] = sorted(items, key=lambda item: first.get(runner.plain_nodeid(item.nodeid), len(first)))
    if not (hasattr(config, "workerinput") and getattr(config.option, "loadgroup", False)):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


def pytest_collection_finish(session):
    runner.plan_batches(session.items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """``innet`` properties as plain JSON (they travel through pytest-xdist)."""
    outcome = yield
    report = outcome.get_result()
    report.user_properties = [(name, json.loads(json.dumps(value, default=str)) if name == "innet" else value)
                              for name, value in report.user_properties]


def _how_seeded():
    return "from INNET_SEED" if os.environ.get("INNET_SEED", "").strip() else "drawn for this run"


def _short(path):
    if not path:
        return "-"
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _innet(reporter):
    """(nodeid, outcome, property dict) of every test report carrying an ``innet`` property."""
    found = []
    for reports in reporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name == "innet" and isinstance(value, dict):
                    found.append((runner.plain_nodeid(report.nodeid), report.outcome, value))
    return sorted(found, key=lambda item: item[0])


def _sim_table(write, rows):
    write(f"simulation runs ({len(rows)})")
    for nodeid, _, r in rows:
        case = nodeid.rsplit("[", 1)[-1].rstrip("]") if "[" in nodeid else r["test"]
        write(f"  {r['block']} [{case}]  seed {r['seed']}  cycles {r['cycles']:,}")
        counters = ", ".join(f"{k} {v}" for k, v in r.get("counters", {}).items()) or "-"
        artefacts = r.get("artefacts", {})
        write(f"    counters: {counters}")
        wave = artefacts.get("waveform")
        write(f"    waveform: {_short(wave) if wave else '- (WAVES=1 keeps one)'}")
        pcaps = [Path(p) for p in artefacts.get("pcaps", [])]
        where = f" in {_short(pcaps[0].parent)}/" if pcaps and len({p.parent for p in pcaps}) == 1 else ""
        names = [p.name if where else _short(p) for p in pcaps]
        write(f"    pcaps:    {', '.join(names) or '-'}{where} (timestamps: simulation ns)")
        write(f"    log:      {_short(artefacts.get('log'))}")


def _sim_counts(write, rows):
    blocks = defaultdict(lambda: [0, 0])
    for _, _, r in rows:
        blocks[r["block"]][0] += 1
        blocks[r["block"]][1] += r.get("cycles", 0)
    write(f"simulation runs ({len(rows)}; logs, pcaps and waveforms under build/<block>/<params>/<test>/)")
    for block, (runs, cycles) in sorted(blocks.items()):
        write(f"  {block:<24} {runs:>3} runs {cycles:>12,} cycles")


_UNUSED = []                                    # where UnusedElaboratable warnings of this session came from


def _record_unused(message):
    if message.category.__name__ == "UnusedElaboratable":
        _UNUSED.append(f"{_short(message.filename)}:{message.lineno}")


def pytest_warning_recorded(warning_message, nodeid):
    _record_unused(warning_message)


def pytest_testnodedown(node, error):
    _UNUSED.extend(getattr(node, "workeroutput", {}).get("innet_unused", []))


def pytest_sessionfinish(session, exitstatus):
    """An Amaranth elaboratable made but never elaborated fails the suite (such warnings went unread before).
    Amaranth warns when one is collected, often after its test: collect what is left, in every process."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    for message in caught:
        _record_unused(message)
    config = session.config
    if hasattr(config, "workerinput"):
        config.workeroutput["innet_unused"] = _UNUSED
        return
    if _UNUSED and exitstatus == pytest.ExitCode.OK:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"innet: {len(_UNUSED)} UnusedElaboratable warnings (made, never elaborated): "
                                f"{', '.join(sorted(set(_UNUSED)))}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    found = _innet(terminalreporter)
    write = terminalreporter.write_line
    if found:
        terminalreporter.section("innet")
    sims = [item for item in found if item[2].get("kind") == "sim"]
    if sims:
        (_sim_table if len(sims) <= SIM_TABLE_ROWS else _sim_counts)(write, sims)
    for _, _, r in (item for item in found if item[2].get("kind") == "scenario"):
        write(f"scenario {r['name']} (seed {r.get('seed', '-')}): {r['headline']}")
        if r.get("files"):
            write(f"    files: {', '.join(_short(f) for f in r['files'])}")
    formal = [item for item in found if item[2].get("kind") == "formal"]
    if formal:                                  # `make formal`: the table and every property; `make test`: the table
        formal_summary.report(write, formal, properties=not sims)
    seed = getattr(config, "innet_seed", None)
    if seed is None or not (sims or terminalreporter.stats.get("failed")):
        return
    write(f"innet: traffic seed {seed} ({_how_seeded()}); replay the run: INNET_SEED={seed} {replay_command(config)}")
    single = [nodeid for nodeid, _, _ in sims] if len(sims) <= SIM_TABLE_ROWS else []
    failed = [runner.plain_nodeid(r.nodeid) for r in terminalreporter.stats.get("failed", [])]
    for nodeid in single + [n for n in failed if n not in single]:
        write(f"  replay one test: INNET_SEED={seed} .venv/bin/python -m pytest '{nodeid}'")
