"""The block registry matches the tree: files exist, every Component is registered, models are
independent of the RTL, every parameters class names the parameter it rejects."""
import ast
import dataclasses
from pathlib import Path

import pytest
from amaranth._unused import MustUse

from models.params import Params
from registry import BLOCKS, ROOT

#: Modules of hdl/ that blocks share (not blocks themselves).
SHARED = {"__init__", "packet", "headers", "parse", "axis"}


@pytest.mark.parametrize("name", BLOCKS)
def test_block_files_exist(name):
    block = BLOCKS[name]
    missing = [f for f in block.files() if not (ROOT / f).is_file()]
    assert not missing, f"{name}: registered files missing: {missing}"
    assert block.component_cls.__name__ == block.component
    assert issubclass(block.params_cls, Params), f"{block.params} is not a models.params.Params"
    assert block.model_cls.__name__ == block.model


def test_every_component_registered():
    files = {p.stem for p in (ROOT / "hdl").glob("*.py")} - SHARED
    assert not files - set(BLOCKS), (f"hdl/ modules not in registry.BLOCKS: {sorted(files - set(BLOCKS))} "
                                     "(register them, or list shared modules in SHARED)")


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


@pytest.mark.parametrize("path", sorted((ROOT / "models").glob("*.py")), ids=lambda p: p.name)
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
    cls = BLOCKS[name].params_cls
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
