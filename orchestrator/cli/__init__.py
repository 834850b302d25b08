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
from ._common import RICH_MARKUP_MODE, Group


class Entry(NamedTuple):
    """One command (a function) or command group (a ``typer.Typer``) of ``orch``."""

    name: str
    target: str  # "module:attribute" inside orchestrator.cli
    help: str  # what 'orch --help' lists: the first line of the command's own help


COMMANDS: tuple[Entry, ...] = (
    Entry("sweep", "sweep:sweep", "Expand a matrix of runs, render their scripts, submit "
          "them, and print the scaling table."),
    Entry("status", "runs:status", "Each run's state from the ledger and the scheduler, with "
          "job ids and attempts."),
    Entry("cancel", "runs:cancel", "Cancel unfinished runs of a sweep."),
    Entry("gather", "runs:gather", "Update states from the scheduler, then merge every run "
          "into results/*.parquet."),
    Entry("results", "runs:results_cmd", "One record per run: parameters, state, samples/s, "
          "speedup, efficiency, phases."),
    Entry("study", "study:app", "Study files (a sweep as a file): list, validate them; print "
          "their JSON schema."),
    Entry("site", "site:app", "List, show, validate site configs; print their JSON schema."),
    Entry("env", "env:app", "Framework environments of a site: list them, build them."),
    Entry("data", "data:app", "On-disk data sets in each framework's native format."),
    Entry("trace", "trace:trace", "A run's layer-wise trace (id, name, forward_us, "
          "backward_us, comm_us, size_bytes)."),
    Entry("modes", "modes:modes_cmd", "Every distributed mode: its framework environment, "
          "launchers and options."),
    Entry("models", "models:models", "The model zoo and each model's parameter count, "
          "expected and per framework."),
    Entry("report", "report:report_cmd", "Tables on the terminal, PNG plots, and a Markdown "
          "+ self-contained HTML report."),
    Entry("predict", "predict:predict_cmd", "Speedup and iteration time at given worker "
          "counts, from the performance model."),
    Entry("netbench", "netbench:netbench_cmd", "Measure all-reduce latency α and bandwidth B "
          "of a partition with a real job."),
    Entry("export", "export:export_cmd", "Write the result set (runs or iterations) as "
          "Parquet, CSV or JSON."),
    Entry("container", "container:container_app", "Framework environment images: generate "
          "their Apptainer/Charliecloud build files from containers/specs/, build them, list "
          "them."),
    Entry("show", "container:show", "A run's provenance: image and digest, orch commit, site "
          "config hash, scripts, ranks."),
    Entry("rerun", "container:rerun", "Submit a run again from its record alone, into "
          "<sweep>/reruns/<n>/ (never over it)."),
    Entry("history", "history:app", "The results history: record gathered sweeps, list and "
          "show them; the schema of references.yaml."),
    Entry("compare", "history:compare_cmd", "Compare two result sets: per configuration in "
          "both, B/A of throughput, iteration time and each phase with a 95 % interval, a "
          "verdict and the phases that moved."),
    Entry("check", "history:check_cmd", "Check a sweep against a site's references: print "
          "every failing metric, exit 1 when any fails (0 when all hold)."),
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
