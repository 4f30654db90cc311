"""Line charts as inline SVG, drawn here from numbers (no script, nothing fetched): each
series a polyline scaled into the plot area, the y axis from 0 to a rounded maximum, the
first and last sample times on the x axis; series may have points at different times. Labels are escaped; colours come from the CSS
classes `series-0`, `series-1`, ..."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28
SERIES = 6  # lines drawn at most (the CSS colours series-0 to series-5)


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above `value` (at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def _label(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def line_chart(series: list[tuple[str, list[tuple[int, float]]]], unit: str, title: str) -> Markup:
    """An SVG of `series`: each a name and its (time in ms since the epoch, value) points."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>',
    ]
    times = sorted({t for _, points in series for t, _ in points})
    if len(times) < 2:
        parts.append(
            f'<text class="empty" x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" '
            'text-anchor="middle">collecting samples...</text></svg>'
        )
        return Markup("".join(parts))
    top = nice_max(max((v for _, points in series for _, v in points), default=0.0))
    t0, t1 = times[0], times[-1]
    for i, (_name, points) in enumerate(series[:SERIES]):
        xy = " ".join(
            f"{LEFT + (t - t0) / (t1 - t0) * plot_w:.1f},{TOP + plot_h - v / top * plot_h:.1f}"
            for t, v in points
        )
        parts.append(f'<polyline class="series-{i}" fill="none" points="{xy}"/>')
    parts += [
        f'<text class="axis" x="{LEFT - 4}" y="{TOP + 10}" text-anchor="end">{escape(_label(top))}</text>',
        f'<text class="axis" x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>',
        f'<text class="axis" x="{LEFT - 4}" y="{TOP + plot_h / 2}" text-anchor="end">{escape(unit)}</text>',
        f'<text class="axis" x="{LEFT}" y="{HEIGHT - 8}">{_clock(t0)}</text>',
        f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" text-anchor="end">{_clock(t1)}</text>',
    ]
    for i, (name, _) in enumerate(series[:SERIES]):
        x, y = LEFT + 8 + (i % 3) * 180, TOP + 6 + (i // 3) * 14
        parts.append(
            f'<rect class="key series-{i}" x="{x}" y="{y}" width="10" height="3"/>'
            f'<text class="legend" x="{x + 14}" y="{y + 5}">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
