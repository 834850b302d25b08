"""The field's workload metrics of a run: tokens/s, model FLOP/s, MFU and peak memory per rank.

Every column is declared once, in :data:`COLUMNS`. Per device means per training rank (a GPU
partition runs one rank per GPU; on a CPU a rank is a process on its cores).

* ``tokens_per_s``: the job's samples/s times the tokens of a sample (a language model's
  sequence); ``tokens_per_s_per_device`` the same over the training ranks. Null for images.
* ``flops_per_sample``: training FLOPs of one sample (forward + backward): a zoo transformer's
  ``T (6N + 12 L H Q T)`` (PaLM), a zoo CNN's as torch's FlopCounterMode counts it
  (:meth:`orchestrator.zoo.ModelSpec.flops_per_sample`), a user's model as the check before
  submission counted it (``model_flops``); ``flops_basis`` says which.
* ``model_flops_per_s_per_device``: samples/s x FLOPs per sample over the training ranks:
  achieved model FLOP/s per device (what torchtitan and Megatron-LM print as TFLOP/s).
* ``mfu``: that over the device's peak FLOP/s at the run's precision
  (:mod:`orchestrator.results.peaks`: the device's name from the ranks' footers, or the
  partition's ``peak_tflops``);
  ``peak_flops_per_device`` and ``peak_flops_source`` say which peak; null with
  ``mfu_reason`` where none is known (a CPU, a device orch's table lacks).
* ``peak_device_reserved_bytes``: the caching allocator's peak on a GPU (beside the allocated
  ``peak_device_bytes`` and the host's ``peak_rss_bytes``, both from ``gather``);
  ``peak_memory_bytes`` is a rank's peak memory whatever it computes on: the GPU's reserved
  (else allocated) bytes where it ran on one, its peak RSS on a CPU (the largest rank's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from .. import modes, protocol, zoo
from ..protocol import RankLog
from ..spec.api import Run
from . import peaks


class Column(NamedTuple):
    name: str
    unit: str
    means: str


COLUMNS = (
    Column("tokens_per_sample", "tokens", "tokens of one sample (a sequence); null for images"),
    Column("tokens_per_s", "tokens/s", "the job's tokens per second (samples/s x tokens)"),
    Column("tokens_per_s_per_device", "tokens/s", "tokens/s over the training ranks"),
    Column("flops_per_sample", "FLOP", "training FLOPs per sample (forward + backward)"),
    Column("flops_basis", "", "how flops_per_sample was found (formula or counted)"),
    Column("model_flops_per_s_per_device", "FLOP/s",
           "achieved model FLOP/s per training rank (samples/s x FLOPs per sample / ranks)"),
    Column("device_name", "", "the device the ranks computed on (GPU name), null on CPUs"),
    Column("peak_flops_per_device", "FLOP/s", "the device's dense peak at the run's precision"),
    Column("peak_flops_source", "", "where that peak comes from (orch's table, site config)"),
    Column("mfu", "", "model FLOPs utilisation: model FLOP/s per device over its peak"),
    Column("mfu_reason", "", "why mfu is null"),
    Column("peak_device_reserved_bytes", "bytes",
           "the CUDA caching allocator's peak reserved memory, largest rank"),
    Column("peak_memory_bytes", "bytes",
           "a rank's peak memory: GPU reserved (else allocated) bytes, or peak RSS on a CPU"),
    Column("script_loss", "", "a user's own trainer: the last loss its output printed"),
)
NAMES = tuple(c.name for c in COLUMNS)

BASIS_PALM = "6N + 12LHQT per token (PaLM)"
BASIS_COUNTED = "counted (torch FlopCounterMode, one training step)"


def flops_of(run: Run) -> tuple[int | None, str | None]:
    """(training FLOPs per sample, basis) of a run's model; (None, None) where unknown."""
    if run.model_flops is not None:
        return run.model_flops, BASIS_COUNTED
    spec = zoo.MODELS.get(run.model)
    if spec is None or not spec.supports(run.dataset):
        return None, None
    flops = spec.flops_per_sample(run.dataset)
    return flops, (BASIS_PALM if spec.transformer else BASIS_COUNTED) if flops else None


def tokens_of(run: Run) -> int | None:
    ds = zoo.DATASETS.get(run.dataset)
    return ds.seq_len if ds is not None and ds.tokens else None


def precision_of(run: Run) -> str:
    """The run's precision: its option, else its mode's default (fp32 where it has none)."""
    if "precision" in run.options:
        return run.options["precision"]
    try:
        declared = {o.name: o.default for o in modes.get(run.mode).options}
    except Exception:  # a mode this orch no longer has
        declared = {}
    return str(declared.get("precision") or "fp32")


def partition_peaks(rdir: Path, run: Run) -> dict | None:
    """The partition's ``peak_tflops`` from the site config the run was prepared with."""
    try:
        prov = json.loads((rdir / protocol.PROVENANCE_FILE).read_text())
        parts = prov["site"]["config"]["partitions"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and part.get("name") == run.partition:
            return part.get("peak_tflops") or None
    return None


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)


def run_facts(run: Run, rdir: Path, logs: list[RankLog], measured: dict) -> dict:
    """The :data:`COLUMNS` of one run, from the run, its footers and its metrics
    (``measured``: the runs-table row so far, with ``samples_per_s`` and the footers'
    ``peak_device_bytes`` / ``peak_rss_bytes``)."""
    footers = [log.footer for log in logs if log.footer]
    names = sorted({f["device_name"] for f in footers if f.get("device_name")})
    reserved = [f["peak_device_reserved_bytes"] for f in footers
                if f.get("peak_device_reserved_bytes")]
    rate = _number(measured.get("samples_per_s"))
    devices = max(1, run.ranks)
    script = next((f["script"] for f in footers if isinstance(f.get("script"), dict)), None)
    tokens = tokens_of(run) if script is None else script.get("tokens_per_sample")
    flops, basis = flops_of(run)
    out = dict.fromkeys(NAMES)
    out.update(tokens_per_sample=tokens, flops_per_sample=flops, flops_basis=basis,
               device_name=",".join(names) or None,
               peak_device_reserved_bytes=max(reserved) if reserved else None)
    out["peak_memory_bytes"] = (out["peak_device_reserved_bytes"]
                                or measured.get("peak_device_bytes")
                                or measured.get("peak_rss_bytes"))
    if rate is not None and tokens:
        out["tokens_per_s"] = rate * tokens
        out["tokens_per_s_per_device"] = rate * tokens / devices
    if rate is not None and flops:
        out["model_flops_per_s_per_device"] = rate * flops / devices
    peak, source = peaks.lookup(names[0] if len(names) == 1 else None, precision_of(run),
                                partition_peaks(rdir, run))
    if len(names) > 1 and peak is None:
        source = f"ranks computed on different devices ({', '.join(names)})"
    out.update(peak_flops_per_device=peak, peak_flops_source=source if peak else None)
    if peak is None:
        out["mfu_reason"] = source
    elif flops is None:
        out["mfu_reason"] = "the model's FLOPs per sample are not known"
    elif out["model_flops_per_s_per_device"] is None:
        out["mfu_reason"] = "no throughput measured"
    else:
        out["mfu"] = out["model_flops_per_s_per_device"] / peak
    if script is not None:
        out.update(_script_figures(script, footers))
    return out


def _script_figures(script: dict, footers: list[dict]) -> dict:
    """What a user's own trainer printed (the trainer mode's footers): its last loss, and
    its own tokens/s and MFU where its trainer file declares them (the mean of the figures
    past the warm-up ones), in place of orch's (which know no FLOPs of a script)."""
    out: dict = {}
    losses = [f["loss"] for f in footers if _number(f.get("loss")) is not None]
    out["script_loss"] = losses[0] if losses else None
    figures = script.get("figures") or {}
    for name in ("tokens_per_s", "mfu"):
        values = [v for v in figures.get(name) or [] if _number(v) is not None]
        if values:
            out[name] = sum(values) / len(values)
            if name == "mfu":
                out["mfu_reason"] = None
                out["peak_flops_source"] = "printed by the training script"
    return out
