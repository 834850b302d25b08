"""The sweep's settings, each declared once.

A :class:`Setting` is one thing a user can set about a sweep: its name (the ``SweepSpec`` field
and the study file's key), its type, default and help, the ``orch sweep`` flag, whether it is a
dimension (a comma-separated list on the command line, a list in a study file), whether a study
may zip it, and the ``Run`` field it becomes. Everything else is derived from :data:`SETTINGS`:

* ``orch sweep``'s options (:func:`cli_parameters`) and how their text becomes spec values
  (:meth:`Setting.from_cli`);
* the study file's model and its published JSON schema (:func:`study_fields`), and the
  dimensions a ``zip`` group may name (:data:`ZIPPABLE`);
* the ``SweepSpec`` keyword arguments a study fills in (:data:`STUDY_SETTINGS`).

The result set's run columns are the ``Run`` fields marked as columns (``spec.api``). A new
sweep setting is one entry here, or, for one its ranks receive, the ``setting`` of its rank
argument (``protocol.RANK_ARGS``, which renders and parses it), and one field of ``Run`` (if
runs differ by it) with its marks; the sweep's matrix, the modes it concerns
(``mode_attribute``) and
its kind's range are checked from the entry, a check beyond those goes in ``plan.sweep.validate``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..protocol import RANK_ARGS, RANK_DEFAULTS, RankArg

# The value types (of one item, for a dimension), each the plain Python type the command line
# parses it as; spec.schema gives each its strict pydantic type for study files.
KINDS: dict[str, type] = {
    "count": int,  # a whole number >= 1
    "non_negative": int,  # a whole number >= 0
    "name": str,  # a name: letters, digits, _ . - (modes, models, partitions, launchers)
    "path": str,  # a file system path
    "flag": bool,
    "share": float,  # in (0, 1]
    "text": str,
}


@dataclass(frozen=True)
class Setting:
    """One sweep setting; see the module's docstring for what is derived from it."""

    name: str  # SweepSpec field and study key: plural for a dimension (batch_sizes)
    type: str  # the value type (of one item, for a dimension): a key of KINDS
    default: Any  # the SweepSpec default; a tuple for a dimension
    help: str  # orch sweep --help
    doc: str = ""  # the study schema's description; default: help
    flag: str = ""  # the orch sweep option; default: --name with dashes
    dimension: bool = False  # a list: comma-separated on the command line
    zippable: bool = False  # a study's zip group may name it
    study: bool = True  # a study file may set it
    cli_default: str | None = None  # the option's default text, where it is not str(default)
    run_field: str | None = None  # the Run field it fills (one value per run)
    parse: Callable[[str, str], Any] | None = None  # text, flag -> value (dimensions)
    # Off its default, only the modes whose descriptor sets this attribute (not None) apply it
    # (a mode is named in its own folder only); None: every mode.
    mode_attribute: str | None = None
    only_with: str | None = None  # a dimension only where this setting is given (else default)

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def param(self) -> str:
        """The option's Python parameter name (typer's ``--batch-size`` is ``batch_size``)."""
        return self.option.lstrip("-").replace("-", "_")

    @property
    def description(self) -> str:
        return self.doc or self.help

    def from_cli(self, value: Any) -> Any:
        """The SweepSpec value of what the option received (None: not given, default)."""
        if not self.dimension:
            return value
        if value is None:
            return self.default
        return (self.parse or _names)(value, self.option)


def parse_int_list(text: str, what: str, minimum: int = 1) -> tuple[int, ...]:
    """``"1,2,4"`` → (1, 2, 4); a clear error names the option and the bad item."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"{what}: expected a comma-separated list of integers, got '{text}'")
    out = []
    for item in items:
        if not re.fullmatch(r"\d+", item):
            raise UserError(f"{what}: '{item}' is not a whole number (in '{text}')")
        value = int(item)
        if value < minimum:
            raise UserError(f"{what}: {value} is below the minimum of {minimum}")
        out.append(value)
    return tuple(dict.fromkeys(out))


def parse_name_list(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def _names(text: str, what: str) -> tuple[str, ...]:
    return parse_name_list(text)


def parse_yes_no_list(text: str, what: str) -> tuple[bool, ...]:
    values = parse_name_list(text)
    bad = [v for v in values if v not in ("yes", "no")]
    if bad or not values:
        raise UserError(f"{what} {text}: expected yes, no or yes,no")
    return tuple(v == "yes" for v in values)


SETTINGS: tuple[Setting, ...] = (
    Setting("nodes", "count", (1, 2, 4), "Node counts, comma-separated.", doc="node counts",
            dimension=True, zippable=True, run_field="nodes", parse=parse_int_list),
    Setting("modes", "name", ("torch-ddp",), "Distributed mode(s), comma-separated.",
            doc="distributed modes (default: orch sweep's)", flag="--mode", dimension=True,
            zippable=True, run_field="mode"),
    Setting("models", "name", ("lenet5",), "Model(s) from the zoo, or your own as "
            "FILE.py:FUNCTION or package.module:FUNCTION (a torch.nn.Module), comma-separated.",
            doc="models from the zoo, or FILE.py:FUNCTION / package.module:FUNCTION",
            flag="--model", dimension=True, zippable=True,
            run_field="model"),
    Setting("dataset", "name", None, "cifar (32x32 images), imagenet (224x224), or token "
            "sequences: bytes, webtext, bookswiki; default: the model's first (cifar for the "
            "CNNs and a model of your own, bytes for the GPTs).",
            doc="cifar, imagenet, bytes, webtext or bookswiki; default the model's first",
            run_field="dataset"),
    Setting("partitions", "name", (None,), "Partition(s), comma-separated; default: the site's "
            "default.", doc="partitions; default the site's", flag="--partition",
            dimension=True, zippable=True, run_field="partition"),
    Setting("tasks_per_node", "count", None, "Ranks per node, comma-separated (a dimension: "
            "1,2,4); default: one per GPU, or 1 on CPU partitions.",
            doc="ranks per node (GPUs, or CPU ranks); default one per GPU, else one",
            dimension=True, zippable=True, run_field="tasks_per_node", parse=parse_int_list),
    Setting("batch_sizes", "count", (32,), "Samples per rank, comma-separated.",
            doc="samples per rank", flag="--batch-size", dimension=True, zippable=True,
            run_field="batch_size", parse=parse_int_list),
    Setting("iters", "count", 20, "Measured iterations.", doc="measured iterations",
            run_field="iters"),
    Setting("warmup", "non_negative", RANK_DEFAULTS["warmup"],
            "Warm-up iterations (run, not measured).", doc="warm-up iterations",
            run_field="warmup"),
    Setting("repeats", "count", 1, "Repetitions of every run.", doc="repetitions of every run"),
    Setting("launcher", "name", None,
            "srun, mpirun, local or torchrun (torch modes); default: the partition's.",
            doc="srun, mpirun, local or torchrun (torch modes); default the partition's",
            run_field="launcher"),
    Setting("time_limit_min", "count", None, "Hard time limit per run, minutes.",
            doc="time limit per run, minutes", flag="--time-limit",
            run_field="time_limit_min"),
    Setting("data", "path", None, "On-disk data set (orch data make); default: synthetic "
            "batches in memory.", doc="on-disk data set (orch data make)", run_field="data"),
    Setting("prefetch", "flag", (True,), "With --data: yes, no or yes,no (read ahead in a loader "
            "process or not).", doc="with data: read ahead (true), or not", dimension=True,
            zippable=True, cli_default="yes", run_field="prefetch", parse=parse_yes_no_list,
            only_with="data"),
    Setting("epochs", "count", None, "Train whole epochs of --data's labelled set (orch data "
            "make --from) instead of --iters; held-out accuracy after each.",
            doc="train whole epochs of data's labelled set instead of iters (held-out "
            "accuracy after each)", run_field="epochs"),
    Setting("target_accuracy", "share", None, "With --epochs: stop at the end of the epoch "
            "whose held-out accuracy reaches it (0-1); time to accuracy is measured to there.",
            doc="with epochs: stop at the epoch whose held-out accuracy reaches it",
            run_field="target_accuracy"),
    Setting("inject_failure", "text", None, "Testing aid: RANK@ITER[:fail|stop|hold] makes "
            "that rank raise at that iteration (fail) or, in the run's first attempt, freeze "
            "there with SIGSTOP (stop: a hung rank) or stay there alive (hold: a rank waiting "
            "on a dead link).", study=False, run_field="inject_failure"),
)



def _of_rank_arg(arg: RankArg) -> Setting:
    """The sweep setting a rank argument declares (its ``setting``): named as its Run field,
    with its default (a one-value tuple for a dimension)."""
    facts = dict(arg.setting)
    dimension = facts.get("dimension", False)
    if dimension and facts["type"] in ("count", "non_negative"):
        facts.setdefault("parse", parse_int_list)
    return Setting(arg.field, default=(arg.default,) if dimension else arg.default,
                   run_field=arg.field, **facts)


# The settings declared by their rank argument alone (protocol.RANK_ARGS): after the others.
SETTINGS += tuple(_of_rank_arg(a) for a in RANK_ARGS if a.setting)

BY_NAME = {s.name: s for s in SETTINGS}
# The dimensions a study's zip group may name (each a list in the file).
ZIPPABLE = tuple(s.name for s in SETTINGS if s.zippable)
# The SweepSpec fields a study fills in (the same names as the file's), besides options.
STUDY_SETTINGS = tuple(s.name for s in SETTINGS if s.study)

# Mode options: ``--option NAME=VALUE[,VALUE]`` (a dimension per name), and the options common
# enough to have a flag of their own, each the same as --option NAME=... .
OPTION_FLAGS: dict[str, str] = {
    "overlap": "Same as --option overlap=...: gradient communication after backward (none) or "
               "layer by layer behind it (wfbp).",
    "bucket_size": "Same as --option bucket_size=...: bytes merged per gradient send.",
    "kvstore": "Same as --option kvstore=... (dist_sync, dist_async).",
}
OPTIONS_HELP = "Mode option NAME=VALUE[,VALUE] (a matrix dimension), e.g. backend=gloo."
# ``orch sweep --preflight``: when the pre-flight (execute.preflight) measures the network. Here,
# not beside the pre-flight, so that a sweep checks the word without importing what measures.
PREFLIGHT_MODES = ("auto", "always", "never")
OPTIONS_DOC = "mode options, NAME: [VALUE, ...]; each applies to the modes that have it"


def option_items(option: list[str] | None, aliases: dict[str, str | None]) -> list[str]:
    """``--option`` items and the alias flags given, as NAME=VALUE items."""
    for text in option or []:
        if "=" not in text:  # -o is --option here: 'orch sweep -o DIR' must not look valid
            raise UserError(f"--option '{text}': expected NAME=VALUE[,VALUE...] (-o is "
                            "--option in orch sweep; the sweep directory is --out DIR)")
    return [*(option or []), *(f"{name}={value}" for name, value in aliases.items() if value)]


def parse_options(items: list[str]) -> dict[str, tuple[str, ...]]:
    """``["backend=gloo", "overlap=none,wfbp"]`` → {"backend": ("gloo",), ...}."""
    out: dict[str, tuple[str, ...]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"--option '{item}': expected NAME=VALUE[,VALUE...]")
        out[key.strip()] = parse_name_list(value)
    return out


def cli_parameters() -> list[tuple[str, Any, Any, str]]:
    """Each setting's ``orch sweep`` option: (parameter, Python type, default, help)."""
    out = []
    for s in SETTINGS:
        if s.dimension:
            default = s.cli_default if s.cli_default is not None else (
                None if s.default in (None, (None,)) else ",".join(map(str, s.default)))
            out.append((s.param, str | None if default is None else str, default, s.help))
        else:
            kind = KINDS[s.type]
            out.append((s.param, kind | None if s.default is None else kind, s.default,
                        s.help))
    return out
