"""Generated sections of the Markdown docs: the text between ``<!-- name -->`` and ``<!-- /name -->``.

A command writes each section from its source (the registry, the proofs' results, a run's CSVs);
the tests compare a section with what its command would write now, so a stale one fails the suite.
"""
from pathlib import Path

__all__ = ["split", "body", "rewrite"]


def _markers(name):
    return f"<!-- {name} -->", f"<!-- /{name} -->"


def split(text, name, where="the text"):
    """``(head, body, tail)`` of ``text`` around section ``name`` (markers kept in head and tail);
    ``ValueError`` unless it holds exactly one such section."""
    begin, end = _markers(name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{where} needs one {begin} ... {end} pair")
    head, rest = text.split(begin)
    inside, tail = rest.split(end)
    return head + begin, inside.strip("\n"), end + tail


def body(path, name):
    """The text of section ``name`` of the file ``path``."""
    return split(Path(path).read_text(), name, path)[1]


def rewrite(path, name, text):
    """Put ``text`` into section ``name`` of the file ``path``; return whether the file changed."""
    path = Path(path)
    old = path.read_text()
    head, _, tail = split(old, name, path)
    new = f"{head}\n{text.strip(chr(10))}\n{tail}"
    if new != old:
        path.write_text(new)
    return new != old
