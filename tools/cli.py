"""What every ``tools.*`` CLI shares: bad input ends it with one line on stderr and a non-zero exit.

``run("waves", main)`` calls ``main()`` and turns the errors bad input raises (``ValueError``,
``TypeError``, ``KeyError``, ``OSError``, a failed tool run, a missing tool) into
``sys.exit("waves: <message>")``; anything else is a bug and keeps its traceback. ``Parser`` is an
``argparse.ArgumentParser`` whose usage errors are one line too.
"""
import argparse
import os
import subprocess
import sys

__all__ = ["Parser", "run", "integer"]

#: Errors that mean bad input or a broken installation, not a bug in the tool.
ERRORS = (ValueError, TypeError, KeyError, OSError, subprocess.CalledProcessError)


def message(error):
    """One line for ``error``: its text, the failed command of a tool run."""
    if isinstance(error, subprocess.CalledProcessError):
        command = error.cmd if isinstance(error.cmd, str) else " ".join(map(str, error.cmd))
        text = f"{command.split()[0]} exited with status {error.returncode}"
    elif isinstance(error, OSError) and error.filename:
        text = f"{error.filename}: {error.strerror or error}"
    elif isinstance(error, KeyError) and error.args:
        text = str(error.args[0])      # str(KeyError) adds quotes
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


def run(tool, main, *args):
    """``main(*args)``; bad input or a missing tool exits with ``<tool>: <message>``."""
    try:
        return main(*args)
    except BrokenPipeError:            # the reader (``| head``) is gone: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except ERRORS as error:
        sys.exit(f"{tool}: {message(error)}")
    except RuntimeError as error:
        # ToolMissing of testbenches.runner / formal.runner (matched by name: importing those
        # runners would load Amaranth into every CLI).
        if type(error).__name__ != "ToolMissing":
            raise
        sys.exit(f"{tool}: {message(error)}")
    except KeyboardInterrupt:
        sys.exit(130)


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` that reports a usage error in one line (``<tool>: <error> (see --help)``)."""

    def error(self, text):
        sys.exit(f"{self.prog}: {text} (see --help)")


def integer(lo=None, hi=None):
    """argparse type: an integer in ``lo..hi`` (either end open when None)."""
    def convert(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            allowed = f"at least {lo}" if hi is None else f"in {'' if lo is None else lo}..{hi}"
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {value}")
        return value
    return convert
