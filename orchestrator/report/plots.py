"""The report's figures as PNG bytes (matplotlib's Agg backend, imported only when drawing)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd

from .fmt import PHASE_LABELS, PHASE_ORDER, as_float, nodes_word
from .ranks import COMPUTE

PHASE_COLORS = {"t_io": "#8c564b", "t_h2d": "#e377c2", "t_f": "#1f77b4", "t_b": "#ff7f0e",
                "t_comm": "#d62728", "t_u": "#2ca02c", "t_unaccounted": "#7f7f7f"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
CONFIG_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                 "#bcbd22", "#7f7f7f", "#d62728")


def _figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas (no pyplot, no global state, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def draw_figures(done: pd.DataFrame, iters: pd.DataFrame, pred_by: pd.DataFrame,
                 strag: pd.DataFrame) -> tuple[dict[str, bytes], dict[str, str]]:
    """PNG bytes of every figure, by file name, and their titles."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    labels = sorted(done["_label"].unique())
    color = {lab: CONFIG_COLORS[i % len(CONFIG_COLORS)] for i, lab in enumerate(labels)}
    marker = {lab: MARKERS[i % len(MARKERS)] for i, lab in enumerate(labels)}
    figs = {
        "throughput.png": (_plot_throughput(done, color, marker),
                           "Throughput vs nodes (dashed: ideal linear scaling)"),
        "speedup.png": (_plot_speedup(done, pred_by, color, marker),
                        "Speedup: measured vs predicted"),
        "phases.png": (_plot_phases(done), "Where the time goes: phases per iteration"),
        "ranks.png": (_plot_ranks(done, iters, strag), "Per-rank iteration time"),
    }
    return ({name: png for name, (png, _) in figs.items()},
            {name: t for name, (_, t) in figs.items()})


def _node_axis(ax, nodes) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(nodes)
    ax.set_xticklabels([str(n) for n in nodes])
    ax.minorticks_off()
    ax.set_xlabel("nodes")
    ax.grid(True, alpha=0.3)


def _legend(ax, handles=None, names=None) -> None:
    """Inside the axes for a few configurations, outside on the right for many."""
    if handles is None:
        handles, names = ax.get_legend_handles_labels()
    many = len(names) > 8
    ax.legend(handles, names, fontsize=7 if many else 8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0) if many else None,
              ncols=2 if len(names) > 30 else 1)


def _plot_throughput(done: pd.DataFrame, color: dict, marker: dict) -> bytes:
    fig = _figure(12.0 if done["_label"].nunique() > 4 else 7.5, 4.8)
    ax = fig.subplots()
    nodes = sorted(int(n) for n in done["nodes"].unique())
    for label, g in done.groupby("_label", sort=True):
        agg = g.groupby("nodes").agg(rate=("samples_per_s", "mean"),
                                     std=("samples_per_s_std", "mean"),
                                     ranks=("ranks", "first")).reset_index()
        ax.errorbar(agg["nodes"], agg["rate"], yerr=agg["std"], marker=marker[label], capsize=4,
                    color=color[label], label=label, linewidth=2)
        base = agg[agg["nodes"] == 1]
        if not base.empty:
            rate1, ranks1 = float(base["rate"].iloc[0]), float(base["ranks"].iloc[0])
            xs = np.array(nodes, dtype=float)
            ideal = rate1 * (xs * agg["ranks"].iloc[0] / agg["nodes"].iloc[0]) / ranks1
            ax.plot(xs, ideal, linestyle="--", color=color[label], alpha=0.7, linewidth=1.5,
                    label=f"{label} ideal")
    _node_axis(ax, nodes)
    ax.set_ylabel("samples/s (whole job)")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs nodes (dashed: ideal linear scaling)")
    handles, names = ax.get_legend_handles_labels()
    order = sorted(range(len(names)), key=lambda i: (names[i].removesuffix(" ideal"),
                                                     names[i].endswith(" ideal")))
    _legend(ax, [handles[i] for i in order], [names[i] for i in order])
    return _png(fig)


def _plot_speedup(done: pd.DataFrame, pred_by: pd.DataFrame, color: dict,
                  marker: dict) -> bytes:
    """Speedup against nodes, or against ranks when the sweep varies tasks per node (then
    relative to each configuration's baseline, its run with the fewest ranks)."""
    from .tables import by_ranks

    size = "ranks" if by_ranks(done) else "nodes"
    fig = _figure(12.0 if done["_label"].nunique() > 4 else 7.5, 4.8)
    ax = fig.subplots()
    sizes = sorted(int(n) for n in done[size].unique())
    top = 1.0
    for label, g in done.groupby("_label", sort=True):
        g = g.sort_values([size, "nodes"])
        g = g.assign(speedup=pd.to_numeric(g["speedup"], errors="coerce"), predicted=[
            as_float(pred_by.loc[r]["predicted_speedup"]) if r in pred_by.index else np.nan
            for r in g["run_id"]])
        # repeats: their mean at each size, measured and predicted
        extra = {"ranks": ("ranks", "first")} if size != "ranks" else {}
        mean = g.groupby(size, sort=True).agg(speedup=("speedup", "mean"),
                                               predicted=("predicted", "mean"),
                                               **extra).reset_index()
        s = mean["speedup"].astype(float)
        ax.plot(mean[size], s, marker=marker[label], color=color[label], linewidth=2,
                label=f"{label} measured")
        px = [n for n, p in zip(mean[size], mean["predicted"], strict=True) if pd.notna(p)]
        py = [float(p) for p in mean["predicted"] if pd.notna(p)]
        g = mean
        if py:
            ax.plot(px, py, marker=marker[label], markerfacecolor="white", linestyle=":",
                    linewidth=1.5,
                    color=color[label], label=f"{label} predicted")
        ideal = g["ranks"].astype(float) / float(g["ranks"].iloc[0]) * float(g[size].iloc[0])
        top = max(top, float(np.nanmax(s)) if s.notna().any() else 1.0, float(ideal.max()),
                  max(py) if py else 1.0)
    xs = np.array(sizes, dtype=float)
    # speedup is 1 at the smallest size (each configuration's run with the fewest ranks)
    ax.plot(xs, xs / xs.min(), color="black", linestyle="--", linewidth=1, alpha=0.6,
            label="ideal")
    _node_axis(ax, sizes)
    if size == "ranks":
        ax.set_xlabel("ranks (nodes x tasks per node)")
        ax.set_ylabel(f"speedup vs {sizes[0]} rank{'s' if sizes[0] > 1 else ''}")
    else:
        ax.set_ylabel(f"speedup vs {nodes_word(sizes[0])}")
    ax.set_ylim(0, top * 1.1)
    ax.set_title("Speedup: measured (filled) vs predicted (hollow)")
    _legend(ax)
    return _png(fig)


MAX_BARS = 40
MAX_RANK_PANELS = 12
MAX_DOTS = 50  # measured iterations drawn per rank


def median_repeats(done: pd.DataFrame) -> pd.DataFrame:
    """One run per configuration and size: of its repeats, the one with the median throughput
    (the lower middle one of an even count), so a figure of runs shows each size once."""
    if done.empty or not done.duplicated(["_label", "nodes", "ranks"]).any():
        return done
    ordered = done.sort_values(["_label", "nodes", "ranks", "samples_per_s", "repeat"])
    middle = ordered.groupby(["_label", "nodes", "ranks"], sort=False).cumcount()
    count = ordered.groupby(["_label", "nodes", "ranks"], sort=False)["run_id"].transform("size")
    return ordered[middle == (count - 1) // 2]


def _few_runs(done: pd.DataFrame, limit: int) -> tuple[pd.DataFrame, str]:
    """At most ``limit`` runs for a figure, repeats shown by their median one
    (:func:`median_repeats`): all, else each configuration's smallest and largest node count,
    else the first ``limit`` of those; and a note saying so."""
    shown = median_repeats(done)
    note = f" (median of {len(done) // max(len(shown), 1)} repeats)" if len(shown) < len(done) \
        else ""
    runs = shown.sort_values(["_label", "nodes", "repeat"])
    if len(runs) <= limit:
        return runs, note
    ends = runs.groupby("_label")["nodes"].transform
    keep = runs[(runs["nodes"] == ends("min")) | (runs["nodes"] == ends("max"))]
    keep = keep.drop_duplicates(["_label", "nodes"]).head(limit)
    return keep, (f" ({len(keep)} of {len(runs)} runs: fewest and most nodes per "
                  f"configuration{note.replace(' (', ', ').rstrip(')')})")


def config_keys(labels: list[str]) -> dict[str, str]:
    """A short key per configuration label, in order: A..Z, then AA, AB, ..."""
    def key(i: int) -> str:
        return key(i // 26 - 1) + chr(65 + i % 26) if i >= 26 else chr(65 + i)
    return {label: key(i) for i, label in enumerate(labels)}


def _phases_ticks(bars: pd.DataFrame, keys: dict[str, str] | None) -> list[str]:
    """One bar's x label: its node count, under its configuration's key when there are several
    (a full configuration label is as wide as several bars, so the labels went over each other;
    the key below the plot names each configuration in full)."""
    if keys is None:
        return [nodes_word(int(n)) for n in bars["nodes"]]
    return [f"{keys[label]}\n{int(n)}" for label, n in zip(bars["_label"], bars["nodes"],
                                                           strict=True)]


def _phases_key(fig, keys: dict[str, str]) -> None:
    """The configurations' key, under the plot, one or two columns of 'A  full label'."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], linestyle="none") for _ in keys]
    names = [f"{key}   {label}" for label, key in keys.items()]
    fig.legend(handles, names, loc="outside lower left",
               ncols=1 if len(keys) <= 8 else 2, fontsize=8, handlelength=0, handletextpad=0,
               title="configurations", title_fontsize=8, alignment="left", frameon=False)


def phases_figure(done: pd.DataFrame):
    """The phases figure: one stacked bar per run (at most MAX_BARS), its labels apart."""
    bars, shown = _few_runs(done, MAX_BARS)
    labels = sorted(bars["_label"].unique())
    keys = config_keys(labels) if len(labels) > 1 else None
    key_rows = 0 if keys is None else math.ceil(len(keys) / (1 if len(keys) <= 8 else 2)) + 1
    fig = _figure(min(24.0, max(6.0, 0.8 * len(bars) + 3.5)), 5.0 + 0.17 * key_rows)
    ax = fig.subplots()
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    parts = [*PHASE_ORDER, "t_unaccounted"]
    for p in parts:
        values = bars[p].astype(float).clip(lower=0).fillna(0).to_numpy() * 1e3
        ax.bar(x, values, bottom=bottom, color=PHASE_COLORS[p], label=PHASE_LABELS[p],
               width=0.7, edgecolor="white", linewidth=0.5)
        bottom += values
    for xi, total in zip(x, bottom, strict=True):
        ax.text(xi, total, f"{total:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(_phases_ticks(bars, keys), fontsize=8)
    if keys is not None:
        ax.set_xlabel("configuration (key below), nodes")
        _phases_key(fig, keys)
    ax.set_ylabel("ms per iteration (mean over ranks and iterations)")
    ax.set_ylim(0, float(bottom.max()) * 1.12 if len(bottom) and bottom.max() > 0 else 1)
    ax.set_title("Where the time goes: phases per iteration" + shown)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def _plot_phases(done: pd.DataFrame) -> bytes:
    return _png(phases_figure(done))


def _plot_ranks(done: pd.DataFrame, iters: pd.DataFrame, strag: pd.DataFrame) -> bytes:
    runs, shown = _few_runs(done, MAX_RANK_PANELS)
    ids = list(runs["run_id"])
    m = iters[iters["run_id"].isin(ids) & ~iters["warmup_iter"]] if not iters.empty else iters
    n = max(1, len(ids))
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = _figure(max(4.6 * cols, 9.0), 3.4 * rows + 0.5)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    by_strag = strag.set_index("run_id") if not strag.empty else strag
    rng = np.random.default_rng(0)
    for ax, (_, run) in zip(axes, runs.iterrows(), strict=False):
        data = m[m["run_id"] == run["run_id"]]
        ranks = sorted(int(r) for r in data["rank"].unique())
        values = [data[data["rank"] == r]["t_iter"].to_numpy() * 1e3 for r in ranks]
        slow = None
        if run["run_id"] in by_strag.index and by_strag.loc[run["run_id"]]["straggler"]:
            slow = int(by_strag.loc[run["run_id"]]["slowest_rank"])
        if values:
            box = ax.boxplot(values, positions=range(len(ranks)), widths=0.6,
                             patch_artist=True, showfliers=False)
            for k, patch in enumerate(box["boxes"]):
                patch.set_facecolor("#f4a3a3" if ranks[k] == slow else "#aec7e8")
            for k, v in enumerate(values):
                if len(v) > MAX_DOTS:  # a sample: thousands of dots would hide the box
                    v = v[rng.choice(len(v), MAX_DOTS, replace=False)]
                ax.scatter(k + rng.uniform(-0.18, 0.18, len(v)), v, s=8, color="#1f4e79",
                           alpha=0.5, zorder=3)
            compute = [float(data[data["rank"] == r][list(COMPUTE)].sum(axis=1).mean()) * 1e3
                       for r in ranks]
            ax.plot(range(len(ranks)), compute, linestyle="none", marker="D", markersize=6,
                    color="black", zorder=4)
            ax.set_xticks(range(len(ranks)))
            ax.set_xticklabels([str(r) for r in ranks], fontsize=8)
        ax.set_title(f"{run['_label']} · {nodes_word(int(run['nodes']))}"
                     + (f" · straggler rank {slow}" if slow is not None else ""), fontsize=9)
        ax.set_xlabel("rank")
        ax.set_ylabel("t_iter (ms)")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[n:]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(facecolor="#aec7e8", edgecolor="black", label="t_iter of a rank"),
                        Patch(facecolor="#f4a3a3", edgecolor="black", label="straggler rank"),
                        Line2D([], [], color="#1f4e79", marker="o", linestyle="none",
                               markersize=4, label="one measured iteration"),
                        Line2D([], [], color="black", marker="D", linestyle="none",
                               label="mean compute of the rank (t_iter without exposed comm)")],
               loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    fig.suptitle("Per-rank iteration time (box: quartiles of all measured iterations; dots: "
                 f"up to {MAX_DOTS} of them)" + shown)
    return _png(fig)
