"""The docs are tested like code: the README is a front door that points to a specification page for
every block; no page names a path outside the repository; every generated section is what its command
writes now; every counter of a block's model is on its page; the wire constants the pages quote are the
code's; every tool a page names inline has a command in a ```sh block (which ``test_readme`` runs)."""
import re
from pathlib import Path

import pytest

from models import wire
from registry import BLOCKS, ROOT
from testbenches.test_readme import PAGES, README, doc_commands, hand_written
from tools import proofs, scenario_table, sections
from tools.blocks import readme_table

pytestmark = pytest.mark.xdist_group("docs")

BLOCK_PAGES = sorted({b.doc for b in BLOCKS.values()})


def test_readme_is_a_front_door():
    text = README.read_text()
    assert len(text) <= 15_000, f"README.md is {len(text)} characters: move detail to docs/"
    assert len(text.splitlines()) <= 200, f"README.md is {len(text.splitlines())} lines"
    for page in ["docs/commands.md", "docs/verification.md", "docs/scenarios.md", "docs/adding-a-block.md",
                 *BLOCK_PAGES]:
        assert f"]({page})" in text, f"README.md does not link {page}"


def test_block_table_current():
    assert sections.body(README, "blocks") == readme_table(), \
        "README block table is stale: run `python -m tools.blocks --readme`"


def test_every_block_has_a_page():
    for b in BLOCKS.values():
        assert b.doc and (ROOT / b.doc).exists(), f"{b.name}: registry doc= names no page ({b.doc!r})"
        text = (ROOT / b.doc).read_text()
        assert f"`{b.name}`" in text, f"{b.doc} does not name its block {b.name}"
        if b.formal:
            sections.body(ROOT / b.doc, f"proofs:{b.name}")     # ValueError without its proofs section


#: Markdown links and inline code that look like paths.
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")


def test_paths_stay_inside_the_repository():
    """No page links or names a path outside the repository (a clone has no ``../shared``)."""
    for page in PAGES:
        text = page.read_text()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+://", target):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.is_relative_to(ROOT), f"{page.name} links {target}, outside the repository"
            assert path.exists(), f"{page.name} links {target}, which does not exist"
        for code in CODE.findall(text):
            assert "../" not in code and not re.search(r"(^|\s)/(work|home|root|tmp)/", code), \
                f"{page.name} names {code!r}, outside the repository"
        assert "SPEC.md" not in text and "../shared" not in text, f"{page.name} points to the old external SPEC"


@pytest.mark.parametrize("name", [name for name, b in BLOCKS.items() if b.doc])
def test_page_names_every_counter(name):
    """The block's page names every counter its model counts: by name, or a stage's counters by their
    prefix (``agg_*``, ``node_<name>``)."""
    b = BLOCKS[name]
    text = (ROOT / b.doc).read_text()
    missing = [c for c in b.model(b.params()).counters() if f"`{c}`" not in text
               and not any(f"`{c.split('_', 1)[0]}_{rest}`" in text for rest in ("*", "<name>"))]
    assert not missing, f"{b.doc} does not name the counters {missing} of {name}"


def test_proofs_totals_current():
    assert sections.body(ROOT / "docs/verification.md", "proofs") == proofs.totals(), \
        "docs/verification.md's proof totals are not the sum of the block pages': run `python -m tools.proofs --docs`"


def test_scenario_rows_present():
    documented = [scenario_table.documented(name) for name in scenario_table.SUMMARIES]
    assert all(documented), "docs/scenarios.md lacks a row: make scenarios, then python -m tools.scenario_table --docs"


#: (pattern, the constant the docs must quote) for the wire constants the pages name.
QUOTED = [(r"EtherType (0x[0-9A-Fa-f]+)", wire.ETHERTYPE_SPILL),
          (r"(\d+)-byte spill header", wire.SPILL_HEADER_BYTES),
          (r"INA on UDP (\d+)|UDP to port (\d+)", wire.INA_PORT),
          (r"DBLP on UDP (\d+)|destination port (\d+)", wire.DBLP_PORT),
          (r"UDP port (\d+)\)", wire.ROCEV2_PORT)]


def test_quoted_wire_constants():
    found = 0
    for page in PAGES:
        text = page.read_text()
        for pattern, value in QUOTED:
            for match in re.finditer(pattern, text):
                quoted = next(g for g in match.groups() if g)
                assert int(quoted, 0) == value, f"{page.name}: {match[0]!r}, the code says {value:#x}/{value}"
                found += 1
    assert found >= len(QUOTED), "the pages no longer quote the wire constants this test checks"


def _tool(command):
    """``make <target>`` or ``python -m <module>`` of a command line (the venv prefix dropped), or None."""
    words = command.replace(".venv/bin/python", "python").split()
    words = [w for w in words if "=" not in w or w.startswith("-")]        # environment assignments
    if words[:1] == ["make"] and len(words) > 1:
        return f"make {words[1]}"
    if words[:2] == ["python", "-m"] and len(words) > 2:
        return f"python -m {words[2]}"
    return None


def test_inline_commands_have_a_smoke_form():
    """A command named in a page's text (inline code) runs a tool that a ```sh block documents, so
    test_readme runs it."""
    documented = {_tool(c) for c in doc_commands()}
    for page in PAGES:
        for code in CODE.findall(hand_written(page.read_text())):
            tool = _tool(code)
            assert tool is None or tool in documented, f"{page.name}: `{code}` has no ```sh command (and smoke form)"


def test_docs_listed():
    """Every page under docs/ is reachable from the README (directly or from a page it links)."""
    reachable, todo = set(), [README]
    while todo:
        page = todo.pop()
        for target in LINK.findall(page.read_text()):
            path = (page.parent / target.split("#")[0]).resolve()
            if path.suffix == ".md" and path.is_relative_to(ROOT) and path not in reachable:
                reachable.add(path)
                todo.append(path)
    unreachable = [p.relative_to(ROOT) for p in PAGES[1:] if p.resolve() not in reachable]
    assert not unreachable, f"pages no link leads to: {unreachable}"
    assert Path(ROOT / "docs" / "spill_drain.svg").exists()
