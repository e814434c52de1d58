"""The registered blocks (``registry.BLOCKS``): name, title, specification page and files.

    python -m tools.blocks            # list them
    python -m tools.blocks --readme   # rewrite the README's block table from the registry
    python -m tools.blocks --check a b   # their testbenches; one line and a failure unless every name is a block

The README's table sits between the markers ``<!-- blocks -->`` and ``<!-- /blocks -->``;
``testbenches/test_docs.py`` fails when it differs from ``readme_table()``.
"""
from pathlib import Path

from registry import BLOCKS, block
from tools import sections
from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def title(doc):
    """The name a docs page gives itself: its first heading up to a colon (the file name without one)."""
    path = ROOT / doc
    lines = path.read_text().splitlines() if path.exists() else []
    heading = next((line for line in lines if line.startswith("# ")), "")
    return heading[2:].split(":")[0].strip() or path.stem


def readme_table():
    """The README's block table (Markdown) generated from the registry."""
    lines = ["| block | what it is | specification | RTL | golden model | tests | proofs |",
             "|---|---|---|---|---|---|---|"]
    for b in BLOCKS.values():
        page = f"[{title(b.doc)}]({b.doc})" if b.doc else "—"
        hdl, model = b.files()[:2]
        proofs = f"`{b.proofs()}`" if b.formal else "—"
        lines.append(f"| `{b.name}` | {b.title} | {page} | `{hdl}` | `{model}` ({getattr(b.model, 'KIND', '-')}) "
                     f"| `{b.testbench()}` | {proofs} |")
    return "\n".join(lines)


def rewrite(path=README):
    """Replace the block table of ``path``; return whether it changed."""
    return sections.rewrite(path, "blocks", readme_table())


def main(argv=None):
    parser = Parser(prog="blocks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", action="store_true", help="rewrite the README's block table")
    parser.add_argument("--check", nargs="*", metavar="NAME",
                        help="print the testbench of each of these blocks; fail unless they are all registered")
    args = parser.parse_args(argv)
    if args.check is not None:
        paths = [block(name).testbench() for name in args.check]     # KeyError naming the known blocks
        print(" ".join(paths))
        return
    if args.readme:
        print(f"{README}: {'block table updated' if rewrite() else 'block table up to date'}")
        return
    width = max(map(len, BLOCKS)) + 2
    for b in BLOCKS.values():
        print(f"{b.name:<{width}}{b.title}")
        print(f"{'':<{width + 4}}{'  '.join(b.files())}")


if __name__ == "__main__":
    run("blocks", main)
