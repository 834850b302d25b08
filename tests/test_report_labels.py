"""The phases plot stays legible: with several configurations (modes × models with their
options) no two x tick labels overlap, and the key under the plot names every configuration.

The result sets are synthetic (the plot reads only a run's configuration label, node count and
phase means); the overlap is measured on the drawn figure with matplotlib's text extents."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from orchestrator.report.fmt import PHASE_ORDER
from orchestrator.report.plots import config_keys, phases_figure

MODES = ("torch-ddp", "horovod", "tf-allreduce", "mxnet-kvstore", "torch-fsdp")
MODELS = ("resnet18", "resnet50", "bert-base", "vgg16")


def sweep(configs: int, nodes=(1, 2, 4)) -> pd.DataFrame:
    """``configs`` configurations with long labels, a run per node count each."""
    labels = [f"{mode} {model} backend=nccl,trace=no"
              for mode, model in itertools.islice(itertools.product(MODES, MODELS), configs)]
    rows = [{"_label": label, "nodes": n, "ranks": n, "repeat": 0, "run_id": f"{label}-n{n}",
             **{p: 0.001 * (i + 1) for i, p in enumerate([*PHASE_ORDER, "t_unaccounted"])}}
            for label in labels for n in nodes]
    return pd.DataFrame(rows)


def overlapping(extents) -> list[tuple[int, int]]:
    """The pairs of boxes (by index) that overlap."""
    return [(i, j) for (i, a), (j, b) in itertools.combinations(enumerate(extents), 2)
            if a.overlaps(b)]


def _drawn(done: pd.DataFrame):
    fig = phases_figure(done)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
    legend = fig.legends[0] if fig.legends else None
    return fig, ticks, legend, renderer


@pytest.mark.parametrize("configs", [4, 20])
def test_tick_labels_do_not_overlap(configs):
    done = sweep(configs)
    fig, ticks, legend, renderer = _drawn(done)
    bars = min(len(done), 40)
    assert len(ticks) == bars
    assert overlapping(ticks) == []
    # The key names every configuration in full, its lines apart from each other and from the
    # tick labels, and inside the figure.
    names = [t.get_text() for t in legend.get_texts()]
    assert sorted(n.split(maxsplit=1)[1] for n in names) == sorted(done["_label"].unique())
    lines = [t.get_window_extent(renderer) for t in legend.get_texts()]
    assert overlapping(lines) == []
    assert overlapping(ticks + lines) == []
    width, height = fig.canvas.get_width_height()
    assert all(b.x0 >= 0 and b.y0 >= 0 and b.x1 <= width and b.y1 <= height
               for b in ticks + lines)


def test_the_old_labels_did_overlap():
    """The check finds what it looks for: full configuration labels under 12 bars overlap."""
    done = sweep(4)
    fig, _, _, renderer = _drawn(done)
    ax = fig.axes[0]
    ax.set_xticklabels([f"{label}\n{n} nodes" for label, n in zip(done["_label"], done["nodes"],
                                                                  strict=True)], fontsize=8)
    fig.canvas.draw()
    ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert overlapping(ticks) != []


def test_one_configuration_keeps_node_labels():
    fig, ticks, legend, _ = _drawn(sweep(1))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1 node", "2 nodes",
                                                                      "4 nodes"]
    assert legend is None and overlapping(ticks) == []


def test_config_keys():
    keys = config_keys([f"c{i:02d}" for i in range(28)])
    assert [keys["c00"], keys["c25"], keys["c26"], keys["c27"]] == ["A", "Z", "AA", "AB"]
