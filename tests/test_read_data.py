"""core/resources.read_data: the package's own YAML files, parsed once and kept beside them as marshal bytes
(as Python keeps bytecode). The kept value must be the parse, a changed file must be parsed again, and nothing
may break where the cache cannot be written."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
import yaml

from mla_planner.core import resources
from mla_planner.core.resources import data_dir, read_data
from mla_planner.specs.topology import builtin_topologies

BUILT_IN = sorted([*data_dir("models").glob("*.yaml"), *(p for p in data_dir("gpus.yaml").parent.glob("*.yaml")),
                   *builtin_topologies().values()])


def kept(path):
    return path.parent / "__pycache__" / f"{path.name}.{sys.implementation.cache_tag}.marshal"


@pytest.fixture
def writing(monkeypatch):
    """Bytecode (and so the kept parses) written, whatever PYTHONDONTWRITEBYTECODE says on this machine."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


@pytest.fixture
def copy_of_gpus(tmp_path):
    path = tmp_path / "gpus.yaml"
    shutil.copyfile(data_dir("gpus.yaml"), path)
    return path


def no_parse(text):
    raise AssertionError("parsed again although the kept value matched")


@pytest.mark.parametrize("path", BUILT_IN, ids=lambda p: p.name)
def test_every_built_in_file_reads_as_safe_load_parses_it(path, tmp_path, writing, monkeypatch):
    copy = tmp_path / path.name
    shutil.copyfile(path, copy)
    expected = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert read_data(copy) == expected            # parsed, and kept
    monkeypatch.setattr(resources, "parse_yaml", no_parse)
    assert read_data(copy) == expected            # read back from what was kept


def test_the_parse_is_kept_and_read_back(copy_of_gpus, writing, monkeypatch):
    first = read_data(copy_of_gpus)
    assert kept(copy_of_gpus).is_file()
    monkeypatch.setattr(resources, "parse_yaml", no_parse)
    assert read_data(copy_of_gpus) == first


def test_a_changed_file_is_parsed_again(copy_of_gpus, writing):
    read_data(copy_of_gpus)
    copy_of_gpus.write_text(copy_of_gpus.read_text() + "\nplanted-gpu: {memory_gb: 1}\n")
    assert read_data(copy_of_gpus)["planted-gpu"] == {"memory_gb": 1}
    assert read_data(copy_of_gpus)["planted-gpu"] == {"memory_gb": 1}   # and the new parse kept


def test_nothing_is_written_where_python_writes_no_bytecode(copy_of_gpus, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert read_data(copy_of_gpus) == yaml.safe_load(copy_of_gpus.read_text())
    assert not (copy_of_gpus.parent / "__pycache__").exists()


def test_a_folder_that_cannot_hold_the_cache_still_reads(copy_of_gpus, writing):
    (copy_of_gpus.parent / "__pycache__").write_text("a file where the cache folder would be")
    assert read_data(copy_of_gpus) == yaml.safe_load(copy_of_gpus.read_text())
    assert not list(copy_of_gpus.parent.glob("*.tmp"))


def test_a_damaged_cache_is_parsed_again(copy_of_gpus, writing):
    read_data(copy_of_gpus)
    kept(copy_of_gpus).write_bytes(b"\x00 not marshal")
    assert read_data(copy_of_gpus) == yaml.safe_load(copy_of_gpus.read_text())


def test_a_value_marshal_cannot_hold_is_parsed_each_time(tmp_path, writing):
    path = tmp_path / "dated.yaml"
    path.write_text("measured: 2026-12-02\n")
    assert str(read_data(path)["measured"]) == "2026-12-02"
    assert not kept(path).exists()


def test_a_file_changed_in_place_with_its_size_and_time_kept_is_parsed_again(copy_of_gpus, writing):
    """Found in review: the stamp was size and mtime, which a wheel sets to one date for every file (and `cp -p`
    keeps): an upgrade that kept a file's size served its old parse. The stamp is the content's CRC-32."""
    text = copy_of_gpus.read_text()
    read_data(copy_of_gpus)
    stat = copy_of_gpus.stat()
    changed = text.replace("memory_bytes: 84932978278", "memory_bytes: 84932978279", 1)
    assert changed != text and len(changed) == len(text)
    copy_of_gpus.write_text(changed)
    os.utime(copy_of_gpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert read_data(copy_of_gpus) == yaml.safe_load(changed)


def test_the_cache_follows_pythons_pycache_prefix(copy_of_gpus, writing, monkeypatch, tmp_path):
    prefix = tmp_path / "prefix"
    monkeypatch.setattr(sys, "pycache_prefix", str(prefix))
    read_data(copy_of_gpus)
    assert not (copy_of_gpus.parent / "__pycache__").exists() and list(prefix.rglob("gpus.yaml.*.marshal"))
