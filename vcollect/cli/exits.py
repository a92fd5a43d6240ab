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


def flag_wording(message: str, args: argparse.Namespace) -> str:
    """A library error's ``message`` as the command should say it: the Python parameters it tells the caller
    to pass (``root=``, ``overwrite=True``) replaced by this command's flags, or by what to do where the
    command has no such flag (``args`` holds an attribute per option of the command)."""
    from vcollect.store.layout.dataset_info import ROOT_HINT
    from vcollect.store.write.shard_commits import FLUSH_AGAIN_HINT
    from vcollect.store.write.writer import APPEND_HINT, OVERWRITE_HINT

    if hasattr(args, "overwrite") and hasattr(args, "append"):
        replace = "pass --overwrite to replace it or --append to add to it"
    elif hasattr(args, "overwrite"):
        replace = "pass --overwrite to replace it"
    else:
        replace = "delete it first or pick another id"
    message = message.replace(f"{OVERWRITE_HINT} or {APPEND_HINT}", replace).replace(OVERWRITE_HINT, replace)
    message = message.replace(
        FLUSH_AGAIN_HINT, "free space and run the command again (episodes this run had not committed are lost)"
    )
    return message.replace(ROOT_HINT, "pass --root DIR or set $VCOLLECT_DATASETS_PATH; 'vcollect list' shows what exists")
