"""§20.1.1 the pipeline schedules of notebook 12 drawn: GPipe and 1F1B as stages × time slots, the
bubble hatched, from the grid of ``chapter20.techniques.pipeline.schedule_grid`` (the schedules'
mechanisms in a few lines each — the grid, the tensor-parallel block, ZeRO-1's partition — are
``chapter20.techniques``; the experiments of notebook 12 are ``chapter20.labs.nb12_parallelism``).
"""

from __future__ import annotations

from matplotlib.patches import Patch

from chapter20.core.plotting import new_panels
from chapter20.techniques.pipeline import SCHEDULES, grid_idle_share, schedule_grid

__all__ = ["plot_schedule"]


def plot_schedule(stages: int = 4, micro_batches: int = 4):
    """§20.1.1: GPipe and 1F1B as stages × time slots, each box a micro-batch's forward or
    backward, the idle slots (the bubble) hatched."""
    fig, axes = new_panels(
        2, f"{stages} pipeline stages, {micro_batches} micro-batches", figsize=(11, 3.6),
        alt=f"Two Gantt charts of {stages} pipeline stages over time slots for {micro_batches} "
        "micro-batches, GPipe and 1F1B: forwards fill the pipeline diagonally, backwards drain "
        "it, and the idle slots at the start and end of each stage form the bubble",
    )  # fmt: skip
    colours = {"F": "C0", "B": "C1"}
    for ax, kind in zip(axes, SCHEDULES):
        slots = schedule_grid(kind, stages, micro_batches)
        length = 1 + max(slots.values())
        for s in range(stages):
            ax.broken_barh([(0, length)], (s - 0.4, 0.8), facecolor="#F4F4F4",
                           edgecolor="#B0B0B0", hatch="///", linewidth=0.5)  # fmt: skip
        for (s, op, m), t in slots.items():
            ax.broken_barh([(t, 1)], (s - 0.4, 0.8), color=colours[op], edgecolor="white")
            ax.text(t + 0.5, s, f"{op}{m}", ha="center", va="center", color="white", fontsize=8)
        share = grid_idle_share(slots)
        ax.set_title(f"{'GPipe' if kind == 'gpipe' else '1F1B'}: idle share {share:.3f}")
        ax.set_xlim(0, length), ax.set_yticks(range(stages)), ax.set_ylim(stages - 0.5, -0.5)
        ax.set_xlabel("time slot (one forward or one backward)"), ax.set_ylabel("stage (rank)")
    idle = Patch(facecolor="#F4F4F4", edgecolor="#B0B0B0", hatch="///", label="idle: the bubble")
    handles = [Patch(color="C0", label="forward of micro-batch m (Fm)"),
               Patch(color="C1", label="backward of micro-batch m (Bm)"), idle]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncol=3)
    return fig
