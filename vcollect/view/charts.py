"""Charts as inline SVG, drawn on the server: a histogram and a line chart of per-step values.

No script and no outside asset: each chart is one ``<svg>`` element a page embeds or serves, styled by its
own attributes (it looks the same as an ``<img>``, where no page style reaches it). Histogram bars carry
their bin and count as ``data-`` attributes and a ``<title>`` (the browser's tooltip).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np

__all__ = ["MAX_LINE_POINTS", "histogram_svg", "line_svg"]

#: The most points a line chart draws; longer series are thinned to evenly spaced steps (first and last kept).
MAX_LINE_POINTS = 2000

_WIDTH, _HEIGHT = 380, 190
_LEFT, _RIGHT, _TOP, _BOTTOM = 46, 12, 34, 34


def _number(value: float) -> str:
    """A short label for an axis value."""
    if not np.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e9:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _frame(title: str, xlabel: str, ylabel: str, css_class: str) -> list[str]:
    """The opening of a chart: the svg element, its title and axis labels."""
    return [
        f'<svg class="chart {css_class}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH} {_HEIGHT}" '
        f'width="{_WIDTH}" height="{_HEIGHT}" role="img" aria-label="{escape(title)}" '
        'font-family="system-ui, sans-serif" font-size="10" fill="#4a535c">',
        f'<rect x="0" y="0" width="{_WIDTH}" height="{_HEIGHT}" fill="#fafbfc" stroke="#e3e6ea"/>',
        f'<text class="title" x="{_WIDTH / 2}" y="15" text-anchor="middle" font-size="12" fill="#1d2125">'
        f"{escape(title)}</text>",
        f'<text class="label" x="{(_LEFT + _WIDTH - _RIGHT) / 2}" y="{_HEIGHT - 4}" '
        f'text-anchor="middle">{escape(xlabel)}</text>',
        f'<text class="label" x="10" y="{(_TOP + _HEIGHT - _BOTTOM) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 10 {(_TOP + _HEIGHT - _BOTTOM) / 2})">{escape(ylabel)}</text>',
    ]


def histogram_svg(values: Sequence[float] | np.ndarray, *, title: str, xlabel: str, bins: int = 30,
                  css_class: str = "histogram") -> str:
    """A histogram of ``values`` as an SVG element.

    Integer values spanning fewer than ``bins`` distinct numbers get one bin per integer, so a length
    histogram of short episodes shows each length apart.

    Args:
        values: The numbers to count (non-finite ones are left out).
        title: The chart's title.
        xlabel: The x axis' label.
        bins: The most bins.
        css_class: A class for the svg element (beside ``chart``), to tell charts apart.

    Returns:
        The ``<svg>`` markup; with no finite value, a chart that says so.
    """
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    data = data[np.isfinite(data)]
    parts = _frame(title, xlabel, "episodes", css_class)
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    if data.size == 0:
        parts.append(f'<text class="empty" x="{_WIDTH / 2}" y="{_HEIGHT / 2}" text-anchor="middle">no episodes</text>')
        return "\n".join(parts + ["</svg>"])
    lo, hi = float(data.min()), float(data.max())
    integral = bool(np.all(data == np.round(data)))
    if integral and hi - lo + 1 <= bins:
        edges = np.arange(lo, hi + 2, dtype=np.float64) - 0.5
    elif lo == hi:
        edges = np.array([lo - 0.5, hi + 0.5])
    else:
        edges = np.linspace(lo, hi, bins + 1)
    counts, edges = np.histogram(data, bins=edges)
    top = int(counts.max())
    bar_w = plot_w / len(counts)
    for i, count in enumerate(counts.tolist()):
        height = plot_h * count / top if top else 0.0
        x, y = _LEFT + i * bar_w, _TOP + plot_h - height
        left, right = float(edges[i]), float(edges[i + 1])
        span = _number(left + 0.5) if integral and right - left == 1.0 else f"{_number(left)} to {_number(right)}"
        parts.append(
            f'<rect class="bar" fill="#3f7fbf" x="{x:.2f}" y="{y:.2f}" width="{max(bar_w - 1, 0.5):.2f}" height="{height:.2f}" '
            f'data-count="{count}" data-low="{left!r}" data-high="{right!r}">'
            f"<title>{escape(span)}: {count:,} episode{'s' if count != 1 else ''}</title></rect>"
        )
    parts += [
        f'<line class="axis" stroke="gray" x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_LEFT + plot_w}" y2="{_TOP + plot_h}"/>',
        f'<text class="tick" x="{_LEFT}" y="{_TOP + plot_h + 12}" text-anchor="start">{escape(_number(lo))}</text>',
        f'<text class="tick" x="{_LEFT + plot_w}" y="{_TOP + plot_h + 12}" text-anchor="end">{escape(_number(hi))}</text>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + 8}" text-anchor="end">{top:,}</text>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + plot_h}" text-anchor="end">0</text>',
        "</svg>",
    ]
    return "\n".join(parts)


def _thinned(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) with at most MAX_LINE_POINTS points, evenly spaced, first and last kept."""
    steps = np.arange(values.shape[0])
    if values.shape[0] <= MAX_LINE_POINTS:
        return steps, values
    keep = np.unique(np.linspace(0, values.shape[0] - 1, MAX_LINE_POINTS).round().astype(np.int64))
    return steps[keep], values[keep]


def _polyline(steps: np.ndarray, values: np.ndarray, span: int, style: str) -> tuple[str, float, float]:
    """A polyline of ``values`` over ``span`` steps scaled to the plot; with its low and high value."""
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    lo, hi = float(values.min()), float(values.max())
    scale = hi - lo if hi > lo else 1.0
    xs = _LEFT + plot_w * steps / max(span - 1, 1)
    ys = _TOP + plot_h - plot_h * (values - lo) / scale - (plot_h / 2 if hi == lo else 0.0)
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs.tolist(), ys.tolist()))
    return f'<polyline {style} fill="none" points="{points}"/>', lo, hi


def line_svg(rewards: Sequence[float] | np.ndarray, *, title: str, css_class: str = "rewards") -> str:
    """An episode's reward per step (solid) and return so far (dashed, its own scale) as an SVG element.

    Args:
        rewards: The episode's rewards, one per step.
        title: The chart's title.
        css_class: A class for the svg element (beside ``chart``).

    Returns:
        The ``<svg>`` markup; the left axis labels the rewards' range, the right one the return's.
    """
    data = np.asarray(rewards, dtype=np.float64).reshape(-1)
    parts = _frame(title, "step", "reward", css_class)
    if data.size == 0 or not np.all(np.isfinite(data)):
        parts.append(f'<text class="empty" x="{_WIDTH / 2}" y="{_HEIGHT / 2}" text-anchor="middle">'
                     f"{'no steps' if data.size == 0 else 'rewards not finite'}</text>")
        return "\n".join(parts + ["</svg>"])
    plot_h = _HEIGHT - _TOP - _BOTTOM
    steps, thinned = _thinned(data)
    reward_line, r_lo, r_hi = _polyline(steps, thinned, data.size, 'class="reward" stroke="#3f7fbf" stroke-width="1.2"')
    csteps, cumulative = _thinned(np.cumsum(data))
    return_line, c_lo, c_hi = _polyline(
        csteps, cumulative, data.size, 'class="return" stroke="#d0702a" stroke-width="1" stroke-dasharray="4 3"')
    parts += [
        return_line,
        reward_line,
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + 8}" text-anchor="end">{escape(_number(r_hi))}</text>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + plot_h}" text-anchor="end">{escape(_number(r_lo))}</text>',
        f'<text class="tick return" fill="#d0702a" x="{_WIDTH - _RIGHT}" y="{_TOP - 6}" text-anchor="end">'
        f"return so far {escape(_number(c_lo))} to {escape(_number(c_hi))}</text>",
        f'<text class="tick" x="{_LEFT}" y="{_TOP + plot_h + 12}" text-anchor="start">0</text>',
        f'<text class="tick" x="{_WIDTH - _RIGHT}" y="{_TOP + plot_h + 12}" text-anchor="end">{data.size - 1:,}</text>',
        "</svg>",
    ]
    return "\n".join(parts)
