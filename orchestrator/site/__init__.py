"""Site configs: what a cluster offers (partitions, interconnects, environments).

A site admin adds one YAML file to a directory of the site search path (``SEARCH_PATH``:
``$ORCH_SITE_PATH``, the user's ``~/.config/orch/sites``, ``/etc/orch/sites``, then the shipped
``site-configs/``); ``--site NAME`` finds the first ``NAME.yaml``. Each file is validated by
the pydantic models below, which are also the published JSON schema (``orch site schema``), so
the schema and the checks can never disagree. Errors name the file, the line, the field and
what was expected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from .. import backends, containers, units
from ..backends.slurm import timelimit
from ..errors import UserError
from ..resources import data_dir
from ..yamlconf import control_chars, dotted, format_validation_error, load_model, read_yaml

Interconnect = Literal["infiniband", "ethernet"]


def _registered(kind: str, names: tuple[str, ...], commas: bool = False):
    """A str field that must name a registered scheduler, launcher (backends) or container
    runtime (containers): the JSON schema lists them, and a wrong one gets the message a
    Literal gives (``commas``: "'a', 'b' or 'c'", as pydantic lists them; without, the
    "'a' or 'b' or 'c'" schedulers and launchers have always said)."""
    shown = [repr(n) for n in names]
    listed = (f"{', '.join(shown[:-1])} or {shown[-1]}" if commas and len(shown) > 1
              else " or ".join(shown))

    def check(value: str) -> str:
        if value not in names:
            raise ValueError(f"Input should be {listed}")
        return value

    return Annotated[str, AfterValidator(check), WithJsonSchema({"enum": list(names),
                                                                 "type": "string"})]


Scheduler = _registered("scheduler", backends.scheduler_names())
Launcher = _registered("launcher", backends.launcher_names())
ContainerRuntime = _registered("container runtime", containers.runtime_names(), commas=True)

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# NAME==VERSION (extras allowed): how every package of a framework environment is pinned.
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")


def check_pinned(requirements: list[str]) -> list[str]:
    """Every pip requirement pinned (NAME==VERSION): an environment or image built from them
    today and in a year holds the same packages."""
    for req in requirements:
        if not PIN.match(req):
            raise ValueError(f"'{req}' is not pinned: write NAME==VERSION")
    return requirements


def check_env_names(env: dict[str, str]) -> dict[str, str]:
    """``env`` if every key is a shell variable name (the whole key: no trailing newline)."""
    for key in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"'{key}' is not a valid environment variable name")
    return env


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_control(cls, data: Any) -> Any:
        """No control character in any value: they could end a comment line of a script."""
        bad = control_chars(data) if isinstance(data, dict) else None
        if bad:
            raise ValueError(f"{dotted(list(bad[0]))}: control characters (newline, tab, "
                             f"NUL…) are not allowed (got {bad[1]})")
        return data


def _check_time(v: str | None) -> str | None:
    """A Slurm time limit that is well formed and not zero (0 means: no time at all)."""
    if v is None:
        return v
    limit = timelimit.seconds(v)  # ValueError naming Slurm's forms
    if limit is None:
        raise ValueError(f"'{v}': a run needs a limit; give e.g. '1-00:00:00' for a day")
    timelimit.check_fields(v)
    if not limit:
        raise ValueError("a time limit of 0 ends every run at once; give e.g. '00:30:00'")
    return v


# Linux interface names: 1-15 bytes, no '/', ':' or whitespace (dev_valid_name).
_IFNAME = r"^[^/:\s]{1,15}$"
# A node's name on a fabric: letters, digits, dots and dashes around one {host}.
FABRIC_HOSTNAME = r"^[A-Za-z0-9.-]*\{host\}[A-Za-z0-9.-]*$"
# srun's binding values as Slurm spells them (srun(1), --cpu-bind, --gpu-bind, --gpus-per-task):
# a keyword, or a map/mask keyword with its list (numbers, 0x masks, N*count); nothing else
# reaches the srun line, so no value can be shell.
_BIND_LIST = r"[0-9A-Fa-fx*,]{1,512}"
CPU_BIND = (rf"^((quiet|verbose),)?(none|rank|rank_ldom|ldoms|sockets|cores|threads|boards|"
            rf"(map_cpu|mask_cpu|map_ldom|mask_ldom):{_BIND_LIST})$")
GPU_BIND = (rf"^(verbose,)?(closest|none|(map_gpu|mask_gpu):{_BIND_LIST}|"
            rf"(per_task|single):[1-9][0-9]{{0,3}})$")
GPUS_PER_TASK = r"^([A-Za-z0-9_.-]{1,64}:)?[1-9][0-9]{0,2}$"
_BIND_HELP = {
    "cpu_bind": "a Slurm --cpu-bind value: none, rank, cores, sockets, threads, ldoms, boards, "
                "rank_ldom, or map_cpu:/mask_cpu:/map_ldom:/mask_ldom: with its list "
                "(e.g. 'cores', 'map_cpu:0,16'), optionally after 'verbose,'",
    "gpu_bind": "a Slurm --gpu-bind value: closest, none, map_gpu:LIST, mask_gpu:LIST, "
                "per_task:N or single:N (e.g. 'closest', 'map_gpu:0,1,2,3'), optionally after "
                "'verbose,'",
    "gpus_per_task": "a Slurm --gpus-per-task value: a count, or TYPE:COUNT (e.g. 1, 'a100:1')",
}


class SbatchOptions(_Strict):
    """Site-wide or partition-wide ``#SBATCH`` options that every job on it needs."""

    account: str | None = Field(None, description="--account, charged for the job")
    qos: str | None = Field(None, description="--qos")
    constraint: str | None = Field(None, description="--constraint (node features)")
    reservation: str | None = Field(None, description="--reservation")
    exclusive: bool = Field(False, description="--exclusive: nodes not shared with other jobs")
    time: str | None = Field(
        None, description="default --time limit ([D-]HH:MM:SS or minutes); a sweep may lower it"
    )
    extra: list[str] = Field(
        default_factory=list,
        description="further sbatch flags, verbatim (e.g. '--mail-type=FAIL'); never GPUs, which "
        "gpus_per_node and gpu_request ask for")

    @field_validator("time")
    @classmethod
    def _time_format(cls, v: str | None) -> str | None:
        return _check_time(v)

    @field_validator("extra")
    @classmethod
    def _flags(cls, v: list[str]) -> list[str]:
        for flag in v:
            if not re.match(r"^--[A-Za-z][A-Za-z0-9-]*(=.+)?$", flag):
                raise ValueError(f"'{flag}' is not an sbatch long option; write '--name=value'")
            if _GPU_REQUEST.match(flag):
                raise ValueError(
                    f"'{flag}' asks for GPUs, which orch already asks for from the partition's "
                    "gpus_per_node (--gpus-per-node=N, or --gres=gpu:N with gpu_request: gres): "
                    "remove it from extra")
        return v


# sbatch options that ask for GPUs: a second request beside the one gpus_per_node renders
# would ask twice (Slurm then takes one of them, or refuses the job). A GRES that is not a GPU
# (--gres=nvme:1) stays allowed.
_GPU_REQUEST = re.compile(r"^--(gpus(-per-[a-z]+)?|gres=(.*,)?gpu([:,]|$).*)(=|$)")


class Partition(_Strict):
    """One Slurm partition (or the local machine) and the fabric its nodes talk over."""

    name: str = Field(pattern=_NAME, max_length=64, description="Slurm partition name (-p)")
    interconnect: Interconnect = Field(
        description="fabric between the nodes; decides the NCCL/Gloo/MPI transport settings"
    )
    nodes: int = Field(ge=1, le=65536, strict=True,
                       description="nodes a job may use in this partition")
    cpus_per_node: int = Field(ge=1, le=4096, strict=True, description="CPU cores per node")
    gpus_per_node: int = Field(0, ge=0, le=64, strict=True,
                               description="GPUs per node (0: CPU-only)")
    memory_per_node_gb: float | None = Field(None, gt=0, description="usable memory per node, GiB")
    socket_ifname: str = Field(
        pattern=_IFNAME,
        description="NIC for socket traffic (TCP bootstrap, Gloo, MPI over TCP), e.g. ib0, eth0, lo"
    )
    ib_hca: list[str] = Field(
        default_factory=list,
        description="InfiniBand HCAs for NCCL_IB_HCA / UCX, e.g. [mlx5_0]; infiniband only",
    )
    fabric_hostname: str | None = Field(
        None, pattern=FABRIC_HOSTNAME,
        description="a node's name on this partition's fabric, from its Slurm name {host}, "
        "e.g. '{host}-ib' where node1-ib resolves to node1's address on socket_ifname; the "
        "rendezvous (MASTER_ADDR), TensorFlow's TF_CONFIG and MXNet's scheduler then address "
        "the nodes on this fabric. Unset: the Slurm node names")
    emulated_by: str | None = Field(
        None, pattern=r"^[^\n\r]{1,200}$",
        description="what really carries this partition's fabric where it emulates one (the "
        "test cluster: 'a veth pair shaped by tc'); fabric attestation then checks the named "
        "interface and its bytes, not its device type, and says the fabric is emulated")
    launcher: Launcher = Field("srun", description="default launcher of multi-node jobs")
    sbatch: SbatchOptions = Field(default_factory=SbatchOptions,
                                  description="#SBATCH options every job on the partition needs")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="variables set after the interconnect's defaults, overriding them "
        "(e.g. OMPI_MCA_pml where UCX is missing)",
    )
    min_busbw: str | None = Field(
        None, description="the lowest all-reduce bus bandwidth across nodes (nccl-tests' busbw, "
        "e.g. 20GB/s or 100Gb/s) a sweep's pre-flight must measure; below it the sweep stops "
        "before its runs (a degraded link found in a minute, not after a night)")
    peak_tflops: dict[Literal["fp32", "tf32", "bf16", "fp16"],
                      Annotated[float, Field(gt=0, le=1e6)]] = Field(
        default_factory=dict,
        description="dense peak TFLOP/s of one device (GPU, or a CPU rank's cores) of this "
        "partition per precision, e.g. {bf16: 989.4}: MFU's denominator where orch's table of "
        "devices lacks it (a CPU) or should be overridden")
    gpu_request: Literal["gpus-per-node", "gres"] = Field(
        "gpus-per-node", description="the sbatch option that asks for the node's GPUs: "
        "'gpus-per-node' (--gpus-per-node=N) or 'gres' (--gres=gpu:N, for sites that reject "
        "--gpus-per-node)")
    gpus_per_task: Annotated[str | None, WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 1},
                   {"type": "string", "pattern": GPUS_PER_TASK}, {"type": "null"}]})] = Field(
        None,
        description="srun --gpus-per-task: GPUs bound to each rank (a count or TYPE:COUNT); "
        "unset: srun's default")
    gpu_bind: str | None = Field(
        None, json_schema_extra={"pattern": GPU_BIND},
        description="srun --gpu-bind, e.g. closest or map_gpu:0,1,2,3; unset: srun's default "
        "(which changed between Slurm 21.08, 22.05 and 23.11)")
    cpu_bind: str | None = Field(
        None, json_schema_extra={"pattern": CPU_BIND},
        description="srun --cpu-bind, e.g. cores, sockets or map_cpu:0,16; unset: srun's default")

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env_names(v)

    @field_validator("min_busbw")
    @classmethod
    def _busbw(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                units.parse_bandwidth(v, "min_busbw")
            except UserError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("gpus_per_task", mode="before")
    @classmethod
    def _count_as_text(cls, v: object) -> object:
        """``gpus_per_task: 1`` is how a person writes a count in YAML; Slurm takes it as text."""
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("gpus_per_task", "gpu_bind", "cpu_bind")
    @classmethod
    def _binding(cls, v: str | None, info: ValidationInfo) -> str | None:
        """Slurm's own spelling only (an allowlist): the value goes onto the srun line."""
        pattern = {"cpu_bind": CPU_BIND, "gpu_bind": GPU_BIND,
                   "gpus_per_task": GPUS_PER_TASK}[str(info.field_name)]
        if v is not None and not re.fullmatch(pattern, v):
            raise ValueError(f"expected {_BIND_HELP[str(info.field_name)]}")
        return v

    @property
    def fabric_host_parts(self) -> tuple[str, str] | None:
        """(prefix, suffix) around a node's Slurm name that name it on this fabric (None:
        the Slurm name itself)."""
        if not self.fabric_hostname:
            return None
        prefix, _, suffix = self.fabric_hostname.partition("{host}")
        return prefix, suffix

    @property
    def min_busbw_bytes(self) -> float | None:
        """``min_busbw`` in bytes/s (None: not declared)."""
        return units.parse_bandwidth(self.min_busbw) if self.min_busbw is not None else None

    @model_validator(mode="after")
    def _fabric(self) -> Partition:
        if self.ib_hca and self.interconnect != "infiniband":
            raise ValueError("ib_hca is only meaningful when interconnect is 'infiniband'")
        gpu_fields = [k for k in ("gpus_per_task", "gpu_bind") if getattr(self, k)]
        if gpu_fields and not self.gpus_per_node:
            raise ValueError(f"{gpu_fields[0]} needs GPUs: set gpus_per_node, or drop "
                             f"{gpu_fields[0]} on this CPU partition")
        if self.gpus_per_task and int(self.gpus_per_task.rpartition(":")[2]) > self.gpus_per_node:
            raise ValueError(f"gpus_per_task {self.gpus_per_task} is more than the node's "
                             f"{self.gpus_per_node} GPU(s) (gpus_per_node)")
        return self


class Container(_Strict):
    """A container image every rank runs in: job.sbatch points ORCH_PYTHON at a rendered
    wrapper (container-python) that starts ``python`` inside the image through the runtime."""

    image: str = Field(pattern=r"\S", description="image path (.sif, SquashFS, or "
                       "directory; '~' expands)")
    runtime: ContainerRuntime = Field("apptainer", description="what runs the image")
    binds: list[str] = Field(default_factory=list, description="extra SRC[:DST] bind mounts "
                             "(data directories)")
    python: str = Field("python3", pattern=r"^\S+$",
                        description="the python executable inside the image")

    @field_validator("binds")
    @classmethod
    def _binds(cls, v: list[str]) -> list[str]:
        for b in v:
            if not b.strip() or b.startswith(":"):
                raise ValueError(f"bind '{b}' is empty; write SRC[:DST]")
        return v


class _BuildFields(_Strict):
    python: str = Field(pattern=r"^3\.\d+$", description="Python version, e.g. '3.11' "
                        "(found as pythonX.Y on PATH or under pyenv)")
    packages: list[str] = Field(default_factory=list, description="pinned pip requirements, "
                                "installed in one pip call")
    pip_args: list[str] = Field(default_factory=list, description="extra pip install flags")
    steps: list[str] = Field(
        default_factory=list,
        description="shell steps run after pip, with $VENV, $PYTHON, $PIP and "
        "$ORCH_ENV_SCRIPTS (orch's build scripts) set",
    )


class EnvBuild(_BuildFields):
    """How ``orch env build`` creates an environment's venv (sites whose nodes share a disk).

    A site config gives either a framework environment's name (``build: torch-mpi``: the one
    definition in ``frameworks/torch-mpi.yaml``) or, for a site-specific build, the fields
    inline. Either way the validated site holds the resolved fields; ``source`` says which.
    """

    source: str | None = Field(
        None,
        description="where the build is defined: 'frameworks/<name>.yaml' when the site names "
        "a framework environment (filled in by orch); unset: inline in the site config. Not "
        "part of the build's hash",
    )

    def described(self) -> dict[str, Any]:
        """What the build is made of, without where it was written: what its hash covers."""
        return self.model_dump(mode="json", exclude={"source"})


class Framework(_BuildFields):
    """One framework environment, defined once in ``frameworks/<name>.yaml``: its Python, pinned
    packages, pip flags and build steps. Site environments refer to it (``build: <name>``) and
    container specs take its pins (``environment: <name>``), so a version bump is one edit."""

    description: str = Field(description="one line: what the environment holds")

    @field_validator("packages")
    @classmethod
    def _pinned(cls, v: list[str]) -> list[str]:
        return check_pinned(v)

    def env_build(self, name: str) -> EnvBuild:
        fields = self.model_dump(mode="json", exclude={"description"})
        return EnvBuild(**fields, source=f"frameworks/{name}.yaml")


def _build_kind(value: Any) -> str:
    return "framework-name" if isinstance(value, str) else "inline-build"


# A framework environment's name, or the build fields inline (the tags only steer validation
# and its error messages; format_validation_error leaves them out of field paths and says
# what an inline build must be).
BuildRef = Annotated[
    Annotated[str, Tag("framework-name"), Field(pattern=_NAME)]
    | Annotated[EnvBuild, Tag("inline-build")],
    Discriminator(_build_kind),
]
_UNION_TAGS = {"framework-name": "", "inline-build": (
    "expected a framework environment's name (frameworks/<name>.yaml) or a mapping of python, "
    "packages, pip_args, steps")}


class Environment(_Strict):
    """How one framework gets onto a node: a Python, modules to load, variables, a container."""

    python: str | None = Field(
        None,
        description="python executable on the nodes; omitted: <venv>/bin/python, else the "
        "Python running orch (the local site's PyTorch environment)",
    )
    venv: str | None = Field(None, description="virtual environment directory ('~' expands)")
    build: BuildRef | None = Field(
        None,
        description="how orch builds the venv (orch env build): a framework environment's name "
        "(frameworks/<name>.yaml, e.g. 'torch-mpi'), or python/packages/pip_args/steps inline",
    )
    modules: list[str] = Field(default_factory=list, description="'module load' lines, in order")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    container: Container | None = Field(
        None, description="run the framework inside this image (apptainer, singularity or "
        "charliecloud)")

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env_names(v)

    @field_validator("build")
    @classmethod
    def _resolve(cls, v: EnvBuild | str | None) -> EnvBuild | None:
        """A name becomes that framework environment's build (a broken frameworks/ file raises
        its own UserError, naming its file and line)."""
        if not isinstance(v, str):
            return v
        names = framework_names()
        if v not in names:
            raise ValueError(f"unknown framework environment '{v}'; valid: "
                             f"{', '.join(names) or '(none)'} (frameworks/<name>.yaml), or "
                             f"give python/packages/steps inline")
        return load_framework(v).env_build(v)

    @model_validator(mode="after")
    def _buildable(self) -> Environment:
        if self.build is not None and self.venv is None:
            raise ValueError("'build' needs 'venv': the directory to build the environment in")
        return self


class Site(_Strict):
    """A cluster (scheduler ``slurm``) or this machine (scheduler ``local``)."""

    name: str = Field(pattern=_NAME, max_length=64,
                      description="site name used on the command line")
    description: str = Field("", description="one line: what the cluster is")
    scheduler: Scheduler = Field(description="'slurm' submits with sbatch; 'local' runs here")
    partitions: list[Partition] = Field(min_length=1, description="the partitions (Slurm) or "
                                        "the one local machine a sweep may use")
    default_partition: str | None = Field(None, description="partition used when none is given")
    environments: dict[str, Environment] = Field(
        description="framework name (torch, tensorflow, mxnet, ...) -> how to run it"
    )
    history: str | None = Field(
        None, description="the results history that orch gather records each finished sweep "
        "of this site in, and orch report draws trends from: an absolute path, ~/... or "
        "$VAR/... (expanded when gathering)")
    # the file it was loaded from (load sets it; provenance records it), not part of the config
    _file: str | None = PrivateAttr(None)

    @field_validator("history")
    @classmethod
    def _history_path(cls, v: str | None) -> str | None:
        # relative to what? The directory orch gather runs in changes; the site file's moves
        if v is not None and not v.startswith(("/", "~", "$")):
            raise ValueError(f"'{v}': give an absolute path, ~/... or $VAR/... (a relative "
                             "path would depend on the directory orch gather runs in)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Site:
        names = [p.name for p in self.partitions]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"partition names must be unique; repeated: {', '.join(sorted(dup))}")
        if self.default_partition and self.default_partition not in names:
            raise ValueError(
                f"default_partition '{self.default_partition}' is not one of the partitions "
                f"({', '.join(names)})"
            )
        available = backends.scheduler(self.scheduler).launchers
        for p in self.partitions:
            if p.launcher not in available:
                raise ValueError(
                    f"partition '{p.name}': launcher '{p.launcher}' is not available on a "
                    f"{self.scheduler} site; use one of: {', '.join(available)}"
                )
        return self

    def __eq__(self, other: object) -> bool:
        """Sites are equal when their configs are: the file one was read from is not part of
        it (a recorded site, validated again for a rerun, is the same site)."""
        if not isinstance(other, Site):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, like every pydantic model

    @property
    def source_file(self) -> str | None:
        """The file the site was loaded from (None: built from a recorded config)."""
        return self._file

    def partition(self, name: str | None) -> Partition:
        """The named partition, or the default one; a clear error lists the valid names."""
        wanted = name or self.default_partition or self.partitions[0].name
        for p in self.partitions:
            if p.name == wanted:
                return p
        valid = ", ".join(p.name for p in self.partitions)
        raise UserError(f"site '{self.name}' has no partition '{wanted}'; valid: {valid}")

    def environment(self, framework: str, source: str = "") -> Environment:
        try:
            return self.environments[framework]
        except KeyError:
            where = f" ({source}: environments.{framework})" if source else ""
            raise UserError(
                f"site '{self.name}' has no environment for framework '{framework}'{where}; "
                f"add one (python/modules/container) to the site config"
            ) from None


def schema() -> dict[str, Any]:
    """The published JSON schema of a site config file."""
    out = Site.model_json_schema()
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = "orch site config"
    return out


# --- loading: the site search path ---------------------------------------------------------

SUFFIX = ".yaml"
# Files kept beside site configs that are not site configs: a site's references
# (NAME.references.yaml, orch check --references).
NOT_SITES = (".references.yaml",)


@dataclass(frozen=True)
class SiteDir:
    """One directory of the site search path."""

    source: str  # what put it on the path: ORCH_SITE_PATH, user, system, shipped
    path: Path


# The site search path, declared once: lookup, ``orch site list``, ``orch site detect`` and the
# docs read it from here. A name is the first ``<dir>/<name>.yaml`` in this order, so a site
# admin's or a user's config of the same name shadows a shipped example.
SEARCH_PATH: tuple[tuple[str, str], ...] = (
    ("ORCH_SITE_PATH", "$ORCH_SITE_PATH: directories separated by ':', searched in order"),
    ("user", "$XDG_CONFIG_HOME/orch/sites (default ~/.config/orch/sites): the user's sites; "
             "orch site detect writes here"),
    ("system", "/etc/orch/sites: the sites a site admin installs for every user"),
    ("shipped", "site-configs/ inside orch: local, testcluster and the examples"),
)
SYSTEM_SITE_DIR = Path("/etc/orch/sites")


def site_dir() -> Path:
    """The shipped site configs (``site-configs/``)."""
    return data_dir("site-configs")


def user_site_dir() -> Path:
    """``$XDG_CONFIG_HOME/orch/sites``, by default ``~/.config/orch/sites``."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config).expanduser() / "orch" / "sites"


def _env_dirs() -> list[Path]:
    """``$ORCH_SITE_PATH``'s directories (empty entries skipped, as PATH's are not: an empty
    entry meaning "here" would make a sweep's site depend on the working directory)."""
    out = []
    for entry in os.environ.get("ORCH_SITE_PATH", "").split(":"):
        if not entry:
            continue
        path = Path(entry).expanduser()
        if path.is_file():
            raise UserError(f"ORCH_SITE_PATH: {path} is a file; list the directories that "
                            f"hold site configs, separated by ':'")
        out.append(path)
    return out


def search_path() -> list[SiteDir]:
    """The directories a site name is looked up in, first match wins (``SEARCH_PATH``)."""
    dirs = {"user": [user_site_dir()], "system": [SYSTEM_SITE_DIR], "shipped": [site_dir()]}
    dirs["ORCH_SITE_PATH"] = _env_dirs()
    return [SiteDir(source, path) for source, _ in SEARCH_PATH for path in dirs[source]]


class SiteEntry(NamedTuple):
    """A site config file on the search path: its name, file and directory, and the file
    that wins over it when an earlier directory has the same name (None: this one wins)."""

    name: str
    path: Path
    source: SiteDir
    shadowed_by: Path | None


def entries() -> list[SiteEntry]:
    """Every site config on the search path, in search order (shadowed ones included)."""
    out: list[SiteEntry] = []
    winner: dict[str, Path] = {}
    for d in search_path():
        files = sorted(d.path.glob(f"*{SUFFIX}")) if d.path.is_dir() else []
        for p in (f for f in files if f.is_file() and not f.name.endswith(NOT_SITES)):
            name = p.name[: -len(SUFFIX)]
            out.append(SiteEntry(name, p, d, winner.get(name)))
            winner.setdefault(name, p)
    return out


def available() -> dict[str, Path]:
    """The sites a name finds: name -> the winning file."""
    return {e.name: e.path for e in entries() if e.shadowed_by is None}


def valid_name(name: str) -> bool:
    """Whether ``name`` can name a site (and so a file on the search path)."""
    return re.fullmatch(_NAME, name) is not None


def _on_path(path: Path) -> bool:
    """Whether ``path`` lies in a directory of the search path (its name is then its file's)."""
    parent = path.resolve().parent
    return any(d.path.resolve() == parent for d in search_path())


def resolve(name_or_path: str) -> Path:
    """A site name, looked up on the search path, or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise UserError(f"site config file {path} does not exist")
        return path
    if valid_name(name_or_path):
        for d in search_path():
            candidate = d.path / f"{name_or_path}{SUFFIX}"
            if candidate.is_file():
                return candidate
    where = ", ".join(str(d.path) for d in search_path())
    raise UserError(
        f"unknown site '{name_or_path}'; valid: {', '.join(sorted(available())) or '(none)'} "
        f"(looked for {name_or_path}{SUFFIX} in {where}: orch site list shows them; or give a "
        f"path to a site YAML file)"
    )


def load(name_or_path: str) -> tuple[Site, Path]:
    """Load and validate a site; errors say file:line, field, problem."""
    path = resolve(name_or_path)
    data, root = read_yaml(path, "site config", "name, scheduler, partitions…")
    try:
        site = Site.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, root, exc, Site, "site config",
                                                _UNION_TAGS)) from None
    except UserError as exc:  # a broken frameworks/<name>.yaml that an environment names
        raise UserError(f"{path}: {exc}") from None
    if site.name != path.stem and _on_path(path):
        raise UserError(f"{path}: name '{site.name}' must match the file name '{path.stem}' "
                        f"(a site on the search path is found by its file name)")
    site._file = str(path.resolve())
    return site, path


# --- framework environments (frameworks/<name>.yaml) ----------------------------------------


def frameworks_dir() -> Path:
    return data_dir("frameworks")


def framework_names() -> list[str]:
    """The framework environments defined in ``frameworks/``, by name (file stem)."""
    return sorted(p.stem for p in frameworks_dir().glob("*.yaml"))


def load_framework(name: str) -> Framework:
    """``frameworks/<name>.yaml``, validated; errors say file:line, field, problem."""
    path = frameworks_dir() / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"unknown framework environment '{name}'; valid: "
                        f"{', '.join(framework_names()) or '(none)'} (frameworks/<name>.yaml)")
    return load_model(path, Framework, "framework environment",
                      "description, python, packages…")[0]
