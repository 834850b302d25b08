"""Every column of the result set, declared once: its name, type, unit and meaning.

``runs.parquet`` is written in these types (:func:`arrow_table`), so a column has its type even
in a sweep where no run has a value for it (pandas would write such a column as Parquet
``null``); ``scripts/gen-reference`` writes ``docs/reference/result-set-columns.md`` from
:data:`RUNS`, :data:`ITERATIONS`, :data:`EPOCHS` and :data:`DEVICE_SAMPLES`; and
``tests/test_result_columns.py`` merges real recorded runs and checks that the merge writes
exactly the declared columns in the declared types. A new column is one entry here beside the
code that computes it (a metric in ``analyze``, a footer fact in ``gather``, a device column in
``devices``, …); the device columns' meanings are those ``devices.COLUMNS`` declares.

Types are Arrow's: ``string``, ``int64``, ``double``, ``bool``. Units: ``s`` (seconds),
``samples/s``, ``tokens``, ``tokens/s``, ``FLOP``, ``FLOP/s``, ``bytes``, ``J``, ``W``, ``MHz``,
``%`` (0–100), ``°C``, ``fraction`` (0–1, a ratio), ``epoch s`` (seconds since 1970),
``count``; empty where a column is text or a flag.
"""

from __future__ import annotations

from typing import NamedTuple

from ..protocol import PHASES, RANK_ARGS, YES_NO
from . import devices, workload


class Column(NamedTuple):
    name: str
    type: str  # string | int64 | double | bool
    unit: str
    means: str


TYPES = ("string", "int64", "double", "bool")

PHASE_MEANS = {
    "t_io": "reading and decoding a mini-batch, the part prefetch did not hide",
    "t_h2d": "copying the batch to the device (0 on a CPU)",
    "t_f": "forward pass and loss",
    "t_b": "backward compute",
    "t_comm": "gradient communication not hidden behind backward (exposed)",
    "t_u": "optimizer step (and zeroing the gradients)",
}

# The run columns of the sweep settings declared by their rank argument alone (its type, unit
# and help; protocol.RANK_ARGS), in the Run's order: after the fields declared before them.
_ARROW = {int: "int64", float: "double", str: "string", YES_NO: "bool"}
RANK_SETTING_COLUMNS = tuple(Column(a.field, _ARROW[a.type], a.unit, f"{a.help} (`{a.flag}`)")
                             for a in RANK_ARGS if a.setting)

# The run's parameters (spec.api.Run fields marked as columns, and the values derived from
# them); the iterations table repeats those its rows need (ITERATIONS).
PARAMETERS = (
    Column("run_id", "string", "", "the run's id, `<mode>-<model>-<partition>-n<nodes>-"
           "r<repeat>-<hash>`: its directory under the sweep"),
    Column("site", "string", "", "the site config the run was planned on"),
    Column("partition", "string", "", "the partition it ran on (Slurm `-p`)"),
    Column("interconnect", "string", "", "the partition's declared fabric: `infiniband` or "
           "`ethernet`"),
    Column("mode", "string", "", "the distributed mode (`orch modes`)"),
    Column("framework", "string", "", "the framework environment the mode runs in"),
    Column("launcher", "string", "", "what started the ranks: `srun`, `mpirun`, `torchrun` or "
           "`local`"),
    Column("model", "string", "", "the model of the zoo (`orch models`)"),
    Column("dataset", "string", "", "`cifar` (32×32 inputs) or `imagenet` (224×224)"),
    Column("nodes", "int64", "count", "nodes of the job"),
    Column("tasks_per_node", "int64", "count", "processes per node (ranks, and a role mode's "
           "servers or chief)"),
    Column("batch_size", "int64", "samples", "samples per rank and iteration (weak scaling: "
           "the global batch grows with the ranks)"),
    Column("iters", "int64", "count", "measured iterations asked for"),
    Column("warmup", "int64", "count", "iterations run first and left out of the statistics"),
    Column("repeat", "int64", "count", "which repetition of the same point (`--repeats`), from 0"),
    Column("data", "string", "", "the on-disk data set read (`--data`); null: synthetic "
           "batches in memory"),
    Column("prefetch", "bool", "", "with `--data`: batches read ahead in a loader process"),
    Column("epochs", "int64", "count", "whole epochs asked for (`--epochs`); null: a run of "
           "iterations"),
    Column("target_accuracy", "double", "fraction", "held-out accuracy an epoch run stops at "
           "(`--target-accuracy`)"),
    Column("model_sha256", "string", "", "a user's own model (`--model FILE.py:FUNCTION`): "
           "the sha256 of its file (null: a zoo model)"),
    Column("model_params", "int64", "count", "a user's own model: its parameters, as the "
           "check before submission counted them"),
    Column("model_flops", "int64", "FLOP", "a user's own model: its training FLOPs per "
           "sample, as that check counted them"),
    *RANK_SETTING_COLUMNS,
    Column("ranks", "int64", "count", "training processes (workers): what speedup and "
           "efficiency count"),
    Column("options", "string", "", "the mode options of the run, JSON (`--option`); a run "
           "dimension at its default is left out"),
)

RECORD = (
    Column("state", "string", "", "how the run ended ([run states](run-states.md)): "
           "`COMPLETED`, `FAILED`, `TIMEOUT`, `HUNG`, `NODE_FAIL`, …"),
    Column("reason", "string", "", "why it did not complete (or what was noted), in words"),
    Column("job_id", "string", "", "the scheduler's job id (Slurm: `JOBID` or "
           "`JOBID_TASK` of an array, or the step of a pack)"),
    Column("attempt", "int64", "count", "the attempt these measurements are from (1: the "
           "first); earlier ones are kept in `attempts/<n>/`"),
    Column("attempts", "string", "", "how each attempt ended, in order (`HUNG→COMPLETED`)"),
    Column("history", "string", "", "every state change of every attempt, JSON (time, "
           "attempt, state, job, nodes, reason)"),
    Column("study", "string", "", "the study file that planned the run, if any"),
    Column("co_tenants", "string", "", "runs that shared a node with it (`--pack-shared`), "
           "comma-separated; null: it had its nodes to itself"),
)

METRICS = (
    Column("iterations_measured", "int64", "count", "measured iterations in the breakdown "
           "window (the slowest rank's count)"),
    Column("samples_per_s", "double", "samples/s", "the job's throughput: all ranks' "
           "measured samples over the longest rank's measured wall time (from the native "
           "window where the run has one; `throughput_window` says which)"),
    Column("samples_per_s_std", "double", "samples/s", "spread of the per-iteration global "
           "rate (global batch over the slowest rank's time of that iteration)"),
    Column("t_iter", "double", "s", "mean iteration time over measured (rank, iteration) of "
           "the breakdown window"),
    Column("t_iter_std", "double", "s", "its standard deviation"),
    Column("hosts", "string", "", "the hosts the ranks ran on, comma-separated"),
    Column("distinct_hosts", "int64", "count", "how many hosts that is"),
    *(c for p in PHASES for c in (Column(p, "double", "s", f"mean {PHASE_MEANS[p]}"),
                                  Column(f"{p}_std", "double", "s",
                                         f"standard deviation of `{p}`"))),
    Column("samples_per_s_compute", "double", "samples/s", "throughput without waiting for "
           "input (DeepLearningExamples' `compute_ips`; `samples_per_s` is their `total_ips`)"),
    Column("t_comm_total", "double", "s", "all gradient communication, hidden or not, where "
           "the mode can see it (null otherwise: `comm_total_reason`)"),
    Column("t_unaccounted", "double", "s", "`t_iter` minus the sum of the phases"),
    Column("phase_gap", "double", "s", "the same as `t_unaccounted` (time no phase holds, "
           "shown, not hidden)"),
    Column("t_comm_hidden", "double", "s", "communication hidden behind backward: "
           "`t_comm_total - t_comm`"),
    Column("comm_exceeds_total", "int64", "count", "measured iterations whose exposed "
           "communication exceeded the total (an invariant: 0)"),
    Column("throughput_window", "string", "", "the window `samples_per_s` comes from: "
           "`native` or `breakdown`"),
    Column("t_iter_native", "double", "s", "mean iteration time of the native window (the "
           "framework's own step, only a wall clock around it)"),
    Column("t_iter_native_std", "double", "s", "its standard deviation"),
    Column("instrumentation_overhead", "double", "fraction", "`t_iter / t_iter_native - 1`: "
           "what the phase timers cost"),
)

FOOTER_FACTS = (
    Column("peak_rss_bytes", "int64", "bytes", "peak host memory of the largest rank"),
    Column("peak_rss_bytes_mean", "double", "bytes", "peak host memory, mean over ranks"),
    Column("peak_device_bytes", "int64", "bytes", "peak GPU memory of the largest rank "
           "(PyTorch's allocator; null without CUDA)"),
    Column("peak_device_bytes_mean", "double", "bytes", "peak GPU memory, mean over ranks"),
    Column("comm_total_reason", "string", "", "why the run has no `t_comm_total`"),
    Column("comm_tail_bytes", "int64", "bytes", "gradient bytes all-reduced only once backward "
           "has ended (DDP's last bucket, its first layers' gradients): communication no "
           "overlap hides; null where the mode does not say"),
    Column("versions", "string", "", "Python and framework versions of the ranks, JSON"),
    Column("param_checksum", "double", "", "sum of the model's parameters after training "
           "(rank 0's)"),
    Column("checksums_agree", "bool", "", "every training rank ended with the same parameters "
           "(a synchronous mode must)"),
)

DIMENSIONS = (
    Column("precision", "string", "", "`fp32`, `tf32`, `bf16` or `fp16` (null: a mode without "
           "the option)"),
    Column("memory_format", "string", "", "`nchw` or `nhwc` (channels last)"),
    Column("compile", "string", "", "`no`, or the `torch.compile` mode"),
    Column("pin_memory", "string", "", "`yes`: batches in pinned host memory on a GPU"),
    Column("cudnn_benchmark", "string", "", "`yes`: cuDNN picked its algorithms by timing them"),
    Column("t_compile", "double", "s", "compile time of the slowest rank, before the windows"),
    Column("activation_dtype", "string", "", "the dtype the forward computed in "
           "(`bfloat16` under bf16)"),
)

_DEVICE_KINDS = {  # (type, unit) of each column devices.COLUMNS declares with its meaning
    "device_source": ("string", ""), "gpu_util_mean": ("double", "%"),
    "gpu_mem_util_mean": ("double", "%"), "cpu_util_mean": ("double", "%"),
    "sm_clock_mean_mhz": ("double", "MHz"), "power_mean_w": ("double", "W"),
    "power_max_w": ("double", "W"), "temp_max_c": ("double", "°C"),
    "energy_j": ("double", "J"), "energy_basis": ("string", ""),
    "energy_reason": ("string", ""), "throttle_reasons": ("string", ""),
    "device_samples": ("int64", "count"), "device_metrics_reason": ("string", ""),
    "cpu_affinity": ("string", ""), "numa_nodes": ("string", ""),
    "cuda_visible_devices": ("string", ""), "gpu_pci_bus_ids": ("string", ""),
    "gpu_indices": ("string", ""), "gpu_reason": ("string", ""),
    "energy_per_sample_j": ("double", "J"), "power_rise": ("double", "fraction"),
    "power_rising": ("bool", ""),
}
DEVICES = tuple(Column(c.name, *_DEVICE_KINDS[c.name], c.means)
                for c in (*devices.COLUMNS, devices.ENERGY_PER_SAMPLE,
                          devices.POWER_RISE_COLUMN, devices.POWER_RISING))

FABRIC = (
    Column("fabric", "string", "", "`verified`, `mismatch` or `unverified`: whether the ranks "
           "used the partition's declared fabric ([fabric attestation](fabric.md))"),
    Column("fabric_reason", "string", "", "why that verdict"),
    Column("fabric_transport", "string", "", "the transport the ranks' libraries reported "
           "(NCCL's `NET/IB`, `Socket`, UCX, TCP)"),
    Column("fabric_iface", "string", "", "the interface that carried the data"),
    Column("fabric_bytes_measured", "double", "bytes", "bytes the training ranks sent in the "
           "measured window"),
    Column("fabric_bytes_expected", "double", "bytes", "bytes the mode's communication "
           "pattern must move in that window"),
    Column("fabric_host_bytes", "double", "bytes", "the interface's host counters over the "
           "window, once per network namespace: they must confirm the sockets' bytes"),
    Column("fabric_other_bytes", "double", "bytes", "the busiest other (not loopback) "
           "interface's host counters over the window: reported, not judged (it carries the "
           "nodes' other traffic too)"),
)

_WORKLOAD_KINDS = {  # (type, unit) of each column workload.COLUMNS declares with its meaning
    "tokens_per_sample": ("int64", "tokens"), "tokens_per_s": ("double", "tokens/s"),
    "tokens_per_s_per_device": ("double", "tokens/s"), "flops_per_sample": ("int64", "FLOP"),
    "flops_basis": ("string", ""), "model_flops_per_s_per_device": ("double", "FLOP/s"),
    "device_name": ("string", ""), "peak_flops_per_device": ("double", "FLOP/s"),
    "peak_flops_source": ("string", ""), "mfu": ("double", "fraction"),
    "mfu_reason": ("string", ""), "peak_device_reserved_bytes": ("int64", "bytes"),
    "peak_memory_bytes": ("int64", "bytes"), "script_loss": ("double", ""),
}
WORKLOAD = tuple(Column(c.name, *_WORKLOAD_KINDS[c.name], c.means) for c in workload.COLUMNS)

SCALING = (
    Column("speedup", "double", "", "`samples_per_s` over that of the same configuration's "
           "baseline, its run(s) with the fewest ranks"),
    Column("efficiency", "double", "fraction", "speedup over the ratio of ranks: 1 is linear "
           "scaling"),
    Column("baseline_ranks", "int64", "count", "the ranks of the baseline speedup is relative "
           "to"),
    Column("throughput_from", "string", "", "`native window`, `breakdown window` or `epoch "
           "steps`: where `samples_per_s` comes from, in words"),
    Column("invariant_violations", "string", "", "the invariants the run breaks, joined by "
           "`; ` (null: none)"),
)

CONVERGENCE = (
    Column("epochs_done", "int64", "count", "epochs the run trained"),
    Column("final_test_acc", "double", "fraction", "held-out accuracy after the last epoch"),
    Column("best_test_acc", "double", "fraction", "the best held-out accuracy of any epoch"),
    Column("final_test_loss", "double", "", "a language model's held-out loss per token "
           "after the last epoch"),
    Column("final_perplexity", "double", "", "its exponential: the held-out perplexity"),
    Column("tta_s", "double", "s", "time to `target_accuracy` (training and evaluation)"),
    Column("tta_epochs", "int64", "count", "epochs to `target_accuracy`"),
    Column("tta_reason", "string", "", "why there is no time to accuracy"),
    Column("tta_speedup", "double", "", "time to accuracy of the fewest-rank run of the "
           "configuration over this run's"),
    Column("sync_check", "string", "", "`pass` or `fail`: a synchronous multi-rank run "
           "follows the 1-rank run of the same global batch"),
    Column("sync_detail", "string", "", "what the sync check compared"),
)

# results/runs.parquet: one row per run, its columns in the order the merge writes them, by
# where they come from.
RUN_GROUPS: tuple[tuple[str, tuple[Column, ...]], ...] = (
    ("The run's parameters", PARAMETERS),
    ("Its record: state and attempts", RECORD),
    ("Throughput and phases (results/analyze.py)", METRICS),
    ("From the rank logs' footers", FOOTER_FACTS),
    ("Run dimensions (the torch modes' options) and what the ranks did with them", DIMENSIONS),
    ("Devices and binding (results/devices.py)", DEVICES),
    ("Fabric attestation (fabric.py)", FABRIC),
    ("Workload: tokens, model FLOP/s, MFU and memory (results/workload.py)", WORKLOAD),
    ("Scaling and invariants", SCALING),
    ("Epoch runs: convergence and time to accuracy (null for runs of iterations)", CONVERGENCE),
)
RUNS: tuple[Column, ...] = tuple(c for _, group in RUN_GROUPS for c in group)

_BY_NAME = {c.name: c for c in RUNS}

# results/iterations.parquet: one row per (run, rank, iteration).
ITERATIONS: tuple[Column, ...] = (
    *(_BY_NAME[n] for n in ("run_id", "site", "partition", "interconnect", "mode",
                            "framework", "launcher", "model", "dataset", "nodes",
                            "tasks_per_node", "batch_size", "warmup", "repeat", "ranks")),
    Column("rank", "int64", "", "the rank (task) that logged the row"),
    Column("host", "string", "", "the host the rank ran on"),
    Column("node", "string", "", "its node's name (a local site's virtual node: `node<k>`)"),
    Column("node_rank", "int64", "", "its node's index in the job, from 0"),
    Column("iter", "int64", "", "the iteration, from 0, warm-up included"),
    Column("window", "string", "", "`native` (the framework's own step, no phases) or "
           "`breakdown` (the step split into phases)"),
    Column("warmup_iter", "bool", "", "a warm-up iteration, left out of the statistics"),
    Column("t_start", "double", "epoch s", "when the iteration started, on the rank's clock"),
    Column("t_iter", "double", "s", "the iteration's wall time"),
    Column("samples", "int64", "samples", "samples the rank trained in it"),
    Column("t_comm_total", "double", "s", "all gradient communication of the iteration, "
           "where seen"),
    *(Column(p, "double", "s", PHASE_MEANS[p] + " (null in the native window)")
      for p in PHASES),
)

# results/epochs.parquet: one row per (run, rank, epoch), with --epochs.
EPOCHS: tuple[Column, ...] = (
    *(_BY_NAME[n] for n in ("run_id", "mode", "nodes", "ranks")),
    Column("rank", "int64", "", "the rank that logged the epoch"),
    Column("epoch", "int64", "", "the epoch, from 1"),
    Column("t_start", "double", "epoch s", "when the epoch started"),
    Column("t_epoch", "double", "s", "its training time (evaluation apart)"),
    Column("t_eval", "double", "s", "the held-out evaluation after it"),
    Column("train_loss", "double", "", "mean training loss of the epoch"),
    Column("train_acc", "double", "fraction", "training accuracy of the epoch"),
    Column("test_acc", "double", "fraction", "held-out accuracy after it"),
    Column("test_loss", "double", "", "a language model's held-out loss per token after it"),
    Column("samples", "int64", "samples", "samples the rank trained in it"),
)

# results/devices.parquet: one row per (run, task, device sample).
DEVICE_SAMPLES: tuple[Column, ...] = (
    _BY_NAME["run_id"],
    Column("task", "int64", "", "the task whose sampler took it"),
    Column("t", "double", "epoch s", "when the sample was taken"),
    Column("power_w", "double", "W", "the device's power draw"),
    Column("sm_clock_mhz", "double", "MHz", "the device's SM clock"),
    Column("gpu_util", "double", "%", "the GPU's utilisation"),
    Column("cpu_util", "double", "%", "the task's CPU use, of its affinity"),
)


def arrow_type(kind: str):
    import pyarrow as pa

    return {"string": pa.large_string(), "int64": pa.int64(), "double": pa.float64(),
            "bool": pa.bool_()}[kind]


def arrow_table(frame):
    """The runs table as Arrow, each declared column in its declared type (a column of nulls
    too); a column not declared keeps the type pandas gives it."""
    import pyarrow as pa

    table = pa.Table.from_pandas(frame, preserve_index=False)
    for i, field in enumerate(table.schema):
        column = _BY_NAME.get(field.name)
        if column is not None and field.type != arrow_type(column.type):
            # safe=False: a byte count held as a float (1.0e9) becomes the integer it is
            table = table.set_column(i, field.name,
                                     table.column(i).cast(arrow_type(column.type), safe=False))
    return table


def read_runs(path):
    """runs.parquet as pandas, a text column's missing values None: pandas reads a string
    column's nulls as NaN, which is truthy and prints as 'nan' where a value is optional."""
    import pandas as pd

    frame = pd.read_parquet(path)
    for name in frame.columns:
        column = _BY_NAME.get(name)
        if column is not None and column.type == "string":
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    return frame
