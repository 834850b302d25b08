"""Framework environments defined once (frameworks/<name>.yaml): site configs name them
(``build: <name>``), container specs take their pins (``environment: <name>``), so a version
bump is one edit; the build and image hashes depend on the resolved content only, so a venv or
image built from the same pins written inline is not rebuilt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from orchestrator import site as sitemod
from orchestrator.errors import UserError
from orchestrator.images import recipes, specs
from orchestrator.site import envs

from .conftest import ROOT, run_orch

SHIPPED = {"torch", "torch-mpi", "tensorflow", "mxnet", "cntk", "chainer"}

SITE = """\
name: mini
scheduler: local
partitions:
  - {name: local, interconnect: ethernet, nodes: 1, cpus_per_node: 1, socket_ifname: lo,
     launcher: local}
environments:
  mxnet:
    venv: /tmp/orch-test-never-built/mxnet
    build: {build}
"""

# Two build sections exactly as local.yaml wrote them inline before frameworks/ existed, and the
# stamps of the venvs built from them: a hash that still matches means no rebuild.
LEGACY_BUILDS = {
    "69a54470ded7e991": {"python": "3.11", "packages": ["mxnet==1.9.1", "numpy==1.23.5"]},
    "c221370dee8057a8": {
        "python": "3.11",
        "packages": ["torch==2.13.0", "numpy==2.3.5", "mpi4py==4.1.2", "cmake==3.31.10",
                     "setuptools==84.0.0", "cloudpickle==3.1.2", "psutil==7.2.2",
                     "pyyaml==6.0.3", "packaging==26.3"],
        "steps": ['bash "$ORCH_ENV_SCRIPTS/build-horovod.sh"']},
}

# containers/specs/torch-mpi.yaml as it was before frameworks/ existed (every pin inline), and
# the spec hash its generated files carry.
LEGACY_TORCH_MPI_SPEC = """\
name: torch-mpi
framework: torch-mpi
description: PyTorch 2.13.0 (CPU) + mpi4py 4.1.2 + Horovod 0.28.1 over Open MPI 4.1 on Debian 12
base: {suite: bookworm, variant: minbase, mirror: "http://deb.debian.org/debian"}
apt: [python3, python3-venv, python3-dev, ca-certificates, g++, make, openmpi-bin,
      libopenmpi-dev]
pip:
  wheel_dir: /opt/wheels
  local: [torch==2.13.0+cpu]
  index: [numpy==2.3.5, mpi4py==4.1.2, cmake==3.31.10, setuptools==84.0.0, cloudpickle==3.1.2,
          psutil==7.2.2, pyyaml==6.0.3, packaging==26.3, filelock==4.2.11,
          typing-extensions==4.16.0, sympy==1.14.0, mpmath==1.3.0, networkx==3.6.1,
          jinja2==3.1.6, markupsafe==3.0.4, fsspec==2026.9.0]
files:
  templates/envs/build-horovod.sh: /opt/orch/build-horovod.sh
post:
  - VENV=/opt/venv PYTHON=/opt/venv/bin/python PIP="/opt/venv/bin/python -m pip install --quiet"
    bash /opt/orch/build-horovod.sh
env:
  OMP_NUM_THREADS: "1"
"""
LEGACY_TORCH_MPI_HASH = "fdbe5568052f8457a2ab6dd0379e1e931471e30ba316cc6d7a7327d6fac7c369"
# The same image written against a framework environment that holds the pins above.
LEGACY_TORCH_MPI_FRAMEWORK = {"description": "torch-mpi as it was", **LEGACY_BUILDS[
    "c221370dee8057a8"]}


def mini_site(tmp_path: Path, build: str) -> Path:
    path = tmp_path / "mini.yaml"
    path.write_text(SITE.replace("{build}", build))
    return path


@pytest.fixture
def frameworks_copy(tmp_path, monkeypatch) -> Path:
    """A copy of frameworks/ that sites and image specs resolve against for this test."""
    copy = tmp_path / "frameworks"
    shutil.copytree(ROOT / "frameworks", copy)
    monkeypatch.setattr(sitemod, "frameworks_dir", lambda: copy)
    return copy


@pytest.fixture
def specs_dir(tmp_path, monkeypatch) -> Path:
    """An empty containers/specs/ for image specs written by the test."""
    top = tmp_path / "containers"
    (top / "specs").mkdir(parents=True)
    monkeypatch.setattr(specs, "containers_dir", lambda: top)
    return top / "specs"


# --- the shipped definitions ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_frameworks_are_valid_and_pinned(name):
    assert set(sitemod.framework_names()) >= SHIPPED
    fw = sitemod.load_framework(name)
    assert fw.packages and all("==" in req for req in fw.packages)


@pytest.mark.parametrize("site_name", ["local", "testcluster"])
def test_shipped_sites_name_the_frameworks_and_hash_like_inline_copies(site_name, tmp_path):
    """local.yaml and testcluster.yaml copy no build section; each resolves to its framework's
    fields and hashes like the same fields written inline (so nothing built is rebuilt)."""
    raw = yaml.safe_load(sitemod.resolve(site_name).read_text())
    site, _ = sitemod.load(site_name)
    for name, env in site.environments.items():
        if env.build is None:
            continue
        assert raw["environments"][name]["build"] == name
        assert env.build.source == envs.build_source(env) == f"frameworks/{name}.yaml"
        fields = sitemod.load_framework(name).model_dump(exclude={"description"})
        inline, _ = sitemod.load(str(mini_site(tmp_path, yaml.safe_dump(fields,
                                                                         default_flow_style=True)
                                               .strip())))
        copy = inline.environments["mxnet"]
        assert copy.build.source is None and envs.build_source(copy) == "inline"
        assert envs.spec_hash(copy) == envs.spec_hash(env)


@pytest.mark.parametrize("stamp", sorted(LEGACY_BUILDS))
def test_the_build_hash_ignores_where_the_build_is_written(stamp, tmp_path):
    """The stamp of a venv built before frameworks/ existed still matches its inline build,
    with or without a source recorded: the hash covers the resolved fields only."""
    inline = sitemod.EnvBuild(**LEGACY_BUILDS[stamp])
    env = sitemod.Environment(venv="/tmp/x", build=inline)
    assert envs.spec_hash(env) == stamp
    named = env.model_copy(update={"build": inline.model_copy(
        update={"source": "frameworks/x.yaml"})})
    assert envs.spec_hash(named) == stamp


def test_shipped_images_take_their_frameworks_pins_first():
    for name in ("torch", "torch-mpi", "tensorflow", "mxnet"):
        spec = specs.load_spec(name)
        fw = sitemod.load_framework(name)
        raw = yaml.safe_load((ROOT / "containers" / "specs" / f"{name}.yaml").read_text())
        assert raw["environment"] == name
        pins = spec.pip.local + spec.pip.index
        for req in fw.packages:  # torch from the wheel directory, as the +cpu build
            assert req in pins or f"{req}+cpu" in spec.pip.local
    assert specs.load_spec("torch-mpi").pip.local == ["torch==2.13.0+cpu"]


def test_image_resolved_from_a_framework_is_the_legacy_inline_image(specs_dir, tmp_path,
                                                                    monkeypatch):
    """Same pins, now from frameworks/: the same ImageSpec, spec hash and generated files."""
    fw_dir = tmp_path / "fw"
    fw_dir.mkdir()
    (fw_dir / "torch-mpi.yaml").write_text(yaml.safe_dump(LEGACY_TORCH_MPI_FRAMEWORK))
    monkeypatch.setattr(sitemod, "frameworks_dir", lambda: fw_dir)
    monkeypatch.setattr(specs, "containers_dir",
                        lambda: ROOT / "containers")  # build-horovod.sh is hashed too
    legacy = specs.ImageSpec.model_validate(yaml.safe_load(LEGACY_TORCH_MPI_SPEC))
    assert specs.spec_hash(legacy) == LEGACY_TORCH_MPI_HASH
    text = (ROOT / "containers" / "specs" / "torch-mpi.yaml").read_text()
    source = specs.SpecFile.model_validate(yaml.safe_load(text))
    resolved = specs.resolve_spec(source, Path("torch-mpi.yaml"))
    if resolved.model_dump(exclude={"pip"}) != legacy.model_dump(exclude={"pip"}):
        pytest.skip("the shipped torch-mpi spec changed beyond its pins since this snapshot")
    if source.pip.index != legacy.pip.index[8:]:  # after the framework's 8 index pins
        pytest.skip("the shipped torch-mpi spec's own pins changed since this snapshot")
    assert resolved == legacy
    assert specs.spec_hash(resolved) == LEGACY_TORCH_MPI_HASH
    assert recipes.generate(resolved) == recipes.generate(legacy)


# --- a version bump is one edit ---------------------------------------------------------------


def test_a_version_bump_is_one_edit(frameworks_copy):
    """One pin changed in frameworks/torch-mpi.yaml: both sites' torch-mpi venvs and the
    torch-mpi image see it (new packages, new build stamp, new image hash and files)."""
    before_sites = {n: sitemod.load(n)[0].environments["torch-mpi"] for n in
                    ("local", "testcluster")}
    before_image = specs.load_spec("torch-mpi")
    path = frameworks_copy / "torch-mpi.yaml"
    path.write_text(path.read_text().replace("numpy==2.3.5", "numpy==2.3.6"))

    for name, old in before_sites.items():
        env = sitemod.load(name)[0].environments["torch-mpi"]
        assert "numpy==2.3.6" in env.build.packages and "numpy==2.3.5" not in env.build.packages
        assert envs.spec_hash(env) != envs.spec_hash(old)
    image = specs.load_spec("torch-mpi")
    assert "numpy==2.3.6" in image.pip.index and "numpy==2.3.5" not in image.pip.index
    assert specs.spec_hash(image) != specs.spec_hash(before_image)
    assert "numpy==2.3.6" in recipes.generate(image)["torch-mpi.def"]
    # The checked-in generated files are now stale: the drift check says so.
    assert recipes.generate(image) != recipes.generate(before_image)


def test_torch_bump_reaches_the_wheel_directory_pin(frameworks_copy):
    path = frameworks_copy / "torch.yaml"
    path.write_text(path.read_text().replace("torch==2.13.0", "torch==2.14.0"))
    spec = specs.load_spec("torch")
    assert spec.pip.local == ["torch==2.14.0+cpu"]
    assert "torch-2.14.0+cpu-*.whl" in recipes.generate(spec)["torch.def"]


# --- references: unknown names, broken files, the inline form ---------------------------------


def test_unknown_framework_name_names_file_line_field_and_valid_names(tmp_path):
    path = mini_site(tmp_path, "mxnet-1.9")
    with pytest.raises(UserError) as err:
        sitemod.load(str(path))
    msg = str(err.value)
    assert f"{path}:9: environments.mxnet.build:" in msg
    assert "unknown framework environment 'mxnet-1.9'; valid: chainer, cntk, mxnet" in msg
    assert "(frameworks/<name>.yaml)" in msg and "inline" in msg
    proc = run_orch("site", "validate", path)
    assert proc.returncode == 2 and "unknown framework environment 'mxnet-1.9'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_build_that_is_neither_a_name_nor_a_mapping(tmp_path):
    with pytest.raises(UserError, match=r"mini.yaml:9: environments\.mxnet\.build: expected a "
                       r"framework environment's name .* or a mapping of python, packages"):
        sitemod.load(str(mini_site(tmp_path, "[mxnet]")))


def test_broken_framework_file_names_its_file_line_and_field(frameworks_copy, tmp_path):
    path = frameworks_copy / "mxnet.yaml"
    path.write_text(path.read_text().replace("mxnet==1.9.1", "mxnet>=1.9")
                    .replace("description:", "descripton:"))
    site_path = mini_site(tmp_path, "mxnet")
    with pytest.raises(UserError) as err:
        sitemod.load(str(site_path))
    msg = str(err.value)
    assert msg.startswith(f"{site_path}: invalid framework environment")
    assert f"{path}:" in msg and "packages: Value error, 'mxnet>=1.9' is not pinned" in msg
    assert "descripton: unknown field; valid fields here: description, packages" in msg


def test_inline_build_still_works_and_hashes_like_the_reference(tmp_path):
    inline, _ = sitemod.load(str(mini_site(
        tmp_path, '{python: "3.11", packages: [mxnet==1.9.1, numpy==1.23.5]}')))
    env = inline.environments["mxnet"]
    assert env.build.packages == ["mxnet==1.9.1", "numpy==1.23.5"]
    assert envs.build_source(env) == "inline" and not envs.is_built(env)
    named, _ = sitemod.load(str(mini_site(tmp_path, "mxnet")))
    same = sitemod.load_framework("mxnet").packages == env.build.packages
    assert (envs.spec_hash(named.environments["mxnet"]) == envs.spec_hash(env)) is same


def test_a_recorded_site_keeps_its_resolved_builds(frameworks_copy, tmp_path):
    """A run's provenance holds the resolved site: re-validating it (orch rerun) reads no
    frameworks/ file, so a later bump does not change what a rerun builds against."""
    site, _ = sitemod.load("local")
    for p in frameworks_copy.iterdir():
        p.unlink()
    again = sitemod.Site.model_validate(site.model_dump(mode="json"))
    assert again == site
    assert again.environments["torch-mpi"].build.source == "frameworks/torch-mpi.yaml"


# --- image specs: references and their errors -------------------------------------------------


def write_spec(specs_dir: Path, text: str, name: str = "img") -> None:
    (specs_dir / f"{name}.yaml").write_text(text)


SPEC = """\
name: img
framework: mxnet
description: test image
apt: [python3]
environment: mxnet
pip:
  index: [requests==2.34.2]
"""


def test_image_spec_takes_the_framework_pins_then_its_own(specs_dir):
    write_spec(specs_dir, SPEC)
    spec = specs.load_spec("img")
    assert spec.pip.index == ["mxnet==1.9.1", "numpy==1.23.5", "requests==2.34.2"]


def test_inline_image_spec_still_works(specs_dir):
    write_spec(specs_dir, SPEC.replace("environment: mxnet\n", ""))
    assert specs.load_spec("img").pip.index == ["requests==2.34.2"]


@pytest.mark.parametrize(("change", "expected"), [
    (("environment: mxnet", "environment: mxnet2"),
     r"img.yaml:5: environment: unknown framework environment 'mxnet2'; valid: chainer, cntk, "
     r"mxnet"),
    (("requests==2.34.2", "numpy==1.26.4"),
     r"img.yaml:7: pip.index: 'numpy==1.26.4': frameworks/mxnet.yaml pins numpy==1.23.5; "
     r"change the version there"),
    (("  index:", "  from_wheel_dir: {torch: cpu}\n  index:"),
     r"img.yaml:7: pip.from_wheel_dir: torch not pinned in frameworks/mxnet.yaml \(its "
     r"packages: mxnet, numpy\)"),
    (("apt:", "base: {suite: trixie}\napt:"),
     r"img.yaml:4: base.suite: Debian trixie's python3 is 3.13, but frameworks/mxnet.yaml asks "
     r"for Python 3.11"),
    (("environment: mxnet", "enviroment: mxnet"),
     r"img.yaml:5: enviroment: unknown field; valid fields here: .*environment"),
])
def test_image_spec_reference_errors_name_file_line_and_field(specs_dir, change, expected):
    write_spec(specs_dir, SPEC.replace(*change))
    with pytest.raises(UserError, match=expected):
        specs.load_spec("img")


# --- the command line shows where each build comes from ---------------------------------------


def test_env_list_and_site_show_say_where_builds_come_from():
    listed = run_orch("env", "list", check=True).stdout
    assert "build from" in listed
    row = next(line for line in listed.splitlines() if line.split()[:1] == ["torch-mpi"])
    assert "frameworks/torch-mpi.yaml" in row
    shown = run_orch("site", "show", "testcluster", check=True).stdout
    assert "source: frameworks/torch-mpi.yaml" in shown
