"""The block registry matches the tree: one name everywhere (module paths, testbench, proofs), every
Component is registered or a part of a registered one, every model speaks the contract and is independent
of the RTL, every parameters class names the parameter it rejects."""
import ast
import dataclasses
from pathlib import Path

import pytest
from amaranth._unused import MustUse
from amaranth.lib import wiring

from models.contract import kind_of
from models.params import Params
from registry import BLOCKS, ROOT

#: Modules of hdl/ that blocks share (not blocks themselves).
SHARED = {"__init__", "packet", "headers", "parse", "axis", "port_registers"}


@pytest.mark.parametrize("name", BLOCKS)
def test_one_name_everywhere(name):
    """The registry key is the module path of the Component and of the model; the testbench and the
    proofs carry it too; the files exist."""
    block = BLOCKS[name]
    missing = [f for f in block.files() if not (ROOT / f).is_file()]
    assert not missing, f"{name}: registered files missing: {missing}"
    assert block.component.__module__ == f"hdl.{name}", f"{block.component.__name__} is in {block.component.__module__}"
    assert block.model.__module__ == f"models.{name}", f"{block.model.__name__} is in {block.model.__module__}"
    assert issubclass(block.component, wiring.Component)
    assert issubclass(block.params, Params), f"{block.params.__name__} is not a models.params.Params"
    kind_of(block.model(block.params()))


def test_every_component_registered():
    """Every module of hdl/ is a block's, a part of one (imported by a registered block's module) or shared."""
    registered = {b.component.__module__ for b in BLOCKS.values()}
    parts = {m for b in BLOCKS.values() for m in _imports(ROOT / b.files()[0]) if m.startswith("hdl.")}
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "hdl").rglob("*.py")}
    stray = {m for m in modules if m.rsplit(".", 1)[-1] not in SHARED} - registered - parts
    assert not stray, f"hdl/ modules neither registered nor part of a registered block: {sorted(stray)}"


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


@pytest.mark.parametrize("path", sorted((ROOT / "models").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_model_imports_no_hdl(path):
    bad = [m for m in _imports(path) if m == "hdl" or m.startswith("hdl.")]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: golden models must not depend on the RTL"


def _bad_values(f):
    """(bad value, expected exception) pairs for parameter field ``f``."""
    meta, kind = f.metadata, f.metadata["kind"]
    if issubclass(kind, Params):
        return [(1, TypeError)]
    wrong_type = [("1", TypeError)] if kind is not str else [(1, TypeError)]
    if kind is bool:
        return wrong_type
    bad = []
    if meta["choices"] is not None:
        bad.append(("no such choice" if kind is str else max(meta["choices"]) + 1, ValueError))
    if meta["lo"] is not None:
        bad.append((meta["lo"] - 1, ValueError))
    if meta["hi"] is not None:
        bad.append((meta["hi"] + 1, ValueError))
    if meta["pow2"]:
        bad.append((3, ValueError))
    return wrong_type + bad


@pytest.mark.parametrize("name", BLOCKS)
def test_params_reject_bad_values(name):
    cls = BLOCKS[name].params
    cls()                                   # the defaults are valid
    for f in dataclasses.fields(cls):
        for value, error in _bad_values(f):
            with pytest.raises(error) as caught:
                cls(**{f.name: value})
            assert f"{cls.__name__}.{f.name}" in str(caught.value), \
                f"{cls.__name__}({f.name}={value!r}) raised without naming the parameter: {caught.value}"


def test_registry_doc_names_files():
    """registry.Block.files() is the layout docs/adding-a-block.md describes."""
    page = Path(ROOT / "docs" / "adding-a-block.md").read_text()
    for pattern in ("hdl/<name>.py", "models/<name>.py", "testbenches/test_<name>.py", "formal/test_<name>.py"):
        assert pattern in page, f"docs/adding-a-block.md does not mention {pattern}"


def _elaboratables(value, seen=None):
    """Every Amaranth elaboratable reachable from ``value`` through attributes, lists and dicts."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, MustUse):
        return [value] + [e for child in vars(value).values() for e in _elaboratables(child, seen)]
    if isinstance(value, (list, tuple, dict)):
        return [e for child in (value.values() if isinstance(value, dict) else value)
                for e in _elaboratables(child, seen)]
    return []


def test_interface_leaves_nothing_unused():
    """``Block.interface`` (a Component for its ports and shapes, never elaborated) marks it and what it
    made used: the soak's parameters and the testbenches built one per block and Amaranth warned that
    it was never used (UnusedElaboratable)."""
    for b in BLOCKS.values():
        made = _elaboratables(b.build())
        assert any(not e._MustUse__used for e in made), f"{b.name}: build() leaves it to be used"
        for e in made:                  # (this one is not used either: no warning of it)
            e._MustUse__used = True
        unused = [e for e in _elaboratables(b.interface()) if not e._MustUse__used]
        assert not unused, f"{b.name}: {unused}"
