"""The build files generated from each spec (``orch container generate``): each runtime's
recipe (the Apptainer definition, the Charliecloud build script), all running the same install
steps."""

from __future__ import annotations

import re
from pathlib import Path

from ..backends import templating
from ..containers.base import runtime, runtime_names
from . import specs
from .specs import ImageSpec, load_spec, marker, spec_hash


def _wheel_glob(req: str) -> str:
    """'torch==2.13.0+cpu' -> 'torch-2.13.0+cpu-*.whl' (wheel file names use underscores)."""
    name, _, version = req.partition("==")
    return f"{re.sub(r'[-.]+', '_', name.split('[')[0])}-{version}-*.whl"


def _jinja():
    """The one Jinja environment (templating): shell-safe delimiters, q/qall filters."""
    return templating.environment()


def generate(spec: ImageSpec) -> dict[str, str]:
    """The generated files of one spec: {file name under containers/: text}."""
    ctx = {"spec": spec, "spec_sha256": spec_hash(spec), "marker": marker(spec),
           "wheels": [_wheel_glob(r) for r in spec.pip.local],
           "files": sorted(spec.files.items()), "image_env": spec.image_env()}
    env = _jinja()
    install = env.get_template("containers/_install.sh.j2").render(**ctx)
    ctx["install"] = install
    out: dict[str, str] = {}
    for rt in map(runtime, runtime_names()):  # Apptainer and Singularity share their recipe
        name = rt.recipe(spec.name)
        if name not in out:
            out[name] = env.get_template(rt.recipe_template).render(**ctx)
    return out


def generate_all(check: bool = False) -> list[Path]:
    """Write every spec's generated files; return those that changed (with check: that differ,
    writing nothing)."""
    changed = []
    for name in specs.spec_names():
        for fname, text in generate(load_spec(name)).items():
            path = specs.containers_dir() / fname
            if not path.is_file() or path.read_text() != text:
                changed.append(path)
                if not check:
                    path.write_text(text)
                    if fname.endswith(".sh"):
                        path.chmod(0o755)
    return changed
