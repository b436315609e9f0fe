"""The built-in GPUs and topologies are built directly from the package's files (specs/gpu.py,
specs/topology.py: no pydantic on the way to a plan); here each is validated as a user's file is
(core/validation.py) and held equal to what is built directly (tests/test_architecture.py shows a plan on
built-ins does not load pydantic)."""

from __future__ import annotations

import pytest

from mla_planner.core.files import parse_yaml
from mla_planner.core.resources import data_dir
from mla_planner.core.validation import validate
from mla_planner.specs.gpu import GPU, gpu_table
from mla_planner.specs.topology import Topology, builtin_topologies, load_topology


@pytest.mark.parametrize("name", list(gpu_table()))
def test_each_builtin_gpu_is_its_validated_self(name):
    fields = parse_yaml(data_dir("gpus.yaml").read_text())[name]
    assert validate(GPU, {"name": name, **fields}, "gpus.yaml") == gpu_table()[name]


@pytest.mark.parametrize("name", list(builtin_topologies()))
def test_each_builtin_topology_is_its_validated_self(name):
    fields = parse_yaml(builtin_topologies()[name].read_text())
    if isinstance(fields["gpu"], str):
        fields["gpu"] = gpu_table()[fields["gpu"]]
    validated = validate(Topology, fields, name)
    built = load_topology(name)
    assert validated == built and hash(validated) == hash(built)
    assert all(isinstance(getattr(built.gpu, f), float) for f in vars(built.gpu) if f.endswith("_per_s"))


def test_a_users_topology_is_still_validated_by_pydantic(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nnodes: 1\ngpus_per_node: 8\ngpu: H100-SXM-80G\nintra_node: {latency_us: -1}\n")
    with pytest.raises(Exception, match=r"intra_node\.latency_us"):
        load_topology(str(path))
