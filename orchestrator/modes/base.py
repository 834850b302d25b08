"""What a mode declares: the descriptor every ``modes/<name>/mode.py`` fills in.

A mode is one folder (``orchestrator/modes/<name>/``): ``mode.py`` (a :class:`Mode` named
``MODE``), ``launch.sh.j2`` (one task's launch script) and ``rank.py`` (the rank side, run as
``python -m orchestrator.modes.<name>.rank``). Everything the rest of orch asks of a mode is
declared here — roles and task placement, launchers, options with their defaults, framework
environment, data format, communication pattern and overlap — so no other module names a mode.

Both sides import this module: the control plane (sweep, render, report, the model) and the
rank side (``rankside.harness.mode_parser`` builds a rank's options from the descriptor, so the
defaults live in one place). Rank-side code runs under any environment's Python, CNTK's 3.6
included: stdlib only, no dataclasses, no ``from __future__ import annotations``, no
annotations that 3.6 would evaluate.
"""

import re

from ..errors import UserError

# Communication patterns a mode can declare (the performance model has one model each).
PATTERNS = ("allreduce", "hierarchical-allreduce", "parameter-server", "allgather-reducescatter",
            "none")
# How gradient communication meets backward: after it ("none"), or layer by layer behind it
# as gradients become ready ("wfbp", wait-free back-propagation).
OVERLAPS = ("none", "wfbp")
# The precisions a mode's ``precision`` option may offer (each framework offers those it can):
# fp32 with TF32 off, TF32 matmuls/convolutions, bf16 and fp16 automatic mixed precision.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


class Option:
    """A mode option (``--option name=value``; a sweep dimension when given several values).

    With ``choices`` the value must be one of them; without, it is a whole number of at least
    ``minimum`` (e.g. a bucket size). ``default=None``: decided per partition (the first
    choice on GPU partitions, the last on CPU ones), see :meth:`Mode.resolve_options`.
    ``omit_default``: a run at the default leaves the option out of its options (the rank
    takes the default), so the runs from before the option existed keep their ids.
    """

    __slots__ = ("choices", "default", "help", "minimum", "name", "omit_default")
    numeric = True  # without choices: a whole number (the rank parses it as int)

    def __init__(self, name, choices=(), help="", default=None, minimum=1, omit_default=False):
        self.name = name
        self.choices = tuple(choices)
        self.help = help
        self.default = default
        self.minimum = minimum
        self.omit_default = omit_default

    def __repr__(self):
        return f"Option({self.name!r}, choices={self.choices!r}, default={self.default!r})"

    @property
    def flag(self):
        """The rank-side command-line flag: ``bucket_size`` -> ``--bucket-size``."""
        return "--" + self.name.replace("_", "-")

    def check(self, mode, value):
        """The value, normalised; a UserError names the mode, the option and what is valid."""
        if self.choices:
            if value not in self.choices:
                raise UserError(f"mode '{mode}': {self.name}={value} is not valid; "
                                f"choices: {', '.join(self.choices)}")
            return value
        # ASCII digits only: str.isdigit() accepts '²', which int() then refuses.
        if not re.match(r"[0-9]+\Z", value) or int(value) < self.minimum:
            raise UserError(f"mode '{mode}': {self.name}={value} must be a whole number "
                            f">= {self.minimum}")
        return str(int(value))


def precision_option(*, help, exclude=()):
    """A mode's ``precision`` option: :data:`PRECISIONS` less those its framework cannot run
    (``exclude``), fp32 by default and left out of a run's options at fp32 (runs from before
    the option keep their ids); ``help`` says how the framework applies each. One
    declaration, so every mode's precision is one column with one meaning."""
    unknown = [p for p in exclude if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"precision_option: {unknown} not in {PRECISIONS}")
    return Option(name="precision", choices=[p for p in PRECISIONS if p not in exclude],
                  default="fp32", omit_default=True, help=help)


class Task:
    """One process of a job: its role (worker, ps, chief, scheduler, server), its index within
    the role, and the node (0-based) it must run on. Task k is SLURM_PROCID k."""

    __slots__ = ("index", "node", "role")

    def __init__(self, role, index, node):
        self.role = role
        self.index = index
        self.node = node

    def __eq__(self, other):
        return isinstance(other, Task) and (self.role, self.index, self.node) == (
            other.role, other.index, other.node)

    def __hash__(self):
        return hash((self.role, self.index, self.node))

    def __repr__(self):
        return f"Task({self.role!r}, {self.index}, {self.node})"


def workers_only(nodes, tasks_per_node, options):
    """The all-reduce layout: ``tasks_per_node`` workers on every node, node-major."""
    return [Task("worker", n * tasks_per_node + t, n)
            for n in range(nodes) for t in range(tasks_per_node)]


def server_nodes(nodes, options, total="servers", per_node="servers_per_node"):
    """The node of each server, by server index: ``total`` servers round-robin over the nodes
    when that option is set, else ``per_node`` on every node (node-major)."""
    if options.get(total):
        return [s % nodes for s in range(int(options[total]))]
    per = int(options.get(per_node, "1"))
    return [n for n in range(nodes) for _ in range(per)]


def one_server_count(mode, given, out, total, per_node):
    """``total`` (servers in all) replaces ``per_node`` (its default then leaves the run's
    options, so runs without ``total`` keep their ids); both given is an error."""
    if total in given:
        if per_node in given:
            raise UserError(f"mode '{mode.name}': give {total}=N (servers in all, round-robin "
                            f"over the nodes) or {per_node}=N, not both")
        out.pop(per_node, None)
    return out


class Mode:
    """What a framework's distributed mode needs from orch to be planned, rendered, run and
    interpreted. Fields (keyword arguments):

    * ``name`` (CLI name, e.g. ``tf-ps``), ``framework`` (the site environment key, e.g.
      ``tensorflow``), ``library`` (the model zoo the rank side builds: torch, tensorflow,
      mxnet, cntk, chainer), ``description``;
    * ``launchers``: the launchers it can be started by (registered in backends.launchers);
      ``mpi``: the ranks are MPI processes (srun must wire them up through PMIx);
    * ``options``: its :class:`Option` s; ``resolve``: an optional function
      ``(given, resolved) -> resolved`` for defaults that depend on other options (MXNet);
    * ``placement(nodes, tasks_per_node, options) -> [Task]``, ``training_roles`` (the tasks
      speedup and efficiency count), ``iteration_roles`` (the tasks that log iterations, if not
      the training ones: TensorFlow's PS chief), ``exchange_roles`` (the tasks that exchange
      gradients, if not the training ones: the workers and the parameter servers; a job with
      one such process has no communication to measure);
    * ``synchronous`` / ``synchronous_if(options)``: training ranks must end with equal
      parameter checksums;
    * ``data_format``: the on-disk format the rank side reads with ``--data`` (None: none);
    * ``pattern`` (one of :data:`PATTERNS`) and ``overlap`` (one of :data:`OVERLAPS`, or a
      function of the run's options returning one), or ``overlap_option`` (the option that
      decides it per run), and ``first_bucket_bytes`` (a
      gradient no larger than this is one bucket, sent after backward: DDP's first bucket);
      ``polled``: its non-blocking communication progresses only while the rank calls into
      the library (Open MPI's collectives without a progress thread), so what it starts
      during backward need not advance there;
    * ``python_modules``: the Python modules its ranks import beyond orch's (default: its
      ``library``), which orch looks for in the environment before submitting, where it can;
    * ``trains``: False for a mode that measures the network rather than training;
    * ``epochs``: the rank side can train whole epochs of a labelled data set and evaluate
      held-out accuracy (``--epochs``, time to accuracy);
    * ``cpu_only_backends``: values of its ``backend`` option that cannot run on a GPU
      partition (the sweep refuses them there at render time, with the reason), as
      ``{value: reason}``;
    * ``phases``: False for a mode that runs a user's own training script as it is (its
      model is a trainer file, orchestrator.plan.trainer): no breakdown window, its throughput
      from the script's output, its phases not measured.

    ``package`` (the folder's name) is filled in by the registry.
    """

    _FIELDS = {  # noqa: RUF012 - read only: each field's default
        "name": None, "framework": None, "library": None, "description": "",
        "launchers": (), "mpi": False, "options": (), "resolve": None,
        "placement": workers_only, "training_roles": ("worker",), "iteration_roles": None,
        "exchange_roles": None,
        "synchronous": True, "synchronous_if": None, "data_format": None,
        "pattern": "allreduce", "overlap": "none", "overlap_option": None,
        "first_bucket_bytes": None, "polled": False, "python_modules": None, "trains": True,
        "epochs": False,
        "package": None,
        "cpu_only_backends": {}, "phases": True,
    }

    def __init__(self, **fields):
        unknown = sorted(set(fields) - set(self._FIELDS))
        if unknown:
            raise TypeError(f"Mode: unknown field(s) {', '.join(unknown)}; valid: "
                            f"{', '.join(sorted(self._FIELDS))}")
        for key, default in self._FIELDS.items():
            setattr(self, key, fields.get(key, default))
        for key in ("name", "framework", "library"):
            if not getattr(self, key):
                raise TypeError(f"Mode: '{key}' is required")
        self.launchers = tuple(self.launchers)
        self.options = tuple(self.options)
        if self.pattern not in PATTERNS:
            raise TypeError(f"mode {self.name}: pattern {self.pattern!r} is not one of "
                            f"{', '.join(PATTERNS)}")
        if not callable(self.overlap) and self.overlap not in OVERLAPS:
            raise TypeError(f"mode {self.name}: overlap {self.overlap!r} is not one of "
                            f"{', '.join(OVERLAPS)}")

    def __repr__(self):
        return f"Mode({self.name!r})"

    @property
    def workload(self):
        """The rank-side module every task runs with ``python -m``."""
        return f"orchestrator.modes.{self.package}.rank"

    @property
    def template(self):
        """The launch template, as the renderer's loader names it."""
        return f"modes/{self.package}/launch.sh.j2"

    @property
    def logging_roles(self):
        return self.iteration_roles or self.training_roles

    @property
    def needs(self):
        """The Python modules its ranks import (:attr:`python_modules`, else its library)."""
        return tuple(self.python_modules or (self.library,))

    def exchanging(self, nodes, tasks_per_node, options):
        """How many processes of a run exchange gradients (:attr:`exchange_roles`)."""
        roles = self.exchange_roles or self.training_roles
        return sum(t.role in roles for t in self.tasks(nodes, tasks_per_node, options))

    def is_synchronous(self, options):
        """Must the training ranks of a run with these options end with equal parameters?"""
        return self.synchronous if self.synchronous_if is None else self.synchronous_if(options)

    def tasks(self, nodes, tasks_per_node, options):
        return self.placement(nodes, tasks_per_node, options)

    def option(self, name):
        for opt in self.options:
            if opt.name == name:
                return opt
        valid = ", ".join(o.name for o in self.options) or "(none)"
        raise UserError(f"mode '{self.name}' has no option '{name}'; valid: {valid}")

    def resolve_options(self, given, gpus_per_node):
        """Fill defaults and check values. A default of None is decided by the partition:
        GPU partitions take the first choice (e.g. nccl), CPU partitions the last (gloo). An
        ``omit_default`` option at its default is left out, given or not."""
        out = {}
        for name, value in given.items():
            out[name] = self.option(name).check(self.name, value)
        for opt in self.options:
            if opt.name not in out:
                if opt.default is not None:
                    out[opt.name] = opt.default
                elif opt.choices:
                    out[opt.name] = opt.choices[0] if gpus_per_node else opt.choices[-1]
        if self.resolve is not None:
            out = self.resolve(self, given, out)
        for opt in self.options:
            if opt.omit_default and out.get(opt.name) == opt.default:
                del out[opt.name]
        return out

    def overlap_for(self, options, grad_bytes=None):
        """The overlap policy of a run: its own option if the mode has one, else the mode's;
        a gradient that fits the first bucket is sent after backward whatever the policy."""
        if self.overlap_option and options.get(self.overlap_option) in OVERLAPS:
            return options[self.overlap_option]
        if (self.first_bucket_bytes is not None and grad_bytes is not None
                and grad_bytes <= self.first_bucket_bytes):
            return "none"
        return self.overlap(options) if callable(self.overlap) else self.overlap
