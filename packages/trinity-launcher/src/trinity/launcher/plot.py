"""Reading a run's ``metrics.jsonl``, ``trinity plot RUN_DIR`` (a PNG of the reward curve) and
:func:`plot_curves` (named curves into one PNG, for benchmarks comparing runs)."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: str) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/metrics.jsonl`` (a partly written last line is skipped)."""
    path = os.path.join(run_dir, METRICS_FILE)
    rows: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and "step" in row:
                    rows.append(row)
    except FileNotFoundError:
        return []
    return rows


def reward_curve(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(step, value), ...]}`` for every ``.../reward/mean...`` metric in ``rows``."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if "reward/mean" in key and isinstance(value, (int, float)):
                curves.setdefault(key, []).append((int(row["step"]), float(value)))
    return curves


class PlotError(ValueError):
    """Nothing to plot: no metrics file, or no reward metric in it."""


def plot_run(run_dir: str, out: Optional[str] = None, metrics: Optional[list[str]] = None) -> str:
    """Write a PNG of the reward curve(s) of ``run_dir``; return its path.

    Args:
        run_dir: a run directory (``<checkpoint_root_dir>/<project>/<group>/<name>``) holding
            ``metrics.jsonl``.
        out: the PNG to write (default ``RUN_DIR/reward.png``).
        metrics: metric names to draw (default: every ``*/reward/mean*`` metric).

    Raises:
        PlotError: no ``metrics.jsonl``, or none of the requested metrics in it.
    """
    path = os.path.join(run_dir, METRICS_FILE)
    rows = read_metrics(run_dir)
    if not rows:
        raise PlotError(f"{path}: no metrics (the file is missing or empty)")
    if metrics:
        curves = {
            m: [(int(r["step"]), float(r[m])) for r in rows if isinstance(r.get(m), (int, float))]
            for m in metrics
        }
        missing = [m for m, points in curves.items() if not points]
        if missing:
            known = sorted({k for r in rows for k in r if k != "step"})
            raise PlotError(f"{path}: no values for {missing}; metrics in the file: {known}")
    else:
        curves = reward_curve(rows)
        if not curves:
            raise PlotError(f"{path}: no '*/reward/mean*' metric in {len(rows)} rows")
    out = out or os.path.join(run_dir, "reward.png")
    return plot_curves(curves, out, title=os.path.basename(os.path.abspath(run_dir)))


def plot_curves(
    curves: dict[str, list[tuple[int, float]]],
    out: str,
    *,
    title: str = "",
    xlabel: str = "step",
    ylabel: str = "reward",
    ncols: int = 1,
    figsize: Optional[tuple[float, float]] = None,
    dpi: int = 100,
) -> str:
    """Draw named curves into one PNG; return its path.

    Shared by ``trinity plot`` (the reward curves of one run) and the benchmarks that compare
    runs (``benchmarks/learning_matrix.py``: one panel per algorithm type, ``ncols`` > 1).

    Args:
        curves: ``{name: [(step, value), ...]}``; points are sorted by step.
        out: the PNG to write (its directory is created).
        title: figure title (with ``ncols`` > 1 each panel is titled with its curve's name).
        ncols: 1 draws every curve on one axis with a legend; more draws a grid of panels,
            one per curve, ``ncols`` wide, on a shared y axis.
        figsize: inches; default 8 x 4.5 for one axis, 2.6 x 2 per panel for a grid.

    Raises:
        PlotError: ``curves`` is empty or every curve has no points.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    named = {name: sorted(points) for name, points in curves.items() if points}
    if not named:
        raise PlotError(f"{out}: nothing to plot (no curve has points)")
    if ncols <= 1:
        fig, ax = plt.subplots(figsize=figsize or (8, 4.5), dpi=dpi)
        for name, points in sorted(named.items()):
            ax.plot(
                [p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=name
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    else:
        nrows = -(-len(named) // ncols)
        fig, axes = plt.subplots(
            nrows,
            ncols,
            figsize=figsize or (2.6 * ncols, 2.0 * nrows),
            dpi=dpi,
            sharey=True,
            squeeze=False,
        )
        for ax, (name, points) in zip(axes.flat, named.items(), strict=False):
            ax.plot([p[0] for p in points], [p[1] for p in points], linewidth=1.2)
            ax.set_title(name, fontsize="small")
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize="x-small")
        for ax in list(axes.flat)[len(named) :]:
            ax.axis("off")
        for ax in axes[:, 0]:
            ax.set_ylabel(ylabel, fontsize="small")
        for ax in axes[-1, :]:
            ax.set_xlabel(xlabel, fontsize="small")
        if title:
            fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
