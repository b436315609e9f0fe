"""Reading a plan file back (`emit`, `verify`, `check-log`, `compare`, `calibrate`): what
search/planfile.py's `plan_to_dict` wrote, or a hand-edited or foreign file.

Read back with pydantic so such a file fails with one line naming the field: the layout, knobs and workload
strictly (every field present, JSON types as written, ranges), since they become engine flags verbatim; a
file written by another major.minor version of mla-plan is refused (its fields may mean other things).
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from mla_planner import __version__
from mla_planner.core.errors import InputError
from mla_planner.core.files import read_mapping
from mla_planner.core.validation import validate
from mla_planner.core.jsonout import SCHEMA_VERSION
from mla_planner.engines.disagg import pool_shape_problem, pools_mismatch
from mla_planner.engines.parallel import dense_per_rank_applies, redundant_experts_problem
from mla_planner.memory.pp_split import split_problem
from mla_planner.search.candidate import (CandidateMemory, DisaggCandidate, DisaggPerformance, Performance, Pool,
                                         Rejection)
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.specs.efficiency import check_overrides
from mla_planner.specs.knobs import ENGINES, KV_DTYPES, MTP_ACCEPTANCE, Knobs, Workload
from mla_planner.specs.layout import KV_LAYOUTS, Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology, gpu_named
from mla_planner.specs.vision import images_problem

Loose, Strict = ConfigDict(extra="ignore"), ConfigDict(extra="forbid", strict=True)
PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0)]


class _LayoutIn(BaseModel):
    """Every `Layout` field, required (tests/test_planfile.py keeps the two in step)."""
    model_config = Strict
    tp: PosInt
    pp: PosInt
    dp: PosInt
    ep: PosInt
    dcp: PosInt
    kv_layout: Literal[KV_LAYOUTS]
    replicas: PosInt


class _KnobsIn(BaseModel):
    """Every `Knobs` field, required; attention_backend may be null (the engine's own choice)."""
    model_config = Strict
    engine: Literal[ENGINES]
    block_size: PosInt
    kv_cache_dtype: Literal[KV_DTYPES]
    memory_fraction: Annotated[float, Field(gt=0, le=1)]
    max_num_seqs: PosInt
    max_num_batched_tokens: PosInt
    max_model_len: PosInt
    attention_backend: Optional[Annotated[str, Field(min_length=1)]]
    prefix_caching: bool
    cuda_graphs: bool
    mtp: bool
    mtp_draft_tokens: PositiveInt = 1                        # absent in plans written before it existed
    pp_layer_partition: Optional[list[PositiveInt]] = None   # absent in plans written before it existed
    cuda_graph_max_bs: Optional[PositiveInt] = None          # the same
    dense_per_rank: bool = False                             # the same
    indexer_kv_dtype: Literal["fp8", "mxfp4"] = "fp8"         # the same
    images: bool = False                                     # the same
    redundant_experts: Annotated[int, Field(ge=0)] = 0       # the same
    host_overlap: Literal[True] = True                       # the same; the scripts never turn the overlap off


class _WorkloadIn(BaseModel):
    """Every `Workload` field, required (the optional ones may be null)."""
    model_config = Strict
    input_len: PosInt
    output_len: PosInt
    input_len_max: Optional[PosInt]
    output_len_max: Optional[PosInt]
    concurrency: Optional[PosInt]
    request_rate_per_s: Optional[PosFloat]
    ttft_ms: PosFloat
    tpot_ms: PosFloat
    prefix_hit_rate: Annotated[float, Field(ge=0, le=1)]
    mtp_acceptance: Annotated[float, Field(ge=0, le=1)] = MTP_ACCEPTANCE   # absent in plans written before it


class _CandidateIn(BaseModel):
    """A candidate as read back: its predicted figures typed (search/candidate.py: whole counts, finite
    quantities), since emit writes them into the README and check-log compares logs with them."""
    model_config = Loose
    layout: _LayoutIn
    knobs: _KnobsIn
    memory: CandidateMemory = CandidateMemory()
    performance: Performance = Performance()
    warnings: list[str] = []
    reasons: list[str] = []


class _PoolIn(BaseModel):
    """A disaggregated deployment's pool, as strictly as a candidate's layout and knobs (they become flags)."""
    model_config = Loose
    role: Literal["prefill", "decode"]
    instances: PosInt
    nodes_per_instance: PosInt
    layout: _LayoutIn
    knobs: _KnobsIn


class _DisaggIn(BaseModel):
    model_config = Loose
    pools: Annotated[list[_PoolIn], Field(min_length=2, max_length=2)]
    performance: DisaggPerformance = DisaggPerformance()
    reasons: list[str] = []
    warnings: list[str] = []


class _ModelIn(BaseModel):
    model_config = Loose
    model_path: str
    spec: ModelSpec


class _CalibrationIn(BaseModel):
    """The calibration a plan was made with (specs.calibration.plan_calibration), empty for none."""
    model_config = Loose
    source: Optional[str] = None
    efficiency: dict[str, int | float] = {}     # kernels_per_layer is a count
    model: Optional[str] = None
    engine: Optional[str] = None


class _PlanIn(BaseModel):
    model_config = Loose
    model: _ModelIn
    topology: Topology
    workload: _WorkloadIn
    candidates: list[_CandidateIn]
    rejected: list[dict] = []
    disaggregated: list[_DisaggIn] = []
    calibration: _CalibrationIn = _CalibrationIn()


def _check_version(data: dict, where: str) -> None:
    """The file's `mla_plan_version` must share this mla-plan's major.minor."""
    if "mla_plan_version" not in data:
        raise InputError(where, "missing: not a plan written by `mla-plan plan --json`; re-run "
                         "`mla-plan plan --json` to write one", "mla_plan_version")
    schema = data.get("schema_version", SCHEMA_VERSION)   # plans written before it are of version 1
    if not isinstance(schema, int) or isinstance(schema, bool) or not 1 <= schema <= SCHEMA_VERSION:
        raise InputError(where, f"{schema!r}: this mla-plan reads plan files of schema version 1 to "
                         f"{SCHEMA_VERSION}; re-run `mla-plan plan` to write it again", "schema_version")
    written = data["mla_plan_version"]
    if not isinstance(written, str) or not re.fullmatch(r"\d+\.\d+(\.\S*)?", written):
        raise InputError(where, f"{written!r} is not a version like {__version__}; re-run `mla-plan plan` to write "
                         "the file again", "mla_plan_version")
    if written.split(".")[:2] != __version__.split(".")[:2]:
        raise InputError(where, f"the file was written by mla-plan {written} and this is {__version__}; "
                         "re-run `mla-plan plan` to write it again", "mla_plan_version")


def read_plan(path: str | Path) -> Plan:
    """Load a plan JSON/YAML written by `mla-plan plan --json` (or `--yaml`)."""
    where = str(path)
    data = read_mapping(Path(path))
    _check_version(data, where)
    if isinstance(data.get("topology"), dict):   # a built-in GPU given by name, as a topology file may give it
        data = {**data, "topology": gpu_named(data["topology"], where, "topology.gpu")}
    raw = validate(_PlanIn, data, where)
    limit = raw.model.spec.max_position_embeddings
    for i, c in enumerate(raw.candidates):
        if c.knobs.max_model_len > limit:
            raise InputError(where, f"{c.knobs.max_model_len} exceeds the model's max_position_embeddings "
                             f"({limit})", f"candidates.{i}.knobs.max_model_len")
    cands = [Candidate(Layout(**c.layout.model_dump()), _knobs(c.knobs, raw.model.spec, c.layout, where, i),
                       _given(c.memory), _given(c.performance),
                       c.warnings, c.reasons) for i, c in enumerate(raw.candidates)]
    versions = data.get("engine_versions")
    versions = {k: v for k, v in versions.items() if isinstance(v, str)} if isinstance(versions, dict) else {}
    return Plan(raw.model.spec, raw.model.model_path, raw.topology, Workload(**raw.workload.model_dump()), cands,
                [Rejection.from_file(r) for r in raw.rejected], versions,
                [_disaggregated(d, raw.model.spec, raw.topology, where, i) for i, d in enumerate(raw.disaggregated)],
                data.get("deployment") if isinstance(data.get("deployment"), dict) else None,
                _calibration(raw.calibration, where))


def _calibration(raw: _CalibrationIn, where: str) -> dict:
    """The recorded calibration, its factors checked as a calibration file's are (names and ranges)."""
    if not raw.efficiency:
        return {}
    return {**raw.model_dump(), "efficiency": check_overrides(raw.efficiency, where, "calibration.efficiency")}


def _disaggregated(raw: _DisaggIn, spec: ModelSpec, topo: Topology, where: str, i: int) -> DisaggCandidate:
    """A disaggregated deployment read back: a prefill pool then a decode pool, of one engine and KV dtype, each
    instance a layout over its whole nodes, both pools within the cluster's nodes."""
    pools = [Pool(p.role, Layout(**p.layout.model_dump()), _knobs(p.knobs, spec, p.layout, where, i,
                                                                   f"disaggregated.{i}.pools.{j}"),
                  p.instances, p.nodes_per_instance) for j, p in enumerate(raw.pools)]
    if [p.role for p in pools] != ["prefill", "decode"]:
        raise InputError(where, "expected a prefill pool then a decode pool", f"disaggregated.{i}.pools")
    if pools[0].knobs.engine != pools[1].knobs.engine:
        raise InputError(where, "both pools must run one engine (the cache moves between them as the engine lays it "
                         "out)", f"disaggregated.{i}.pools")
    if problem := pools_mismatch(pools[0].knobs.engine, pools[0].knobs, pools[1].knobs):
        raise InputError(where, problem, f"disaggregated.{i}.pools")
    for j, p in enumerate(pools):
        if problem := pool_shape_problem(p.layout, p.nodes_per_instance, topo.gpus_per_node):
            raise InputError(where, problem, f"disaggregated.{i}.pools.{j}")
    if sum(p.instances * p.nodes_per_instance for p in pools) > topo.nodes:
        raise InputError(where, f"the pools take more than the topology's {topo.nodes} nodes", f"disaggregated.{i}")
    return DisaggCandidate(pools[0], pools[1], _given(raw.performance), raw.reasons, raw.warnings)


def _given(record):
    """RECORD, or None where the file gives none of its figures (a plan built by hand)."""
    return record if any(getattr(record, f.name) is not None for f in fields(record)) else None


def _knobs(raw: _KnobsIn, spec: ModelSpec, layout: _LayoutIn, where: str, i: int, at: str = "") -> Knobs:
    fields = raw.model_dump()
    if fields["pp_layer_partition"] is not None:
        fields["pp_layer_partition"] = tuple(fields["pp_layer_partition"])
    knobs = Knobs(**fields)
    lay = Layout(**layout.model_dump())
    problem = split_problem(spec, lay, knobs)
    if problem:
        raise InputError(where, problem, f"{at or f'candidates.{i}'}.knobs.pp_layer_partition")
    if knobs.images and (problem := images_problem(spec)):
        raise InputError(where, problem, f"{at or f'candidates.{i}'}.knobs.images")
    if problem := redundant_experts_problem(spec, lay, knobs.redundant_experts):
        raise InputError(where, problem, f"{at or f'candidates.{i}'}.knobs.redundant_experts")
    if knobs.dense_per_rank and not dense_per_rank_applies(lay, knobs.engine):
        raise InputError(where, "true only for SGLang under DP attention at tp=1 (--moe-dense-tp-size 1 "
                         f"--enable-dp-lm-head), not {knobs.engine} on {lay.label}",
                         f"{at or f'candidates.{i}'}.knobs.dense_per_rank")
    return knobs
