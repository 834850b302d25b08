"""Sweep → runs: expand a matrix of parameters into frozen Run records with stable ids.

A run's id is a hash of everything that changes what it measures, so the same sweep run twice
finds the same ids (and skips what is finished) while any changed parameter makes a new run.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import backends, data, modes, protocol, zoo
from ..backends.slurm import timelimit
from ..data import sources as datasources
from ..errors import UserError
from ..site import Partition, Site
from ..spec import settings
from ..spec.api import Run, group_names
from ..spec.schema import SweepSpec
from ..yamlconf import dotted, location, read_yaml
from . import trainer, usermodel


def _time_limit(spec: SweepSpec, site_time: str | None) -> int:
    if spec.time_limit_min is not None:
        if spec.time_limit_min < 1:
            raise UserError("--time-limit: at least 1 minute")
        return spec.time_limit_min
    limit = timelimit.minutes(site_time) if site_time else None
    return limit if limit is not None else 10


# Where an error is: ``where(setting, value=None, key=None)`` gives a message's prefix for a
# setting's value (key: the mode option's name). On the command line that is the flag and the
# value; a study file locates the value at its file:line (study.locator). Every check below
# names what it checks through it, so the command line and study files share one validate.
Where = Callable[..., str]


def cli_where(name: str, value: Any = None, key: str | None = None) -> str:
    """An error's prefix on the command line: the option and, where it helps, the value."""
    if name == "options":
        return f"--option {key}" if value is None else f"--option {key}={value}"
    flag = settings.BY_NAME[name].option
    return flag if value is None else f"{flag} {value}"


def expand(spec: SweepSpec, site: Site, where: Where = cli_where, *, dry_run: bool = False
           ) -> list[Run]:
    """The sweep's runs in a stable order. Every input error is raised before anything runs
    (``dry_run``: every error but the data set's, see :func:`validate`)."""
    mode_list, partitions, data_dir = validate(spec, site, where, dry_run=dry_run)
    users = user_models(spec, site, mode_list, where)
    runs: list[Run] = []
    for part, mode, model, point, repeat in matrix(spec, partitions, mode_list):
        runs += runs_at(spec, site, data_dir, part, mode, model, point, repeat, where=where,
                        users=users)
    return runs


def validate(spec: SweepSpec, site: Site, where: Where = cli_where, *, dry_run: bool = False
             ) -> tuple[list[modes.Mode], list[Partition], str | None]:
    """Check the spec against the zoo, the modes and the site (in this order, so the first
    error is always the same one); returns the modes, the partitions and the data directory.

    ``dry_run``: a data directory not made yet is no error (a dry run prints scripts, it reads
    no data: a fresh clone dry-runs every study); one that is there is checked all the same."""
    _check_numbers(spec, where)
    if spec.dataset is not None and spec.dataset not in zoo.DATASETS:
        raise UserError(f"{where('dataset', spec.dataset)}: unknown dataset '{spec.dataset}'; "
                        f"valid: {', '.join(zoo.DATASETS)}")
    _check_failure(spec.inject_failure, where)
    mode_list = [_mode(m, where) for m in spec.modes]
    _check_models(spec, mode_list, where)
    _check_options(spec, mode_list, where)
    partitions = [_partition(site, p, where) for p in spec.partitions]
    _check_nodes(spec.nodes, partitions, site, where)
    _check_launcher(spec.launcher, where)
    data_dir = (_check_data(spec, mode_list, site, where, dry_run) if spec.data is not None
                else None)
    _check_epochs(spec, mode_list, where, dry_run)
    _check_applied(spec, mode_list, where)
    return mode_list, partitions, data_dir


def _check_applied(spec: SweepSpec, mode_list: list[modes.Mode], where: Where) -> None:
    """A setting that only some modes apply (Setting.mode_attribute), set off its default, is
    refused for the others: nothing would apply it there."""
    for s in settings.SETTINGS:
        if s.mode_attribute is None or getattr(spec, s.name) == s.default:
            continue
        for mode in mode_list:
            if getattr(mode, s.mode_attribute) is None:
                having = [m.name for m in modes.registry().values()
                          if getattr(m, s.mode_attribute) is not None]
                raise UserError(f"{where(s.name)}: mode '{mode.name}' does not apply it; modes "
                                f"that do: {', '.join(having)}")


def _check_failure(text: str | None, where: Where) -> None:
    if text is not None and not protocol.FAILURE_SPEC.match(text):
        actions = "|".join(protocol.FAILURE_ACTIONS)
        raise UserError(f"{where('inject_failure', repr(text))}: expected "
                        f"RANK@ITER[:{actions}], e.g. 1@3 or 1@3:stop")


def _mode(name: str, where: Where) -> modes.Mode:
    try:
        return modes.get(name)
    except UserError as exc:
        raise UserError(f"{where('modes', name)}: {exc}") from None


def _partition(site: Site, name: str | None, where: Where) -> Partition:
    try:
        return site.partition(name)
    except UserError as exc:
        raise UserError(f"{where('partitions', name)}: {exc}") from None


MAX_COUNT = 1_000_000
# Iterations may be many more: a run meant to end at its time limit asks for "forever".
MAX_ITERS = 1_000_000_000
# Ranks per node beyond this many per core oversubscribe a node past measuring anything.
MAX_TASKS_PER_CORE = 4


def _check_numbers(spec: SweepSpec, where: Where) -> None:
    for name in ("modes", "models", "nodes", "batch_sizes", "partitions"):
        if not getattr(spec, name):
            raise UserError(f"{where(name)}: empty; give at least one value")
    positive = {"iters": spec.iters, "batch_sizes": min(spec.batch_sizes),
                "tasks_per_node": min(spec.tasks_per_node or (1,), default=0),
                "repeats": spec.repeats}
    for name, value in positive.items():
        if value < 1:
            raise UserError(f"{where(name)}: must be at least 1")
    if spec.warmup < 0:
        raise UserError(f"{where('warmup')}: must be 0 or more")
    for name, value, most in (("iters", spec.iters, MAX_ITERS),
                              ("warmup", spec.warmup, MAX_ITERS),
                              ("repeats", spec.repeats, MAX_COUNT),
                              ("batch_sizes", max(spec.batch_sizes), MAX_COUNT)):
        if value > most:
            raise UserError(f"{where(name)}: {value} is beyond any sensible benchmark "
                            f"(at most {most})")


def dataset_of(spec: SweepSpec, model: str) -> str:
    """The dataset a model of the sweep trains on: ``--dataset``, else the model's first
    (cifar for the CNNs, bytes for the GPTs, ...; the dataset's default for a user's model)."""
    if spec.dataset is not None:
        return spec.dataset
    if usermodel.is_user_model(model) or model not in zoo.MODELS:  # a user's, a trainer
        return USER_MODEL_DATASET
    return zoo.get(model).datasets[0]


# The geometry a user's model gets without --dataset: the rank's default.
USER_MODEL_DATASET = protocol.RANK_DEFAULTS["dataset"]


def _check_models(spec: SweepSpec, mode_list: list[modes.Mode], where: Where) -> None:
    """Every zoo model exists, has the dataset and is built by every mode's library (MXNet,
    CNTK and Chainer have no transformers); a user's model is checked by
    :func:`user_models` once the site is known."""
    scripts = [m for m in mode_list if not m.phases]
    for model in spec.models:
        if trainer.is_trainer_file(model):
            plain = [m.name for m in mode_list if m.phases]
            if plain:
                script_modes = [m.name for m in modes.registry().values() if not m.phases]
                raise UserError(f"{where('models', model)}: a trainer file runs in mode "
                                f"{', '.join(script_modes)}, not {', '.join(plain)}")
            continue
        if scripts:
            raise UserError(f"{where('models', model)}: mode {scripts[0].name} runs your own "
                            "training script: give its trainer file (--model FILE.yaml)")
        if usermodel.is_user_model(model):
            continue
        try:
            entry = zoo.get(model)
        except (KeyError, ValueError) as exc:
            raise UserError(f"{where('models', model)}: {str(exc).strip(chr(39) + chr(34))}"
                            " (or a model of your own: FILE.py:FUNCTION)") from None
        dataset = dataset_of(spec, model)
        if dataset not in entry.datasets:
            raise UserError(f"{where('models', model)}: model '{model}' has no '{dataset}' "
                            f"variant; valid: {', '.join(entry.datasets)}")
        for mode in mode_list:
            if not entry.built_by(mode.library):
                having = [m.name for m in modes.registry().values()
                          if m.trains and m.phases and entry.built_by(m.library)]
                raise UserError(f"{where('models', model)}: mode '{mode.name}' has no "
                                f"{model} ({mode.library}'s zoo lacks it); modes that have "
                                f"it: {', '.join(having)}")


def user_models(spec: SweepSpec, site: Site, mode_list: list[modes.Mode],
                where: Where) -> dict[str, tuple[str, usermodel.Facts, str | None]]:
    """Each user's model of the sweep (as given) -> (its resolved name, what its check found,
    None), checked in the torch environment before anything is submitted (:mod:`.usermodel`);
    each trainer file -> (its name, its sha256, the validated file as the rank's JSON)."""
    out = {}
    for model in spec.models:
        if trainer.is_trainer_file(model):
            loaded, digest = trainer.load(model)
            out[model] = (loaded.name, usermodel.Facts(None, None, digest, False),
                          trainer.as_arg(loaded))
        elif usermodel.is_user_model(model):
            name = usermodel.resolve(model)
            out[model] = (name, usermodel.check(site, mode_list, name, dataset_of(spec, model),
                                                where("models", model)), None)
    return out


def _check_options(spec: SweepSpec, mode_list: list[modes.Mode], where: Where) -> None:
    """Every option is one of a swept mode's, and each value valid for a mode that has it."""
    for name, values in spec.options.items():
        owners = [m for m in mode_list if name in {o.name for o in m.options}]
        if not owners:
            having = [m.name for m in modes.registry().values()
                      if name in {o.name for o in m.options}]
            raise UserError(f"{where('options', key=name)}: none of the modes "
                            f"{', '.join(spec.modes)} has it"
                            + (f" (modes with it: {', '.join(having)})" if having else ""))
        for value in values:
            problems = []
            for owner in owners:  # valid if one of the modes that have the option takes it
                try:
                    owner.option(name).check(owner.name, value)
                except UserError as exc:
                    problems.append(str(exc))
            if len(problems) == len(owners):
                raise UserError(f"{where('options', value, name)}: {problems[0]}")


def _check_nodes(nodes: tuple[int, ...], partitions: list[Partition], site: Site,
                 where: Where) -> None:
    for n in nodes:
        for part in partitions:
            if n > part.nodes:
                raise UserError(f"{where('nodes', n)}: {n} nodes; partition '{part.name}' of "
                                f"site '{site.name}' has only {part.nodes} node(s): lower it "
                                "(or choose another partition)")


def _check_launcher(launcher: str | None, where: Where) -> None:
    if launcher is not None and launcher not in backends.launcher_names():
        raise UserError(f"{where('launcher', launcher)}: '{launcher}' is not a launcher; "
                        f"valid: {', '.join(backends.launcher_names())}")


def _check_data(spec: SweepSpec, mode_list: list[modes.Mode], site: Site, where: Where,
                dry_run: bool = False) -> str:
    """The on-disk data set's directory, once it holds the sweep's dataset in a format every
    mode reads (data.check_reading: JPEG only where the mode decodes it and has Pillow)."""
    assert spec.data is not None
    for mode in mode_list:
        if mode.data_format is None:
            raise UserError(f"{where('data')}: mode '{mode.name}' reads no on-disk data yet; "
                            "drop it")
    if dry_run and _not_made(spec.data):
        return str(Path(spec.data).expanduser().resolve())
    if not _has_manifest(spec.data):
        raise UserError(f"{where('data', spec.data)}: no {data.MANIFEST} there; make the data "
                        f"set with '{_make_command(spec, mode_list)}'")
    root, manifest = data.load_manifest(spec.data)
    for model in spec.models:
        if manifest.dataset != dataset_of(spec, model):
            raise UserError(f"{where('data', spec.data)}: holds {manifest.dataset} samples; "
                            f"{model} trains on {dataset_of(spec, model)} "
                            f"({where('dataset')} {manifest.dataset} to train on it)")
    for mode in mode_list:
        data.check_reading(site, mode, root, manifest)
    return str(root)


def _has_manifest(data_dir: str) -> bool:
    return (Path(data_dir).expanduser() / data.MANIFEST).is_file()


def _not_made(data_dir: str) -> bool:
    """No directory there at all, as on a fresh clone: a dry run goes on without it. A
    directory that is there is checked, in a dry run too (it may be the wrong one)."""
    return not Path(data_dir).expanduser().exists()


def _make_command(spec: SweepSpec, mode_list: list[modes.Mode]) -> str:
    """The ``orch data make`` that makes the data set the sweep needs: labelled (the embedded
    digits) where it trains epochs, in every format its modes read."""
    formats = sorted({m.data_format for m in mode_list if m.data_format})
    want = dataset_of(spec, spec.models[0])
    dataset = f" --dataset {want}" if want != USER_MODEL_DATASET else ""
    labelled = f" --from {datasources.DIGITS}" if spec.epochs is not None else ""
    if zoo.get_dataset(want).tokens:
        dataset, labelled = "", f" --from {datasources.TEXT}"
    return f"orch data make --out {spec.data}{dataset}{labelled} --format {','.join(formats)}"


MAX_EPOCHS = 10_000


def _check_epochs(spec: SweepSpec, mode_list: list[modes.Mode], where: Where = cli_where,
                  dry_run: bool = False) -> None:
    """--epochs needs a labelled data set with a held-out split and modes that train epochs;
    --target-accuracy is a share in (0, 1] and needs --epochs."""
    if spec.target_accuracy is not None:
        if not 0 < spec.target_accuracy <= 1:
            raise UserError(f"{where('target_accuracy', spec.target_accuracy)}: a share of the "
                            f"held-out images, in (0, 1] (e.g. 0.9)")
        if spec.epochs is None:
            raise UserError(f"{where('target_accuracy')}: give {where('epochs')} N too (the "
                            "most epochs to train)")
    if spec.epochs is None:
        return
    if not 1 <= spec.epochs <= MAX_EPOCHS:
        raise UserError(f"{where('epochs', spec.epochs)}: between 1 and {MAX_EPOCHS}")
    if spec.data is None:
        raise UserError(f"{where('epochs')}: needs --data DIR of a labelled data set with a "
                        "held-out split; make one with 'orch data make --out DIR --from digits'")
    # A dry run before the data set is made: no split to check yet (see _check_data).
    if not (dry_run and _not_made(spec.data)):
        _, manifest = data.load_manifest(spec.data)
        if not manifest.test_samples:
            raise UserError(f"{where('epochs')}: {spec.data} holds random images without a "
                            f"held-out split; make a labelled set with 'orch data make --out "
                            "DIR --from digits'")
    for mode in mode_list:
        if not mode.epochs:
            raise UserError(f"{where('epochs')}: mode '{mode.name}' does not train epochs yet; "
                            f"modes that do: {', '.join(modes.epoch_modes())}")


# A point of the matrix: partition, mode, model, the other dimensions' Run fields and values
# (:data:`POINT_SETTINGS`), repeat.
MatrixPoint = tuple[Partition, modes.Mode, str, dict[str, Any], int]
# The dimensions besides partition, mode and model (validated into objects first), in the
# sweep's order: settings.SETTINGS'.
POINT_SETTINGS = tuple(s for s in settings.SETTINGS
                       if s.dimension and s.run_field not in ("partition", "mode", "model"))


def matrix(spec: SweepSpec, partitions: list[Partition], mode_list: list[modes.Mode]
           ) -> Iterator[MatrixPoint]:
    """Every (partition, mode, model, the other dimensions, repeat), in sweep order. A
    dimension with ``only_with`` (prefetch: --data) is one only where that setting is given,
    else its default; one left empty (tasks per node) is None: the partition's default."""
    axes = []
    for s in POINT_SETTINGS:
        values = getattr(spec, s.name) or (None,)
        if s.only_with is not None and getattr(spec, s.only_with) is None:
            values = s.default[:1]
        axes.append(values)
    fields = [s.run_field for s in POINT_SETTINGS]
    for part, mode, model, *values, repeat in itertools.product(
            partitions, mode_list, spec.models, *axes, range(spec.repeats)):
        yield part, mode, model, dict(zip(fields, values, strict=True)), repeat


def option_sets(spec: SweepSpec, mode: modes.Mode) -> list[dict[str, str]]:
    """The mode's option combinations the spec asks for ([{}]: none; defaults fill them)."""
    names = {o.name for o in mode.options}
    given = {k: v for k, v in spec.options.items() if k in names}
    sets = [dict(zip(given, combo, strict=True)) for combo in itertools.product(*given.values())]
    return sets or [{}]


# Mode options whose value runs on NCCL, which no step can use without GPUs (option, the NCCL
# value, the CPU choice to use instead): torch's backend, TensorFlow's all-reduce
# implementation, ChainerMN's communicator.
NEEDS_GPUS = (("backend", "nccl", "gloo"), ("implementation", "nccl", "ring"),
              ("communicator", "pure_nccl", "naive"))


def runs_at(spec: SweepSpec, site: Site, data_dir: str | None, part: Partition, mode: modes.Mode,
            model: str, point: dict[str, Any], repeat: int, *, where: Where = cli_where,
            users: dict | None = None) -> list[Run]:
    """The runs of one matrix point: one per option combination."""
    tasks_per_node = point["tasks_per_node"]
    per_node = tasks_per_node or part.gpus_per_node or 1
    if per_node > MAX_TASKS_PER_CORE * max(part.cpus_per_node, part.gpus_per_node):
        raise UserError(f"{where('tasks_per_node', per_node)}: partition '{part.name}' has "
                        f"{part.cpus_per_node} core(s) per node; at most "
                        f"{MAX_TASKS_PER_CORE * part.cpus_per_node} ranks per node")
    _check_gpus_per_task(site, part, per_node, tasks_per_node, where)
    launcher = _launcher(spec.launcher, site, part.launcher, mode, where)
    _check_agent_binding(site, part, launcher)
    for opts in option_sets(spec, mode):
        for name, value, cpu_choice in NEEDS_GPUS:
            if opts.get(name) == value and not part.gpus_per_node:
                raise UserError(f"{where('options', value, name)}: partition '{part.name}' has "
                                f"no GPUs (gpus_per_node 0); NCCL needs them: use "
                                f"{name}={cpu_choice}")
        backend = mode.resolve_options(opts, part.gpus_per_node).get("backend")
        if part.gpus_per_node and backend in mode.cpu_only_backends:
            raise UserError(f"{where('options', backend, 'backend')}: {mode.name} on GPU "
                            f"partition '{part.name}': {mode.cpu_only_backends[backend]}; use "
                            f"backend=nccl")
        if backend == "nccl" and part.gpus_per_node and per_node > part.gpus_per_node:
            raise UserError(f"{where('tasks_per_node', per_node)}: NCCL takes one rank per GPU and "
                            f"partition '{part.name}' has {part.gpus_per_node}; use "
                            f"--tasks-per-node {part.gpus_per_node} or backend=gloo (ranks "
                            f"then share the GPUs)")
    return [build_run(spec, site, part, mode, launcher, opts, model=model, users=users,
                      point=point, repeat=repeat, data_dir=data_dir)
            for opts in option_sets(spec, mode)]


def _check_gpus_per_task(site: Site, part: Partition, per_node: int,
                         tasks_per_node: int | None, where: Where) -> None:
    """A partition's ``gpus_per_task`` for each of a node's ranks must fit its GPUs: srun
    refuses such a step only once the job has waited for its nodes. The site file's field is
    named (the fix may be there or on the sweep's tasks per node)."""
    if not part.gpus_per_task:
        return
    each = int(part.gpus_per_task.rpartition(":")[2])  # "a100:2" -> 2
    if each * per_node <= part.gpus_per_node:
        return
    ranks = where("tasks_per_node", per_node) if tasks_per_node else "one per GPU, the default"
    fits = part.gpus_per_node // each
    flag = settings.BY_NAME["tasks_per_node"].option
    raise UserError(f"{_partition_field(site, part, 'gpus_per_task')}: {part.gpus_per_task} GPU(s) "
                    f"a rank × {per_node} ranks a node ({ranks}) needs {each * per_node} GPUs, "
                    f"but partition '{part.name}' has {part.gpus_per_node} (gpus_per_node); use "
                    f"{flag} {fits} or a smaller gpus_per_task")


def _check_agent_binding(site: Site, part: Partition, launcher: str) -> None:
    """A per-node agent (torchrun) is one srun task that starts its node's ranks, and they
    inherit its binding: a cpu_bind that lists CPUs task by task (map_cpu:, mask_cpu:, …)
    would bind every rank of the node to the list's first entry (the local site binds
    nothing by cpu_bind)."""
    if not (backends.launcher(launcher).per_node and backends.scheduler(site.scheduler).allocation):
        return
    if part.cpu_bind and ":" in part.cpu_bind:
        raise UserError(f"{_partition_field(site, part, 'cpu_bind')}: {part.cpu_bind} lists "
                        f"CPUs task by task, but launcher '{launcher}' starts each node's ranks "
                        f"from one task, which would bind them all to the first entry; use a "
                        f"keyword (cores, sockets, none) or --launcher srun")


def _partition_field(site: Site, part: Partition, field: str) -> str:
    """``file:line: partitions[i].FIELD`` of a partition's field in the site's file (the
    site's name where it was built from a recorded config, with no file)."""
    loc = ["partitions", site.partitions.index(part), field]
    if site.source_file is None:
        return f"site '{site.name}': {dotted(loc)}"
    path = Path(site.source_file)
    _, root = read_yaml(path, "site config", "name, scheduler, partitions…")
    return f"{location(path, root, loc)}: {dotted(loc)}"


def build_run(spec: SweepSpec, site: Site, part: Partition, mode: modes.Mode, launcher: str,
              opts: dict[str, str], *, model: str, point: dict[str, Any], repeat: int,
              data_dir: str | None, users: dict | None = None) -> Run:
    """One Run: the point's values (:func:`matrix`), the spec's constants and the partition's
    defaults; ``users``: each user's model's resolved name and check (:func:`user_models`)."""
    name, facts, script = (users or {}).get(model, (model, None, None))
    return Run(
        **{**point, "tasks_per_node": point["tasks_per_node"] or part.gpus_per_node or 1},
        site=site.name,
        scheduler=site.scheduler,
        partition=part.name,
        interconnect=part.interconnect,
        mode=mode.name,
        framework=mode.framework,
        launcher=launcher,
        model=name,
        dataset=dataset_of(spec, model),
        iters=spec.iters,
        warmup=spec.warmup,
        repeat=repeat,
        time_limit_min=_time_limit(spec, part.sbatch.time),
        options=mode.resolve_options(opts, part.gpus_per_node),
        inject_failure=spec.inject_failure,
        data=data_dir,
        epochs=spec.epochs,
        target_accuracy=spec.target_accuracy,
        classes=_data_classes(data_dir) if data_dir else None,
        model_sha256=facts.sha256 if facts else None,
        model_params=facts.params if facts else None,
        model_flops=facts.flops_per_sample if facts else None,
        script=script,
    )


@functools.lru_cache(maxsize=64)
def _data_classes(data_dir: str) -> int | None:
    """The class count in a data set's manifest (None for random images, or in a dry run
    before the data set is made): read once a sweep."""
    return data.load_manifest(data_dir)[1].classes if _has_manifest(data_dir) else None


def _launcher(requested: str | None, site: Site, partition_default: str, mode: modes.Mode,
              where: Where = cli_where) -> str:
    """The launcher for a run: the user's choice, else the partition's, else the mode's own."""
    allowed_here = backends.scheduler(site.scheduler).launchers
    if requested is not None:
        if requested not in allowed_here:
            raise UserError(f"{where('launcher', requested)}: not available on a "
                            f"{site.scheduler} site (valid here: {', '.join(allowed_here)})")
        if requested not in mode.launchers:
            raise UserError(f"{where('launcher', requested)}: mode '{mode.name}' runs with "
                            f"{', '.join(mode.launchers)}")
        return requested
    if partition_default in mode.launchers and partition_default in allowed_here:
        return partition_default
    for candidate in mode.launchers:
        if candidate in allowed_here:
            return candidate
    raise UserError(f"mode '{mode.name}' cannot be launched on a {site.scheduler} site")


def summary(run: Run) -> dict[str, Any]:
    """The run parameters a results table shows."""
    return {
        "run_id": run.run_id,
        "mode": run.mode,
        "model": run.model,
        "partition": run.partition,
        "nodes": run.nodes,
        "ranks": run.ranks,
        "batch_size": run.batch_size,
        "launcher": run.launcher,
    }


def plan_row(run: Run) -> dict[str, Any]:
    """One run of a plan (``orch sweep --dry-run``): its configuration (the Run's GROUP
    fields), repeat, size and task roles."""
    roles: dict[str, int] = {}
    for task in run.task_table:
        roles[task.role] = roles.get(task.role, 0) + 1
    config = {k: getattr(run, k) for k in group_names()}
    config["options"] = ",".join(f"{k}={v}" for k, v in sorted(run.options.items()))
    config["prefetch"] = run.prefetch if run.data else None
    return {
        **config,
        "repeat": run.repeat,
        "nodes": run.nodes,
        "tasks_per_node": run.tasks_per_node,
        "ranks": run.ranks,
        "tasks": len(run.task_table),
        "roles": ", ".join(f"{n} {role}" for role, n in roles.items()),
        "run_id": run.run_id,
    }
