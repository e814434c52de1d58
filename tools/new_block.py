"""Scaffold a new block: ``python -m tools.new_block NAME [--title TEXT]`` (``make new-block NAME=...``).

Writes the four files of a working block from ``tools/scaffold/``: the Component (a packet stream through
an output register, counting the packets that leave), its golden model (cycle-accurate, the model
contract), a lockstep random test and a proof with one real property; and registers it in
``registry.py``. ``NAME`` is the block's module path: ``my_block``, or ``family.member`` for a member of
a family (``hdl/family/member.py``). Every service then takes the block with no other edit: ``make test``
runs its tests and proof, the soak sends it 1e5 packets, ``make bench``, ``make mutants BLOCK=NAME``,
``make verilog`` and ``make report`` include it. See docs/adding-a-block.md.
"""
import re
import subprocess
import sys
from pathlib import Path

from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tools" / "scaffold"
#: A registry key: snake_case module names, dotted for a family's member.
NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?")


def files_of(name):
    """``{template: destination}`` of block ``name``, relative to the repository."""
    head, _, stem = name.rpartition(".")
    where = f"{head}/" if head else ""
    path = name.replace(".", "/")
    return {"hdl.py.tmpl": f"hdl/{path}.py", "model.py.tmpl": f"models/{path}.py",
            "testbench.py.tmpl": f"testbenches/{where}test_{stem}.py", "proof.py.tmpl": f"formal/{where}test_{stem}.py"}


def scaffold(name, title=None, root=ROOT):
    """Write block ``name``'s files under ``root``, register it and put it in the README's block table;
    returns the files written."""
    if not NAME.fullmatch(name):
        raise ValueError(f"NAME {name!r}: a snake_case module name, or family.member (e.g. my_counter)")
    registry = root / "registry.py"
    text = registry.read_text()
    if f'Block("{name}",' in text:
        raise ValueError(f"NAME {name!r}: already registered in registry.py")
    files = files_of(name)
    taken = [f for f in files.values() if (root / f).exists()]
    if taken:
        raise ValueError(f"NAME {name!r}: {', '.join(taken)} already exist")
    stem = name.rpartition(".")[2]
    cls = "".join(part.capitalize() for part in stem.split("_"))
    values = {"name": name, "path": name, "stem": stem, "Class": cls, "Title": title or cls}
    for template, dest in files.items():
        target = root / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        for package in Path(dest).parents:
            if len(package.parts) > 1 and not (root / package / "__init__.py").exists():
                (root / package / "__init__.py").write_text("")
        target.write_text((TEMPLATES / template).read_text().format(**values))
    imports = f"from hdl.{name} import {cls}\nfrom models.{name} import {cls}Model, {cls}Params\n"
    entry = f'    Block("{name}", {cls}, {cls}Params, {cls}Model, "{title or cls}"),\n'
    head, marker, tail = text.partition("\n__all__")
    body, end, rest = tail.rpartition("\n]}\n")
    if not marker or not end:
        raise ValueError("registry.py: cannot find its __all__ line and the end of BLOCKS (`]}`) to register the block")
    registry.write_text(f"{head.rstrip()}\n{imports}{marker}{body}\n{entry.rstrip()}{end}{rest}")
    written = [str(root / f) for f in files.values()]
    subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", "--select", "I", "-q", str(registry), *written],
                   cwd=root, check=True)
    subprocess.run([sys.executable, "-m", "tools.blocks", "--readme"], cwd=root, check=True, capture_output=True)
    return list(files.values())


def main(argv=None):
    parser = Parser(prog="new_block", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the block's module path (my_block, or family.member)")
    parser.add_argument("--title", default=None, help="what the block is, for tables (default: its class name)")
    args = parser.parse_args(argv)
    for path in scaffold(args.name, args.title):
        print(f"written {path}")
    print(f"registered {args.name} in registry.py; next: make test BLOCK={args.name}"
          " (see docs/adding-a-block.md)")


if __name__ == "__main__":
    run("new_block", main)
