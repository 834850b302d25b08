"""The ``orch`` command line: the edge where input is parsed, files are written, and errors
become one clear line with exit code 2 (never a traceback).

Every command and command group is listed once, explicitly, in :data:`COMMANDS` (name, where
it lives, its one-line help). Nothing registers itself by being imported: a command missing
from the list is missing from ``orch``, and tests/test_cli.py checks the list against the
README. A command's module is imported only when that command runs or prints its own help, so
``orch --help`` and ``orch --version`` import none of them, nor pandas, pyarrow, numpy,
pydantic models or rich (benchmarks/cli_startup.py; target <= 0.3 s).
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import signal
import sys
from collections.abc import Iterator, MutableMapping
from typing import Annotated, NamedTuple

import typer

from .. import __version__
from ..errors import CONTROL, UserError
from ..runs import stopping
from ._common import RICH_MARKUP_MODE, Group


class Entry(NamedTuple):
    """One command (a function) or command group (a ``typer.Typer``) of ``orch``, with the
    examples and exit codes the command reference shows (scripts/gen-reference)."""

    name: str
    target: str  # "module:attribute" inside orchestrator.cli
    help: str  # what 'orch --help' lists: the first line of the command's own help
    # Command lines a reader can copy, each with what it does (tests/test_docs_commands.py
    # runs them against the CLI: the command and every option exist).
    examples: tuple[tuple[str, str], ...] = ()
    # Exit codes beside 0 (done) and 2 (bad input: one line naming the file, field or value,
    # and the fix), which every command has: (code, when).
    exits: tuple[tuple[int, str], ...] = ()


RUN_FAILED = (1, "a run did not complete (its state and reason are in the result set)")

COMMANDS: tuple[Entry, ...] = (
    Entry("sweep", "sweep:sweep", "Expand a matrix of runs, render their scripts, submit "
          "them, and print the scaling table.",
          (("orch sweep --nodes 1,2,4", "torch-ddp, LeNet-5, on 1, 2 and 4 nodes of this "
            "machine (the local site)"),
           ("orch sweep --site mycluster --nodes 1,2,4,8 --model resnet50 --dataset imagenet "
            "--out /scratch/$USER/runs/r50", "on a Slurm cluster, into a directory the "
            "compute nodes share"),
           ("orch sweep --site mycluster --nodes 1,2 --dry-run", "print every run's job.sbatch "
            "and launch.sh; submit nothing"),
           ("orch sweep --site mycluster --nodes 1,2,4 --no-wait --out runs/night",
            "submit and return; orch status and orch gather later"),
           ("orch sweep --mode mpi-ssgd --option overlap=none,wfbp --nodes 1,2,4",
            "a mode option with two values is a dimension of the sweep"),
           ("orch sweep --study gpu-scaling --site mycluster", "a sweep written down as a "
            "study file")),
          (RUN_FAILED, (1, "the pre-flight measured a fabric below the partition's min_busbw "
                        "(nothing was submitted)"),
           (130, "interrupted by Ctrl-C (the jobs keep running unless "
                 "--cancel-on-interrupt)"))),
    Entry("status", "runs:status", "Each run's state from the ledger and the scheduler, with "
          "job ids and attempts.",
          (("orch status runs/night", "each run's state, job id and attempts"),
           ("orch status runs/night --history", "every state change of every attempt"),
           ("orch status runs/night --format json", "the same as JSON"))),
    Entry("cancel", "runs:cancel", "Cancel unfinished runs of a sweep.",
          (("orch cancel runs/night", "cancel every unfinished run of the sweep"),
           ("orch cancel runs/night torch-ddp-lenet5-ib-n4-r0-5c42df80", "cancel one run"))),
    Entry("gather", "runs:gather", "Update states from the scheduler, then merge every run "
          "into results/*.parquet.",
          (("orch gather runs/night", "after orch sweep --no-wait: states, then the result "
            "set"),)),
    Entry("results", "runs:results_cmd", "One record per run: parameters, state, samples/s, "
          "speedup, efficiency, phases.",
          (("orch results runs/night", "the table"),
           ("orch results runs/night --format csv", "one CSV line per run"),
           ("orch results runs/night --format parquet --out runs.parquet", "the runs table "
            "as one Parquet file"))),
    Entry("study", "study:app", "Study files (a sweep as a file): list, validate them; print "
          "their JSON schema.",
          (("orch study list", "the shipped studies"),
           ("orch study validate studies/gpu-scaling.yaml --site mycluster", "check a study "
            "against a site"),
           ("orch study schema", "the JSON schema of study files"))),
    Entry("site", "site:app", "List, show, validate site configs; print their JSON schema.",
          (("orch site detect --name mycluster", "draft ~/.config/orch/sites/mycluster.yaml "
            "from the live Slurm"),
           ("orch site validate mycluster", "check it: file:line, field and the fix"),
           ("orch site list", "every site on the search path and where it comes from"),
           ("orch site show mycluster", "the config with its defaults filled in"),
           ("orch site schema", "the JSON schema of site configs"))),
    Entry("env", "env:app", "Framework environments of a site: list them, build them.",
          (("orch env list --site mycluster", "each environment, its Python and build"),
           ("orch env build torch --site mycluster", "create the torch environment's venv"))),
    Entry("data", "data:app", "On-disk data sets in each framework's native format.",
          (("orch data make --out data/cifar --samples 10000", "random CIFAR-sized records"),
           ("orch data make --out data/digits --from digits", "a real labelled set and its "
            "held-out split"))),
    Entry("trace", "trace:trace", "A run's layer-wise trace (id, name, forward_us, "
          "backward_us, comm_us, size_bytes).",
          (("orch trace torch-ddp-resnet18-local-n2-r0-1a2b3c4d runs/traced", "the trace of "
            "a run swept with --option trace=yes"),)),
    Entry("modes", "modes:modes_cmd", "Every distributed mode: its framework environment, "
          "launchers and options.",
          (("orch modes", "the table"),
           ("orch modes mpi-ssgd", "one mode's options in full"),
           ("orch modes --format json", "every mode as JSON"))),
    Entry("models", "models:models", "The model zoo and each model's parameter count, "
          "expected and per framework.",
          (("orch models --catalogue-only", "the zoo and its expected parameter counts"),
           ("orch models --format json", "counted in every framework environment")),
          ((1, "a framework's parameter count differs from the expected one"),)),
    Entry("report", "report:report_cmd", "Tables on the terminal, PNG plots, and a Markdown "
          "+ self-contained HTML report.",
          (("orch report runs/night", "runs/night/report/report.html, report.md and the "
            "PNGs"),
           ("orch report runs/night --out /tmp/report --no-plots", "the tables only, "
            "elsewhere"))),
    Entry("predict", "predict:predict_cmd", "Speedup and iteration time at given worker "
          "counts, from the performance model.",
          (("orch predict --results runs/night --workers 8,16,32", "from the sweep's smallest "
            "runs, at sizes not run"),
           ("orch predict --results runs/night --workers 16 --bandwidth 100Gb/s",
            "the same on a faster network"))),
    Entry("netbench", "netbench:netbench_cmd", "Measure all-reduce latency α and bandwidth B "
          "of a partition with a real job.",
          (("orch netbench --site mycluster --partition gpu-ib --nodes 2", "α and B between "
            "two nodes, stored for report and predict"),)),
    Entry("export", "export:export_cmd", "Write the result set (runs or iterations) as "
          "Parquet, CSV or JSON.",
          (("orch export runs/night --format csv --table iterations -o iters.csv",
            "every measured iteration as CSV"),)),
    Entry("container", "container:container_app", "Framework environment images: generate "
          "their Apptainer/Charliecloud build files from containers/specs/, build them, list "
          "them.",
          (("orch container list", "the image specs and whether their images are built"),
           ("orch container build torch --runtime apptainer", "the torch image as a SIF"),
           ("orch container generate --check", "the generated build files are current")),
          ((1, "with --check: a generated build file is out of date"),)),
    Entry("show", "container:show", "A run's provenance: image and digest, orch commit, site "
          "config hash, scripts, ranks.",
          (("orch show torch-ddp-lenet5-local-n2-r0-f0f7fcd8 runs/local", "where a run came "
            "from"),)),
    Entry("rerun", "container:rerun", "Submit a run again from its record alone, into "
          "<sweep>/reruns/<n>/ (never over it).",
          (("orch rerun torch-ddp-lenet5-local-n2-r0-f0f7fcd8 runs/local", "the same run "
            "again, from its record"),),
          (RUN_FAILED,)),
    Entry("history", "history:app", "The results history: record gathered sweeps, list and "
          "show them; the schema of references.yaml.",
          (("orch history add runs/night", "record the sweep"),
           ("orch history list", "the recorded sweeps"),
           ("orch history show 20261127T0301", "one entry, by its id or a unique prefix "
            "of it"))),
    Entry("compare", "history:compare_cmd", "Compare two result sets: per configuration in "
          "both, B/A of throughput, iteration time and each phase with a 95 % interval, a "
          "verdict and the phases that moved.",
          (("orch compare runs/last-week runs/night", "slower, faster or no measured "
            "change, and which phase moved"),
           ("orch compare runs/last-week runs/night --fail-if-slower", "for a nightly job")),
          ((1, "with --fail-if-slower: a configuration is slower"),)),
    Entry("check", "history:check_cmd", "Check a sweep against a site's references: print "
          "every failing metric, exit 1 when any fails (0 when all hold).",
          (("orch check runs/night --references references.yaml", "every metric off its "
            "reference"),),
          ((1, "a metric is off its reference"),)),
)


def load(entry: Entry):
    """The click command of ``entry``: imports its module and builds it with typer."""
    module_name, attribute = entry.target.split(":")
    target = getattr(importlib.import_module(f"{__name__}.{module_name}"), attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = typer.Typer(rich_markup_mode=RICH_MARKUP_MODE, add_completion=False)
        single.command(entry.name)(target)
        command = typer.main.get_command(single)
    command.name = entry.name
    return command


class LazyCommands(MutableMapping):
    """The name -> command table of the ``orch`` group: every name of :data:`COMMANDS` is in
    it from the start (for 'No such command', 'Did you mean'), a command is built on first
    access."""

    def __init__(self, entries: tuple[Entry, ...]) -> None:
        self._entries = {e.name: e for e in entries}
        self._loaded: dict = {}

    def __getitem__(self, name: str):
        if name not in self._loaded:
            entry = self._entries[name]  # KeyError: no such command
            self._loaded[name] = load(entry)
        return self._loaded[name]

    def __setitem__(self, name: str, command) -> None:
        self._loaded[name] = command
        self._entries.setdefault(name, Entry(name, "", command.get_short_help_str()))

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def help(self, name: str) -> str:
        return self._entries[name].help


class LazyGroup(Group):
    """The ``orch`` group: commands from :data:`COMMANDS`, each loaded when used."""

    def __init__(self, **attrs) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(COMMANDS)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)

    def invoke(self, ctx):
        """Run the command; stopped (Ctrl-C, SIGTERM, SIGHUP), say what it leaves running
        and exit 128 + the signal (cli/stop.py), never click's 'Aborted!'."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            from .stop import stopped

            stopped(exc, command=ctx.invoked_subcommand or "")

    def format_commands(self, ctx, formatter) -> None:
        # The one-line help from the list, whole: no command module is imported to print it.
        rows = [(name, self.commands.help(name)) for name in self.commands]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    cls=LazyGroup,
    help="Run distributed deep-learning training benchmarks and explain how they scale.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=RICH_MARKUP_MODE,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"orch {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """orch: sweeps of distributed training runs on Slurm clusters or this machine."""


def _check_argv(argv: list[str]) -> None:
    """No control character (newline, CR, NUL, tab, ...) in any argument: every value may reach
    a rendered script, where a newline would end a comment line and run the rest as shell."""
    for i, arg in enumerate(argv, 1):
        if CONTROL.search(arg):
            raise UserError(f"argument {i} ({arg!r}) holds a control character (newline, tab, "
                            "NUL…); values reaching a job script cannot")


def main() -> None:
    # `kill -USR1 <pid>` prints every thread's stack to stderr and orch goes on: a sweep that
    # seems stuck (waiting on Slurm, a lock, a pipe) says where, without being stopped.
    # (Called in-process by tests with a captured stderr, which has no file descriptor.)
    with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation is both
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        _check_argv(sys.argv[1:])
        with stopping.handled():  # SIGTERM and SIGHUP stop orch as Ctrl-C does
            app(prog_name="orch")  # also under 'python -m orchestrator'
    except UserError as exc:
        _fail(str(exc), exc.exit_code)
    except OSError as exc:  # a file or directory the user named: one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"{where}{exc.strerror or exc}", 2)
    except UnicodeError as exc:
        _fail(f"input is not UTF-8 text ({exc})", 2)
    except RecursionError:
        _fail("input nested too deeply", 2)


def _fail(message: str, code: int) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"orch: error: {message}\n")
    sys.exit(code)
