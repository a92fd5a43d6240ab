"""The documentation site's generated parts: the command-line reference covers the whole parser, and the API
reference renders every public package (the strict build itself runs in `make docs`, part of `make test`)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys

from tests.doc_blocks import REPO
from vcollect.cli import build_parser

DOCS = REPO / "docs"


def load_hook() -> object:
    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "hooks" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cli_reference", module)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_names_every_command_and_option_with_its_help() -> None:
    hook = load_hook()
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    rendered = hook.on_page_markdown(page)  # type: ignore[attr-defined]
    assert hook.MARKER in page and hook.MARKER not in rendered  # type: ignore[attr-defined]
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        assert f"### `vcollect {name}`" in rendered, name
        for action in sub._actions:
            if action.help in (None, argparse.SUPPRESS) or isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert re.search(rf"`{re.escape(flag)}\b", rendered), (name, flag)
            first_words = " ".join(action.help.split()[:4]).split("%")[0].replace("|", "\\|")
            assert first_words in " ".join(rendered.split()), (name, action.dest)


def test_every_public_package_has_an_api_page() -> None:
    pages = " ".join(path.read_text(encoding="utf-8") for path in (DOCS / "api").glob("*.md"))
    for package in ("vcollect", "vcollect.envs", "vcollect.policies", "vcollect.buffers", "vcollect.store",
                    "vcollect.minari", "vcollect.distributed", "vcollect.errors"):
        assert re.search(rf"^::: {re.escape(package)}$", pages, re.M), package
    packages = {p.parent.name for p in (REPO / "vcollect").glob("*/__init__.py")}
    # the collectors' parts (users import the collectors), the command, and the page the command serves (users run
    # `vcollect view`: it is documented with the commands and in the viewing-data story; nothing in it is imported)
    internal = {"collecting", "cli", "view"}
    for name in packages - internal:
        assert re.search(rf"^::: vcollect\.{name}$", pages, re.M), name
