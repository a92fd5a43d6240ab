"""How the ``vcollect`` command ends: its exit statuses, and bad input (UsageError, or a command line
argparse refuses) reported on one line with status 2."""

from __future__ import annotations

import argparse

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A mistake in the command line or its inputs: reported on one line, exit status 2."""


class CommandParser(argparse.ArgumentParser):
    """argparse, but a parse error is one line on stderr (no usage block) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        text = " ".join(message.split())
        self.exit(EXIT_USAGE, f"{self.prog}: error: {text} (see '{self.prog} --help')\n")
