"""The one way cairn makes a PNG: matplotlib's Agg canvas, no pyplot, matplotlib imported only when asked for."""

from __future__ import annotations

from pathlib import Path

from cairn_cli.errors import MissingDependency, NotFound


def figure(path: Path, figsize: tuple[float, float]):
    """(a constrained-layout Figure on an Agg canvas, the checked output path)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependency("--plot needs matplotlib", "pip install 'cairn_cli[plot]'") from None
    path = Path(path)
    if not path.parent.is_dir():
        raise NotFound(f"no such directory: {path.parent}", "create it or pass another --plot path")
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, path
