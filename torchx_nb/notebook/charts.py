"""Line charts as plain SVG (no plotting library in the kernel): labelled axes with ticks, one
colour per series and a legend. Axes and text are drawn in ``currentColor`` on a transparent
ground, so a chart follows JupyterLab's light or dark theme, on GitHub and nbviewer too."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

COLOURS = [
    "#2f81f7",
    "#e5534b",
    "#3fb950",
    "#a371f7",
    "#d29922",
    "#39c5cf",
    "#db61a2",
    "#8b949e",
]
MAX_POINTS = 400
Series = Sequence[tuple[float, float]]


def colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values spanning ``low``..``high`` (1, 2 or 5 times a power
    of ten apart)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high == low:
        return [low]
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    ticks: list[float] = []
    value = first
    while value <= high + step * 1e-9 and len(ticks) < 20:
        ticks.append(round(value, 12))
        value += step
    return ticks


def fmt_tick(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.0e}"
    return f"{value:.4g}"


def _thin(points: Series) -> list[tuple[float, float]]:
    """At most MAX_POINTS points, evenly picked, the last always kept."""
    pts = list(points)
    if len(pts) <= MAX_POINTS:
        return pts
    stride = len(pts) / MAX_POINTS
    return [pts[int(j * stride)] for j in range(MAX_POINTS - 1)] + [pts[-1]]


def _tick(
    line: tuple[float, float, float, float],
    opacity: float,
    at: tuple[float, float],
    anchor: str,
    value: float,
) -> str:
    """One axis tick: its line and, at ``at``, its value."""
    x1, y1, x2, y2 = line
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
        f' stroke="currentColor" stroke-opacity="{opacity}"/>'
        f'<text x="{at[0]:.1f}" y="{at[1]:.1f}" text-anchor="{anchor}" fill="currentColor"'
        f' fill-opacity="0.75">{fmt_tick(value)}</text>'
    )


def line_chart(
    series: Mapping[str, Series],
    y_label: str,
    x_label: str = "step",
    width: int = 360,
    height: int = 190,
    legend: bool | None = None,
) -> str:
    """An SVG chart of every series (label → (x, y) points) with axes, ticks and, for more
    than one series (or when asked), a legend below it. Labels are escaped."""
    drawn = {name: _thin(pts) for name, pts in series.items() if pts}
    left, right, top, bottom = 52, 10, 8, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for pts in drawn.values() for x, _ in pts]
    ys = [y for pts in drawn.values() for _, y in pts]
    parts = [
        f'<svg class="torchx-nb-chart" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(y_label)}"'
        ' style="color:inherit;background:transparent;overflow:visible;font-size:10px">'
    ]
    if xs:
        x0, x1 = min(xs), max(xs)
        y0, y1 = min(ys), max(ys)
        if x1 == x0:
            x0, x1 = x0 - 1, x1 + 1
        if y1 == y0:
            pad = abs(y0) * 0.1 or 1.0
            y0, y1 = y0 - pad, y1 + pad

        def px(x: float) -> float:
            return left + (x - x0) / (x1 - x0) * plot_w

        def py(y: float) -> float:
            return top + plot_h - (y - y0) / (y1 - y0) * plot_h

        bottom = top + plot_h
        for t in nice_ticks(y0, y1):  # a grid line across the plot, its value on the left
            y = py(t)
            parts.append(_tick((left, y, left + plot_w, y), 0.12, (left - 4, y + 3), "end", t))
        for t in nice_ticks(x0, x1):  # a short mark under the plot, its value below it
            x = px(t)
            parts.append(_tick((x, bottom, x, bottom + 4), 0.6, (x, bottom + 14), "middle", t))
        for _i, (name, pts) in enumerate(drawn.items()):
            coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            parts.append(
                f'<polyline fill="none" stroke="{colour(list(series).index(name))}"'
                f' stroke-width="1.6" points="{coords}"><title>{html.escape(name)}</title>'
                "</polyline>"
            )
    else:
        parts.append(
            f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle"'
            ' fill="currentColor" fill-opacity="0.6">no points yet</text>'
        )
    parts.append(
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="currentColor"'
        ' stroke-opacity="0.6"/>'
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"'
        ' stroke="currentColor" stroke-opacity="0.6"/>'
        f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle"'
        f' fill="currentColor">{html.escape(x_label)}</text>'
        f'<text x="12" y="{top + plot_h / 2}" text-anchor="middle" fill="currentColor"'
        f' transform="rotate(-90 12 {top + plot_h / 2})">{html.escape(y_label)}</text>'
        "</svg>"
    )
    svg = "".join(parts)
    if legend or (legend is None and len(series) > 1):
        keys = "".join(
            f'<span style="margin-right:10px;white-space:nowrap">'
            f'<span style="display:inline-block;width:10px;height:3px;margin:0 4px 2px 0;'
            f'background:{colour(i)}"></span>{html.escape(name)}</span>'
            for i, name in enumerate(series)
        )
        svg += (
            f'<div class="torchx-nb-legend" style="font-size:85%;max-width:{width}px">{keys}</div>'
        )
    return svg
