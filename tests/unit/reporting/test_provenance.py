"""provenance.json: one record per launch, appended on resume, written atomically."""

from __future__ import annotations

import json
import subprocess

import pytest

from genalign.reporting.provenance import (
    ProvenanceError,
    git_state,
    package_versions,
    read_provenance,
    record_launch,
    record_start,
)


def test_fresh_launch_then_resume_appends(tmp_path):
    record_launch(tmp_path, 1, ["genalign", "train", "--config", "my recipe", "trainer.num_steps=4"])
    record_launch(tmp_path, 3, ["genalign", "train", "trainer.resume_from=auto"])
    launches = read_provenance(tmp_path)["launches"]
    assert [launch["start_step"] for launch in launches] == [1, 3]
    first = launches[0]
    assert first["command"] == "genalign train --config 'my recipe' trainer.num_steps=4"  # shell-quoted
    assert first["argv"][3] == "my recipe"
    assert first["packages"]["torch"] and first["packages"]["genalign"]
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed into place
    # a fresh start (step 1) begins a new list
    record_launch(tmp_path, 1, ["genalign", "train"])
    assert len(read_provenance(tmp_path)["launches"]) == 1


def test_record_start_writes_the_config_then_the_launch(tmp_path):
    run = tmp_path / "new" / "run"  # made when missing
    record_start(run, 1, "trainer:\n  num_steps: 4\n")
    record_start(run, 3, "trainer:\n  num_steps: 8\n")  # a resume rewrites the config, appends a launch
    assert (run / "config.yaml").read_text() == "trainer:\n  num_steps: 8\n"
    assert [launch["start_step"] for launch in read_provenance(run)["launches"]] == [1, 3]


def test_package_versions_marks_missing_packages():
    versions = package_versions(("torch", "surely-not-installed-genalign-xyz"))
    assert versions["torch"] and versions["surely-not-installed-genalign-xyz"] is None


def test_git_state_of_a_repository_and_of_a_plain_directory(tmp_path):
    assert git_state(tmp_path) is None  # not a checkout (tmp is outside any repository)
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    try:
        subprocess.run([*git, "init", "-q"], check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not installed")
    (repo / "a.txt").write_text("1")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert git_state(repo) == {"commit": head, "dirty": False, "root": str(repo.resolve())}
    (repo / "a.txt").write_text("2")
    assert git_state(repo)["dirty"] is True


def test_unreadable_provenance_is_an_error_naming_the_file(tmp_path):
    assert read_provenance(tmp_path) is None
    (tmp_path / "provenance.json").write_text("{not json")
    with pytest.raises(ProvenanceError, match="provenance.json is not valid JSON"):
        read_provenance(tmp_path)
    (tmp_path / "provenance.json").write_text(json.dumps({"runs": []}))
    with pytest.raises(ProvenanceError, match="no 'launches' list"):
        read_provenance(tmp_path)
