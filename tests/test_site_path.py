"""The site search path (orchestrator/site/__init__.py's SEARCH_PATH): $ORCH_SITE_PATH, the user's
~/.config/orch/sites, /etc/orch/sites, the shipped site-configs/; ``orch site list|show|detect``
on it, and the commands that look a site up by name finding it there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from orchestrator import site as sitemod
from orchestrator.errors import UserError
from orchestrator.runs import provenance
from orchestrator.site import detect as sitedetect

from .conftest import LOCAL, ROOT, orch, results, run_orch

SINFO = "debug*|2|4|7900|(null)|(null)|infinite\n"


def local_as(directory: Path, name: str, description: str = "") -> Path:
    """The shipped local site, renamed ``name``, written to ``directory/NAME.yaml``."""
    directory.mkdir(parents=True, exist_ok=True)
    data = {**LOCAL, "name": name, "description": description or f"{name} in {directory.name}"}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def dirs(tmp_path, monkeypatch) -> dict[str, Path]:
    """Every directory of the search path in a temporary place (two on $ORCH_SITE_PATH)."""
    d = {name: tmp_path / name for name in ("env1", "env2", "config", "etc")}
    monkeypatch.setenv("ORCH_SITE_PATH", f"{d['env1']}::{d['env2']}:")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(d["config"]))
    monkeypatch.setattr(sitemod, "SYSTEM_SITE_DIR", d["etc"])
    d["user"] = d["config"] / "orch" / "sites"
    return d


def test_search_path_order(dirs):
    """$ORCH_SITE_PATH's directories in order (empty entries skipped), the user's, the
    system's, the shipped ones: the order SEARCH_PATH declares."""
    got = [(d.source, d.path) for d in sitemod.search_path()]
    assert got == [("ORCH_SITE_PATH", dirs["env1"]), ("ORCH_SITE_PATH", dirs["env2"]),
                   ("user", dirs["user"]), ("system", dirs["etc"]),
                   ("shipped", sitemod.site_dir())]
    assert [s for s, _ in sitemod.SEARCH_PATH] == ["ORCH_SITE_PATH", "user", "system",
                                                    "shipped"]


def test_user_dir_defaults_to_dot_config(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sitemod.user_site_dir() == tmp_path / ".config" / "orch" / "sites"


def test_first_match_wins_and_list_marks_the_shadowed(dirs):
    first = local_as(dirs["env2"], "mine", "the first")
    later = [local_as(dirs[k], "mine") for k in ("user", "etc")]
    local_as(dirs["etc"], "local", "a system 'local' shadows the shipped one")
    site, path = sitemod.load("mine")
    assert path == first and site.description == "the first"
    assert sitemod.load("local")[1] == dirs["etc"] / "local.yaml"
    entries = {(e.name, e.path): e for e in sitemod.entries()}
    assert entries["mine", first].shadowed_by is None
    assert all(entries["mine", p].shadowed_by == first for p in later)
    assert entries["local", sitemod.site_dir() / "local.yaml"].shadowed_by == \
        dirs["etc"] / "local.yaml"
    code, out, _ = orch("site", "list", "--format", "json")
    assert code == 0
    rows = {(r["name"], r["source"]): r for r in json.loads(out)}
    assert rows["mine", "ORCH_SITE_PATH"]["file"] == str(first)
    assert rows["mine", "ORCH_SITE_PATH"]["shadowed_by"] is None
    assert rows["mine", "user"]["shadowed_by"] == str(first)
    assert rows["local", "shipped"]["shadowed_by"] == str(dirs["etc"] / "local.yaml")
    code, out, _ = orch("site", "list")
    assert code == 0 and "shadowed by ORCH_SITE_PATH" in out and "shadowed by system" in out


def test_a_references_file_beside_a_site_is_no_site(dirs):
    local_as(dirs["user"], "mine")
    (dirs["user"] / "mine.references.yaml").write_text("partitions: {}\n")
    assert [e.name for e in sitemod.entries() if e.source.source == "user"] == ["mine"]


def test_a_path_still_works_and_a_name_on_the_path_is_its_files(dirs, tmp_path):
    elsewhere = local_as(tmp_path / "elsewhere", "anything")
    renamed = elsewhere.with_name("other-name.yaml")
    elsewhere.rename(renamed)
    assert sitemod.load(str(renamed))[0].name == "anything"  # a path: any file name
    local_as(dirs["user"], "anything").rename(dirs["user"] / "found-as.yaml")
    with pytest.raises(UserError, match=r"found-as.yaml: name 'anything' must match the file "
                                        r"name 'found-as'"):
        sitemod.load("found-as")


def test_a_bad_file_fails_only_where_it_is_used(dirs):
    """A broken file on the path: listed as invalid with its located problem, refused in one
    line with exit 2 by a command that uses it, invisible to one that does not."""
    bad = dirs["user"] / "broken.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text("name: broken\nscheduler: slurm\npartitions: []\nenvironments: {}\n")
    local_as(dirs["etc"], "fine")
    assert sitemod.load("fine")[0].name == "fine"
    code, out, err = orch("site", "list", "--format", "json")
    assert code == 0, err
    [row] = [r for r in json.loads(out) if r["name"] == "broken"]
    assert row["problem"].startswith(f"{bad}:3: partitions") and row["scheduler"] is None
    code, out, err = orch("site", "list")
    assert code == 0 and "invalid: line 3: partitions" in out
    code, _, err = orch("sweep", "--site", "broken", "--nodes", "1", "--dry-run")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"{bad}:3: partitions")
    code, _, err = orch("sweep", "--site", "fine", "--nodes", "1", "--dry-run")
    assert code == 0, err


def test_a_bad_search_path_entry_is_one_line(dirs, monkeypatch, tmp_path):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ORCH_SITE_PATH", str(tmp_path / "a-file"))
    code, _, err = orch("sweep", "--site", "local", "--nodes", "1", "--dry-run")
    assert code == 2
    assert err.strip() == (f"orch: error: ORCH_SITE_PATH: {tmp_path / 'a-file'} is a file; "
                           "list the directories that hold site configs, separated by ':'")


def test_an_unknown_name_says_where_it_looked(dirs):
    with pytest.raises(UserError) as exc:
        sitemod.load("nowhere")
    msg = str(exc.value)
    assert "\n" not in msg and "unknown site 'nowhere'" in msg
    assert all(str(d.path) in msg for d in sitemod.search_path())
    with pytest.raises(UserError, match=r"unknown site '\.\./local'"):
        sitemod.load("../local")  # not a name: never joined onto a directory


def test_show_and_validate_name_the_file(dirs):
    path = local_as(dirs["env1"], "shown")
    code, out, _ = orch("site", "show", "shown")
    assert code == 0 and out.splitlines()[0] == f"# {path}"
    code, out, _ = orch("site", "validate", "shown")
    assert code == 0 and out.startswith(f"{path}: valid site 'shown'")


def test_every_lookup_uses_the_path(dirs):
    """env, data, models, study look sites up as sweep does."""
    local_as(dirs["user"], "onpath")
    code, _, err = orch("env", "list", "--site", "onpath")
    assert code == 0, err
    code, _, err = orch("study", "validate", ROOT / "studies" / "convergence.yaml", "--site",
                        "onpath")
    assert code == 0, err


@pytest.fixture
def fake_slurm(monkeypatch):
    def fake_run(cmd, timeout):
        return SINFO if cmd[0] == "sinfo" else "eth0\nlo\n---\n"

    monkeypatch.setattr(sitedetect, "_run", fake_run)
    monkeypatch.setattr(sitedetect.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr("orchestrator.backends.slurm.SlurmScheduler.nodes_on_loopback",
                        lambda self, p: True)


def test_detect_writes_to_the_user_dir_and_says_what_next(dirs, fake_slurm):
    code, out, err = orch("site", "detect", "--name", "newcluster", "--no-probe")
    assert code == 0, err
    path = dirs["user"] / "newcluster.yaml"
    assert out.split("\n")[0].startswith(f"{path}: draft site 'newcluster' written")
    assert "  orch site validate newcluster\n" in out
    assert "  orch sweep --site newcluster --nodes 1 --dry-run" in out
    assert sitemod.load("newcluster")[1] == path
    before = path.read_text()
    code, _, err = orch("site", "detect", "--name", "newcluster", "--no-probe")
    assert code == 2 and err.strip().count("\n") == 0 and "--force" in err
    assert path.read_text() == before
    path.write_text(before + "# edited\n")
    code, _, err = orch("site", "detect", "--name", "newcluster", "--no-probe", "--force")
    assert code == 0 and path.read_text() == before


def test_detect_elsewhere_names_the_file_and_refuses_a_bad_name(dirs, fake_slurm, tmp_path):
    target = tmp_path / "my drafts" / "c.yaml"
    code, out, err = orch("site", "detect", "--name", "c", "--no-probe", "--out", target)
    assert code == 0, err
    assert f"  orch site validate '{target}'\n" in out  # quoted: a command to copy
    code, _, err = orch("site", "detect", "--name", "../x", "--no-probe")
    assert code == 2 and "--name '../x'" in err
    assert not (dirs["config"] / "orch" / "x.yaml").exists()


def test_write_draft_never_replaces_a_file_that_appeared(tmp_path):
    path = tmp_path / "d" / "s.yaml"
    sitedetect.write_draft(path, "one\n")
    with pytest.raises(UserError, match="exists"):
        sitedetect.write_draft(path, "two\n")
    assert path.read_text() == "one\n" and os.listdir(path.parent) == ["s.yaml"]
    sitedetect.write_draft(path, "two\n", force=True)  # --force replaces it, whole
    assert path.read_text() == "two\n" and os.listdir(path.parent) == ["s.yaml"]


def test_the_docs_page_lists_the_search_path():
    page = (ROOT / "docs" / "howto" / "site-configs.md").read_text()
    for source, text in sitemod.SEARCH_PATH:
        assert f"| {source} | {text} |" in page


def test_the_search_path_reaches_a_real_dry_run(tmp_path):
    """``orch sweep --site NAME --dry-run`` as a user runs it, the site on $ORCH_SITE_PATH."""
    local_as(tmp_path / "sites", "drysite")
    proc = run_orch("sweep", "--site", "drysite", "--nodes", "1,2", "--dry-run",
                    env={"ORCH_SITE_PATH": str(tmp_path / "sites")}, check=True)
    assert "drysite" in proc.stdout


@pytest.mark.ranks
def test_a_sweep_on_a_site_from_the_path_records_its_file(tmp_path):
    """A real local sweep of a site found on $ORCH_SITE_PATH: its provenance names the file;
    ``orch show`` prints it; ``orch rerun`` needs no file at all (it runs the recorded config)
    and keeps the name of the file the run came from."""
    site_file = local_as(tmp_path / "sites", "pathsite")
    out = tmp_path / "sweep"
    run_orch("sweep", "--site", "pathsite", "--nodes", "1", "--iters", 2, "--warmup", 1,
             "--out", out, env={"ORCH_SITE_PATH": str(site_file.parent)}, check=True)
    [rec] = results(out)
    assert rec["state"] == "COMPLETED" and rec["site"] == "pathsite"
    prov = json.loads((out / rec["run_id"] / "provenance.json").read_text())
    assert prov["site"]["file"] == str(site_file.resolve())
    shown = run_orch("show", rec["run_id"], "--dir", out, check=True).stdout
    assert f"from {site_file.resolve()}" in shown
    site_file.unlink()
    prepared, site = provenance.prepare_rerun(out / rec["run_id"], tmp_path / "again")
    again = json.loads((prepared.rdir / "provenance.json").read_text())
    assert site.name == "pathsite" and again["site"]["file"] == str(site_file.resolve())
    assert again["site"]["sha256"] == prov["site"]["sha256"]
