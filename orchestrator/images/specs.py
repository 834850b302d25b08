"""Image specs: ``containers/specs/<name>.yaml``, validated and resolved against the framework
environment whose pins it installs; what an image is made of (its hash) and the marker every
image carries inside."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import UserError
from ..resources import data_dir
from ..site import check_env_names, check_pinned, framework_names, load_framework
from ..yamlconf import load_model, location

DEFAULT_MOUNT_POINTS = ("/work", "/scratch", "/project", "/data", "/gpfs", "/lustre")
MARKER = "/etc/orch-image.json"  # written into every image: proof, inside, of which image
# The python3 of each Debian suite: an image's Python is its base's, and must be the version
# its framework environment asks for.
DEBIAN_PYTHON = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13"}

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Base(_Strict):
    distro: Literal["debian"] = "debian"
    suite: str = Field("bookworm", pattern=r"^[a-z]+$")
    variant: Literal["minbase"] = "minbase"
    mirror: str = "http://deb.debian.org/debian"


class Pip(_Strict):
    wheel_dir: str = Field("/opt/wheels", description="host directory of the 'local' wheels")
    local: list[str] = Field(default_factory=list, description="pinned; installed from "
                             "wheel_dir only (--no-index --no-deps), never from an index")
    index: list[str] = Field(default_factory=list, description="pinned; from the package index")

    @field_validator("local", "index")
    @classmethod
    def _pinned(cls, v: list[str]) -> list[str]:
        return check_pinned(v)


class ImageSpec(_Strict):
    """One framework environment image, resolved: what the generated files, the spec hash and
    the image's marker are made of (a spec file's ``environment`` already merged into ``pip``)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    framework: str = Field(description="the site environment key it serves")
    description: str
    base: Base = Field(default_factory=Base)
    apt: list[str] = Field(min_length=1)
    venv: str = "/opt/venv"
    pip: Pip = Field(default_factory=Pip)
    files: dict[str, str] = Field(default_factory=dict,
                                  description="checkout path -> image path, before 'post'")
    post: list[str] = Field(default_factory=list, description="shell steps after pip")
    env: dict[str, str] = Field(default_factory=dict)
    mount_points: list[str] = Field(default_factory=lambda: list(DEFAULT_MOUNT_POINTS))

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        """Keys become ``export KEY=…`` lines of the image's environment scripts."""
        return check_env_names(v)

    @field_validator("mount_points")
    @classmethod
    def _absolute(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.startswith("/") or p == "/":
                raise ValueError(f"mount point '{p}' must be an absolute directory below /")
        return v

    @property
    def path(self) -> str:
        return f"{self.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def image_env(self) -> list[tuple[str, str]]:
        """The environment inside the image (Apptainer %environment, /ch/environment)."""
        return [("PATH", self.path), ("LANG", "C.UTF-8"), *sorted(self.env.items())]


class SpecPip(Pip):
    """``pip`` of a spec file: with ``environment``, ``local`` and ``index`` hold the image's own
    pins, installed after the framework environment's."""

    from_wheel_dir: dict[str, str] = Field(
        default_factory=dict,
        description="framework environment packages installed from wheel_dir instead of the "
        "index: name -> local version label appended to its pin ('cpu': torch==2.13.0 -> "
        "torch==2.13.0+cpu; '': the pin as it is)")

    @field_validator("from_wheel_dir")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for name, label in v.items():
            if not re.match(r"^[A-Za-z0-9.]*$", label):
                raise ValueError(f"'{name}': local version label '{label}' must be letters, "
                                 f"digits and dots, without the '+' (e.g. 'cpu')")
        return v


class SpecFile(ImageSpec):
    """containers/specs/<name>.yaml as written: an ImageSpec that may take its framework's pins
    from frameworks/<environment>.yaml."""

    environment: str | None = Field(
        None, description="framework environment (frameworks/<name>.yaml) whose pinned "
        "packages the image installs first, in order; the image's Python must be its version")
    pip: SpecPip = Field(default_factory=SpecPip)


def _req_name(req: str) -> str:
    """The normalized project name of a requirement ('PyYAML[x]==6' -> 'pyyaml')."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[=<>!~; ]", req, maxsplit=1)[0]).lower()


def resolve_spec(source: SpecFile, path: Path, root=None) -> ImageSpec:
    """The resolved ImageSpec: the framework environment's pins first (those named in
    ``pip.from_wheel_dir`` from the wheel directory, the others from the index), then the
    spec's own. A package pinned by both is an error: the framework's pin is the one place."""
    data = source.model_dump(mode="json", exclude={"environment"})
    pip = data["pip"]
    wheels = pip.pop("from_wheel_dir")

    def fail(field: list, msg: str):
        raise UserError(f"{location(path, root, field)}: {'.'.join(field)}: {msg}")

    if source.environment is None:
        if wheels:
            fail(["pip", "from_wheel_dir"], "takes packages of a framework environment: "
                 "add 'environment: <name>' (frameworks/<name>.yaml), or list the pins in "
                 "pip.local")
        return ImageSpec.model_validate(data)
    names = framework_names()
    if source.environment not in names:
        fail(["environment"], f"unknown framework environment '{source.environment}'; valid: "
             f"{', '.join(names) or '(none)'} (frameworks/<name>.yaml)")
    fw = load_framework(source.environment)
    fw_file = f"frameworks/{source.environment}.yaml"
    suite_python = DEBIAN_PYTHON.get(source.base.suite)
    if suite_python and suite_python != fw.python:
        fail(["base", "suite"], f"Debian {source.base.suite}'s python3 is {suite_python}, but "
             f"{fw_file} asks for Python {fw.python}")
    pinned = {_req_name(r): r for r in fw.packages}
    unknown = sorted(set(map(_req_name, wheels)) - set(pinned))
    if unknown:
        fail(["pip", "from_wheel_dir"], f"{', '.join(unknown)} not pinned in {fw_file} "
             f"(its packages: {', '.join(pinned)})")
    for field in ("local", "index"):
        for req in pip[field]:
            if _req_name(req) in pinned:
                fail(["pip", field], f"'{req}': {fw_file} pins {pinned[_req_name(req)]}; "
                     f"change the version there (one place for sites and images), not here")
    labels = {_req_name(n): label for n, label in wheels.items()}
    local = [r + (f"+{labels[_req_name(r)]}" if labels[_req_name(r)] else "")
             for r in fw.packages if _req_name(r) in labels]
    index = [r for r in fw.packages if _req_name(r) not in labels]
    pip["local"], pip["index"] = local + pip["local"], index + pip["index"]
    try:
        return ImageSpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{path}: with the pins of {fw_file}: {exc}") from None


def containers_dir() -> Path:
    try:
        return data_dir("containers")
    except FileNotFoundError:
        raise UserError("containers/ is not here: image specs come with an orch checkout") from None


def spec_names() -> list[str]:
    return sorted(p.stem for p in (containers_dir() / "specs").glob("*.yaml"))


def load_spec(name: str) -> ImageSpec:
    """containers/specs/<name>.yaml, validated and resolved against its framework environment;
    errors say file:line, field, problem."""
    path = containers_dir() / "specs" / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"unknown image '{name}'; valid: {', '.join(spec_names())} "
                        f"(containers/specs/<name>.yaml)")
    source, root = load_model(path, SpecFile, "image spec",
                              "name, framework, environment, apt, pip…")
    if source.name != name:
        raise UserError(f"{path}: name '{source.name}' must match the file name '{name}'")
    try:
        return resolve_spec(source, path, root)
    except UserError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise UserError(f"{path}: {exc}") from None  # its framework environment's own error


def spec_hash(spec: ImageSpec) -> str:
    """sha256 of the spec and of every file it copies in: what the image is made of."""
    h = hashlib.sha256(json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode())
    root = containers_dir().parent
    for src in sorted(spec.files):
        h.update(b"\0" + src.encode() + b"\0")
        h.update((root / src).read_bytes() if (root / src).is_file() else b"(missing)")
    return h.hexdigest()


def marker(spec: ImageSpec) -> str:
    """The JSON written to /etc/orch-image.json in the image (one line)."""
    data = {"name": spec.name, "framework": spec.framework, "spec_sha256": spec_hash(spec),
            "base": f"{spec.base.distro} {spec.base.suite} ({spec.base.variant})",
            "apt": spec.apt, "pip": spec.pip.local + spec.pip.index}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
