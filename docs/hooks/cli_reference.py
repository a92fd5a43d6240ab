"""MkDocs hook: the command-line reference, generated from the ``vcollect`` command's own argparse parser.

A page holding the marker ``<!-- cli-reference -->`` gets, in its place, one section per command: its
description, its usage line and a table of its arguments (flags, what they take, their help text with
defaults filled in). Nothing is copied by hand, so the page says what the parser of this checkout says.
"""

from __future__ import annotations

import argparse
from typing import Any

from vcollect.cli import build_parser

MARKER = "<!-- cli-reference -->"


def cell(text: str) -> str:
    """``text`` as one Markdown table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def help_text(action: argparse.Action, prog: str) -> str:
    """An action's help with argparse's ``%(...)s`` fields filled in, as ``--help`` prints it."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    fields: dict[str, Any] = {**vars(action), "prog": prog}
    if action.choices is not None:
        fields["choices"] = ", ".join(map(str, action.choices))
    return action.help % fields


def argument_name(action: argparse.Action) -> str:
    """How the argument is written on the command line: ``--flag VALUE`` / ``-f``, or the positional's name."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        metavar = action.metavar or action.dest.upper()
        if action.choices is not None and action.metavar is None:
            metavar = "{" + ",".join(map(str, action.choices)) + "}"
        value = f" {metavar}" if isinstance(metavar, str) else ""
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    """The Markdown table of a parser's arguments (none for a parser without any but ``--help``)."""
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        rows.append(f"| {cell(argument_name(action))} | {cell(help_text(action, parser.prog))} |")
    if not rows:
        return []
    return ["| argument | what it does |", "| --- | --- |", *rows, ""]


def usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage line as ``--help`` prints it, without the ``usage:`` prefix."""
    return " ".join(parser.format_usage().split()).removeprefix("usage: ")


def reference() -> str:
    """The whole command-line reference in Markdown: the top-level command, then each command."""
    parser = build_parser()
    lines = [
        "### `vcollect`",
        "",
        parser.description or "",
        "",
        "```text",
        usage(parser),
        "```",
        "",
        *arguments_table(parser),
        parser.epilog or "",
        "",
    ]
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help or "" for choice in commands._choices_actions}
    for name, sub in commands.choices.items():
        lines += [f"### `vcollect {name}`", "", sub.description or helps.get(name, ""), ""]
        lines += ["```text", usage(sub), "```", ""]
        lines += arguments_table(sub)
        if sub.epilog:
            lines += [sub.epilog, ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs' page hook: put the generated reference where a page holds the marker."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())
