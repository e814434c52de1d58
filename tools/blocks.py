"""The registered blocks (``registry.BLOCKS``): name, title, SPEC section and files.

    python -m tools.blocks            # list them
    python -m tools.blocks --readme   # rewrite the README's block table from the registry
    python -m tools.blocks --check a b   # fail with one line unless every name is a registered block

The README's table sits between the markers ``<!-- blocks -->`` and ``<!-- /blocks -->``;
``testbenches/test_readme.py`` fails when it differs from ``readme_table()``.
"""
from pathlib import Path

from registry import BLOCKS, block
from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN, END = "<!-- blocks -->", "<!-- /blocks -->"


def readme_table():
    """The README's block table (Markdown) generated from the registry."""
    lines = ["| block | RTL | parameters, golden model | tests | proofs |", "|---|---|---|---|---|"]
    for b in BLOCKS.values():
        title = f"{b.title} (SPEC {b.spec})" if b.spec else b.title
        proofs = f"`formal/test_{b.name}.py`" if b.formal else "—"
        lines.append(f"| `{b.name}`: {title} | `hdl/{b.name}.py` `{b.component}` | `models/{b.name}.py` "
                     f"`{b.params}`, `{b.model}` | `testbenches/test_{b.name}.py` | {proofs} |")
    return "\n".join(lines)


def split(text):
    """``(before, table, after)`` of the README text around the markers; ``ValueError`` without them."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"README.md needs one {BEGIN} ... {END} pair around the block table")
    head, rest = text.split(BEGIN)
    table, tail = rest.split(END)
    return head + BEGIN, table.strip("\n"), END + tail


def rewrite(path=README):
    """Replace the table between the markers of ``path``; return whether it changed."""
    text = path.read_text()
    head, _, tail = split(text)
    new = f"{head}\n{readme_table()}\n{tail}"
    if new != text:
        path.write_text(new)
    return new != text


def main(argv=None):
    parser = Parser(prog="blocks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", action="store_true", help="rewrite the README's block table")
    parser.add_argument("--check", nargs="*", metavar="NAME", help="check that these are registered blocks")
    args = parser.parse_args(argv)
    if args.check is not None:
        for name in args.check:
            block(name)         # KeyError naming the known blocks
        return
    if args.readme:
        print(f"{README}: {'block table updated' if rewrite() else 'block table up to date'}")
        return
    width = max(map(len, BLOCKS)) + 2
    for b in BLOCKS.values():
        print(f"{b.name:<{width}}{b.spec or '-':<4}{b.title}")
        print(f"{'':<{width + 4}}{'  '.join(b.files())}")


if __name__ == "__main__":
    run("blocks", main)
