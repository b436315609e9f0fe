"""Efficiency factors and fixed overheads of the comm and step models, and where each value came from.

Four layers, later wins:
  1. defaults      `mla_planner/data/efficiency.yaml`: every factor with its unit and published source
  2. vendor        `mla_planner/data/efficiency_vendor.yaml`: the few whose default differs on the topology's GPU
                   vendor (AMD Instinct's decode kernels), each with the kernel measurements that set it
  3. topology      the topology file's `efficiency:` mapping (fractions and seconds in (0, 1])
  4. calibration   a file given with `--calibration FILE`, written by `mla-plan verify --write-calibration`

Calibration file format (YAML or JSON; unknown keys are rejected with a did-you-mean):

    format: mla-plan-calibration/1        # required, this exact string
    gpu: H100-SXM-80G                      # optional: GPU the numbers were measured on; on another GPU (or
                                           # "cpu", a rehearsal) the factors are not applied, with a note
    model: deepseek-v3                     # optional (calibrate writes them): the model and engine fitted; a plan
    engine: vllm                           # of another applies the factors with a note
    topology: 8xh100                       # optional: where it was measured
    measured_at: "2025-06-01T12:00:00Z"    # optional
    tool: "mla-plan verify 0.1.0"          # optional
    efficiency:                            # required: any subset of the names in efficiency.yaml
      hbm_efficiency: 0.87
      attention_hbm_efficiency: 0.86
      nvlink_ring_efficiency: 0.80
    measurements:                          # optional evidence, not read by the model:
      attention_core: {predicted_s: 2.1e-4, measured_s: 2.3e-4, bytes: 6.1e8}

Fractions (`*_efficiency`) must lie in (0, 1]; times (`*_s`) in seconds, > 0; `kernels_per_layer` is a
positive integer. `dump_calibration` writes exactly this format.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Optional

from mla_planner.core.files import dump_yaml, read_mapping, user_path
from mla_planner.core.validation import validate
from mla_planner.specs.efficiency import (check_overrides, default_sources, default_values, vendor_sources,
                                         vendor_values)
from mla_planner.specs.topology import Topology

FORMAT = "mla-plan-calibration/1"
VENDOR_ORIGIN = "vendor default: "     # origin of a factor set by data/efficiency_vendor.yaml for the GPU's vendor


@dataclass(frozen=True)
class Calibration:
    """Every factor the comm and step models use; `origin` maps a name to where its value came from."""
    # NVLink / NVSwitch (used for any intra-node link)
    nvlink_ring_efficiency: float
    nvlink_allgather_efficiency: float
    nvls_allreduce_efficiency: float
    nvlink_all_to_all_efficiency: float
    nvlink_p2p_efficiency: float
    # AMD Infinity Fabric (every collective inside an xgmi node)
    xgmi_ring_efficiency: float
    # between nodes
    nic_efficiency: float
    rdma_all_to_all_efficiency: float
    socket_efficiency: float
    kv_transfer_efficiency: float     # prefill -> decode KV over RDMA (disaggregation)
    # latencies
    nccl_base_latency_s: float
    internode_latency_s: float
    nvlink_step_latency_s: float
    # HBM and tensor cores
    hbm_efficiency: float
    moe_hbm_efficiency: float
    int4_moe_hbm_efficiency: float
    attention_hbm_efficiency: float
    tensor_core_efficiency: float
    attention_tensor_core_efficiency: float
    # kernel launch
    graph_kernel_overhead_s: float
    eager_layer_host_s: float
    ttft_host_s: float                # the part of a request's TTFT outside the forward passes
    host_per_request_s: float         # the engine's host work per running request per decode step
    kernels_per_layer: int
    origin: dict = field(default_factory=dict, compare=False)
    notes: tuple = ()
    model: Optional[str] = field(default=None, compare=False)    # the calibration file's model and engine (calibrate's)
    engine: Optional[str] = field(default=None, compare=False)

    def __hash__(self) -> int:
        """The fields' hash, computed once: the step and comm memo caches key on the calibration many
        thousand times per plan search, and a frozen instance never changes."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", cached)
        return cached

    def source(self, name: str) -> str:
        """Where the value of `name` came from: the default's published source, or the override's file."""
        where = self.origin.get(name, "default")
        if where.startswith(VENDOR_ORIGIN):
            return vendor_sources(where.removeprefix(VENDOR_ORIGIN))[name]
        return default_sources()[name] if where == "default" else where


@dataclass(frozen=True, kw_only=True)
class CalibrationFile:
    """What `--calibration FILE` holds (the edge: validated by pydantic, plain `Calibration` inside)."""
    __pydantic_config__ = {"extra": "forbid"}     # read by pydantic when it validates the file
    format: Literal["mla-plan-calibration/1"]
    gpu: Optional[str] = None
    topology: Optional[str] = None
    model: Optional[str] = None
    engine: Optional[str] = None
    measured_at: Optional[str] = None
    tool: Optional[str] = None
    efficiency: dict[str, float]
    measurements: dict[str, Any] = field(default_factory=dict)


def load_calibration(path: str | Path | None, topo: Topology, recorded: Optional[dict] = None) -> Calibration:
    """Defaults, then those of the topology's GPU vendor (data/efficiency_vendor.yaml), then the topology's
    `efficiency:` overrides, then the calibration file (if any), else the calibration a plan file recorded
    (`recorded`: `plan_calibration`'s record, so `compare --plan`, `verify --plan` and `calibrate` price the plan with
    the factors it was made with)."""
    values, origin, notes = dict(default_values()), {}, []
    for name, value in check_overrides(vendor_values(topo.gpu.vendor), "efficiency_vendor.yaml").items():
        values[name], origin[name] = value, f"{VENDOR_ORIGIN}{topo.gpu.vendor}"
    for name, value in check_overrides(topo.efficiency, f"topology {topo.name}").items():
        values[name], origin[name] = value, f"topology {topo.name}"
    scope = {}
    if path is not None:
        where = str(path)
        cal = validate(CalibrationFile, read_mapping(user_path(str(path))), where)
        factors = check_overrides(cal.efficiency, where)
        scope = {"model": cal.model, "engine": cal.engine}
        if cal.gpu and cal.gpu != topo.gpu.name:
            # efficiencies are properties of a GPU: a CPU rehearsal's or another GPU's would mislead the plan
            notes.append(f"calibration {where} was measured on {cal.gpu}, the topology has {topo.gpu.name}: "
                         f"its {len(factors)} factor(s) are not applied")
            factors, scope = {}, {}
    elif recorded:
        where = f"{recorded.get('source', 'calibration')} (recorded in the plan)"
        factors = check_overrides(recorded.get("efficiency", {}), where)
        scope = {"model": recorded.get("model"), "engine": recorded.get("engine")}
    else:
        factors, where = {}, ""
    for name, value in factors.items():
        values[name], origin[name] = value, f"calibration {where}"
    return Calibration(**values, origin=origin, notes=tuple(notes), **scope)


def plan_calibration(calib: Calibration, path: str | Path | None) -> dict:
    """What a plan file records of the calibration it was made with (empty for none): the file it came from, the
    factors applied and the model and engine they were fitted on."""
    applied = {n: getattr(calib, n) for n, where in calib.origin.items() if where.startswith("calibration ")}
    if not applied:
        return {}
    return {"source": str(path) if path is not None else None, "efficiency": applied, "model": calib.model,
            "engine": calib.engine}


def calibration_scope_note(calib: Calibration, model: str, engines: tuple) -> str:
    """Why a calibration's factors may not carry over ('' when they were fitted on this model and its engines): the
    fused-MoE streaming and the per-step cost calibrate fits are properties of a model's kernels on an engine."""
    others = [e for e in engines if calib.engine and e != calib.engine]
    if calib.model and calib.model != model:
        where = f"fitted on {calib.model}" + (f" with {calib.engine}" if calib.engine else "")
        whom = f"{model}'s candidates"
    elif others:
        where, whom = f"fitted with {calib.engine}", f"the {', '.join(others)} candidates"
    else:
        return ""
    return (f"the calibration was {where}; {whom} use its factors as they are (the MoE streaming and per-step cost it "
            "fits are a model's and an engine's: calibrate on this one to be sure)")


def int4_experts_note(calib: Calibration, expert_dtype: str) -> str:
    """Why a calibrated moe_hbm_efficiency does not reach int4 weight-only experts ('' when it does not arise): their
    grouped GEMMs have their own factor, int4_moe_hbm_efficiency (perf.layer_work.Op.hbm_factor)."""
    where = calib.origin.get("moe_hbm_efficiency", "")
    if expert_dtype != "int4" or not where or where.startswith(VENDOR_ORIGIN) \
            or "int4_moe_hbm_efficiency" in calib.origin:
        return ""
    return (f"moe_hbm_efficiency from {where} does not apply to this model's int4 experts: they stream at "
            "int4_moe_hbm_efficiency (set it there, or run `mla-plan calibrate` on this model)")


def dump_calibration(efficiency: dict, gpu: str | None = None, topology: str | None = None,
                     measured_at: str | None = None, tool: str | None = None,
                     measurements: dict | None = None, model: str | None = None, engine: str | None = None) -> str:
    """YAML text of a calibration file in the documented format (validated before writing)."""
    check_overrides(efficiency, "calibration")
    doc = {"format": FORMAT, "gpu": gpu, "topology": topology, "model": model, "engine": engine,
           "measured_at": measured_at, "tool": tool, "efficiency": dict(efficiency), "measurements": measurements or {}}
    doc = {k: v for k, v in doc.items() if v not in (None, {})} | {"efficiency": dict(efficiency)}
    validate(CalibrationFile, doc, "calibration")
    return dump_yaml(doc)
