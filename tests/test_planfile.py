"""The plan file read back by `emit` and `verify`: a round trip, and every hand edit that would otherwise
reach an engine command (or be silently replaced by a default) refused with one line naming the file
and the field."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from launch_cases import make_plan

from mla_planner import __version__
from mla_planner.core.errors import InputError
from mla_planner.search.planfile import plan_to_dict
from mla_planner.search.planfile_read import _KnobsIn, _LayoutIn, _WorkloadIn, read_plan
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout

PLAN = make_plan("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), Knobs(engine="sglang", attention_backend="flashmla"),
                 Workload(concurrency=64))


def _write(tmp_path, edit=None):
    data = json.loads(json.dumps(plan_to_dict(PLAN)))
    if edit:
        edit(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def _knob(name, value):
    def edit(data):
        data["candidates"][0]["knobs"][name] = value
    return edit


def _drop(section, name):
    def edit(data):
        del data["candidates"][0][section][name]
    return edit


def test_round_trip(tmp_path):
    back = read_plan(_write(tmp_path))
    assert back.candidates == PLAN.candidates and back.workload == PLAN.workload and back.spec == PLAN.spec


@pytest.mark.parametrize("model, dataclass", [(_KnobsIn, Knobs), (_LayoutIn, Layout), (_WorkloadIn, Workload)])
def test_strict_models_cover_every_field_and_require_it(model, dataclass):
    assert list(model.model_fields) == [f.name for f in fields(dataclass)]
    optional = {"pp_layer_partition", "cuda_graph_max_bs", "dense_per_rank", "mtp_draft_tokens", "indexer_kv_dtype",
                "images", "mtp_acceptance", "redundant_experts", "host_overlap"}   # knobs added after plan files were first written: absent = default                             # (or the DeepSeek-V3 report's rate)
    assert all(f.is_required() for name, f in model.model_fields.items() if name not in optional)


def test_a_hand_edited_plan_may_name_a_built_in_gpu(tmp_path):
    """As a topology file may: the name is the GPU table's entry (specs/topology.py gpu_named)."""
    back = read_plan(_write(tmp_path, lambda d: d["topology"].update(gpu="H200-SXM-141G")))
    assert back.topology == PLAN.topology


def test_a_plan_without_a_layer_partition_means_the_engines_own_split(tmp_path):
    path = _write(tmp_path, lambda d: [c["knobs"].pop("pp_layer_partition") for c in d["candidates"]])
    assert all(c.knobs.pp_layer_partition is None for c in read_plan(path).candidates)


def test_a_patch_release_reads_the_file(tmp_path):
    major_minor = ".".join(__version__.split(".")[:2])
    path = _write(tmp_path, lambda d: d.update(mla_plan_version=f"{major_minor}.99"))
    assert read_plan(path).candidates == PLAN.candidates


@pytest.mark.parametrize("edit, field, words", [
    (lambda d: d.update(mla_plan_version="9.9.9"), "mla_plan_version", "written by mla-plan 9.9.9 and this is"),
    (lambda d: d.pop("mla_plan_version"), "mla_plan_version: missing", "not a plan written by"),
    (lambda d: d.update(mla_plan_version=0.1), "mla_plan_version", "0.1 is not a version like"),
    (_drop("knobs", "block_size"), "candidates.0.knobs.block_size", "Field required"),
    (_drop("knobs", "attention_backend"), "candidates.0.knobs.attention_backend", "Field required"),
    (_drop("layout", "ep"), "candidates.0.layout.ep", "Field required"),
    (_knob("max_num_seqs", "many"), "candidates.0.knobs.max_num_seqs", "valid integer"),
    (_knob("max_num_seqs", 0), "candidates.0.knobs.max_num_seqs", "greater than 0"),
    (_knob("block_size", 64.0), "candidates.0.knobs.block_size", "valid integer"),
    (_knob("memory_fraction", 1.7), "candidates.0.knobs.memory_fraction", "less than or equal to 1"),
    (_knob("memory_fraction", 0), "candidates.0.knobs.memory_fraction", "greater than 0"),
    (_knob("memory_fraction", "0.9"), "candidates.0.knobs.memory_fraction", "valid number"),
    (_knob("max_model_len", 1e9), "candidates.0.knobs.max_model_len", "valid integer"),
    (_knob("max_model_len", 10**9), "candidates.0.knobs.max_model_len",
     "1000000000 exceeds the model's max_position_embeddings (163840)"),
    (_knob("engine", "tgi"), "candidates.0.knobs.engine", "'vllm' or 'sglang'"),
    (_knob("kv_cache_dtype", "int8"), "candidates.0.knobs.kv_cache_dtype", "'bf16', 'fp8' or 'fp8_ds_mla'"),
    (_knob("prefix_caching", "yes"), "candidates.0.knobs.prefix_caching", "valid boolean"),
    (_knob("turbo", True), "candidates.0.knobs.turbo", "unknown field"),
    (_knob("host_overlap", False), "candidates.0.knobs.host_overlap", "Input should be True"),
    (_knob("pp_layer_partition", [30, 31]), "candidates.0.knobs.pp_layer_partition",
     "pipeline partition 30,31 names 2 stage(s), the layout has 1 (pp 1)"),
    (_knob("pp_layer_partition", [61, 0]), "candidates.0.knobs.pp_layer_partition.1", "greater than 0"),
    (lambda d: d["candidates"][0]["layout"].update(kv_layout="sharded"), "candidates.0.layout.kv_layout",
     "'replicated' or 'latent-sharded'"),
    (lambda d: d["candidates"][0]["layout"].update(tp=-8), "candidates.0.layout.tp", "greater than 0"),
    (lambda d: d["workload"].update(input_len="2k"), "workload.input_len", "valid integer"),
    (lambda d: d["topology"].update(gpu="H1000"), "topology.gpu", "unknown GPU 'H1000'"),
])
def test_hand_edits_are_refused_naming_file_and_field(tmp_path, edit, field, words):
    path = _write(tmp_path, edit)
    with pytest.raises(InputError) as err:
        read_plan(path)
    assert str(err.value).startswith(f"{path}: {field}: ") and words in str(err.value), str(err.value)


def test_emit_cli_shows_one_line_and_exits_2(cli, tmp_path):
    path = _write(tmp_path, _knob("max_num_seqs", "many"))
    result = cli("emit", "--plan", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "candidates.0.knobs.max_num_seqs" in result.output and not (tmp_path / "out").exists()
    old = _write(tmp_path, lambda d: d.update(mla_plan_version="9.9.9"))
    result = cli("emit", "--plan", str(old), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "re-run `mla-plan plan`" in result.output


def test_a_plan_records_the_engine_releases_it_models(tmp_path):
    """vllm-project/vllm#54677 (version drift): flags, defaults and memory accounting are those of one
    release per engine, and the plan file says which."""
    from mla_planner.engines.backends import engine_version
    data = plan_to_dict(PLAN)
    assert data["engine_versions"] == {"vllm": engine_version("vllm"), "sglang": engine_version("sglang")}
    assert data["engine_versions"]["vllm"] == "0.33.0" and data["engine_versions"]["sglang"] == "0.5.23"
    back = read_plan(_write(tmp_path, lambda d: d["engine_versions"].update(vllm="0.30.1")))
    assert back.candidates == PLAN.candidates and back.engine_versions["vllm"] == "0.30.1"   # read back as written
    assert plan_to_dict(back)["engine_versions"]["vllm"] == "0.30.1"
