"""What the commands print: the rich console, table cells, the CollectStats table, sizes, error lines."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from vcollect.stats import CollectStats, SummaryStats


def make_console() -> Console:
    """Rich console on stdout; wide when not a terminal, so piped tables are not cut."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=160)


def print_error(prog: str, message: str, *, one_line: bool = True) -> None:
    """``PROG: error: MESSAGE`` on stderr; on one line unless ``one_line`` is False (an env's traceback)."""
    text = " ".join(message.split()) if one_line else message.rstrip()
    print(f"{prog}: error: {text}", file=sys.stderr)


def cell(value: Any) -> Text:
    """A table cell showing ``value`` literally (no rich markup)."""
    return Text(str(value))


def stats_table(stats: CollectStats, env: str = "", envs: str = "") -> Table:
    """A rich table of one CollectStats: counts, speed, and return/length mean/std/min/max."""
    table = Table(title="CollectStats")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    rows: list[tuple[str, str]] = [(name, value) for name, value in (("env", env), ("envs", envs)) if value]
    rows += [
        ("steps", f"{stats.n_collected_steps:,}"),
        ("episodes", f"{stats.n_collected_episodes:,}"),
        ("time (s)", f"{stats.collect_time:.3f}"),
        ("steps/s", f"{stats.collect_speed:,.0f}"),
    ]
    for name, summary in (("return", stats.returns_stat), ("length", stats.lens_stat)):
        rows += summary_rows(name, summary)
    for name, value in rows:
        table.add_row(name, cell(value))
    return table


def summary_rows(name: str, summary: SummaryStats | None) -> list[tuple[str, str]]:
    """(label, value) rows of a return or length summary: mean, std, min, max ('-' when there is none)."""
    if summary is None:
        return [(f"{name} {what}", "-") for what in ("mean", "std", "min", "max")]
    return [
        (f"{name} mean", f"{summary.mean:.2f}"),
        (f"{name} std", f"{summary.std:.2f}"),
        (f"{name} min", f"{summary.min:g}"),
        (f"{name} max", f"{summary.max:g}"),
    ]


def human_size(n_bytes: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"

