"""Published measurements run through the planner's own code: predicted vs published, per point, category and role.

The points (mla_planner/data/validation.yaml) say what was measured and how; each is predicted with the functions
the commands use: `memory.report.memory_report` (KV capacity, as `memory` prints it), `perf.comm.collective` (NCCL's
busbw or time; `perf.custom_all_reduce` the engines' own all-reduce kernels, `perf.layer_comm.ep_all_to_all_s` an EP
dispatch or combine), `perf.metrics.evaluate` at the point's concurrency (mean TPOT, as `compare` prints it, with the
host overlap of the point's `engine_version`) and `perf.step.decode_step` (wide-EP decode). A point whose role is
`fit: FACTOR` set that factor of data/efficiency.yaml, so its error says nothing about the model; the `held_out`
points are the honest figure, and the summary keeps the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import median
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from mla_planner.core.errors import PlanError
from mla_planner.core.files import read_mapping, user_path
from mla_planner.core.resources import data_dir
from mla_planner.core.units import GiB
from mla_planner.core.validation import validate as validated
from mla_planner.engines.memory_rules import default_memory_fraction, engine_default_knobs
from mla_planner.engines.parallel import a2a_library, uses_ep_all_to_all
from mla_planner.engines.scheduling import overlaps_host
from mla_planner.memory.report import memory_report
from mla_planner.memory.ways_out import fraction_knobs
from mla_planner.perf.bands import collective_regime, same_platform, tpot_regime
from mla_planner.perf.closed_loop import closed_loop_mean_ttft_s, first_wave, recv_wait_s
from mla_planner.perf.comm import collective
from mla_planner.perf.custom_all_reduce import engine_all_reduce, kernel_time_s
from mla_planner.perf.disagg import prefill_rate
from mla_planner.perf.layer_comm import ep_all_to_all_s
from mla_planner.perf.metrics import evaluate
from mla_planner.perf.step import decode_step
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout, parse_layout
from mla_planner.specs.topology import Topology, load_topology

BANDED = ("kv_capacity", "decode_tpot", "eager_tpot", "ttft", "collective")   # the categories bands.py draws on
CATEGORIES = ("kv_capacity", "cuda_graph_memory", "collective", "decode_tpot", "eager_tpot", "ttft",
              "decode_throughput", "prefill_throughput")


class Point(BaseModel):
    """One published measurement (data/validation.yaml)."""
    model_config = ConfigDict(extra="forbid")
    id: str
    category: Literal[CATEGORIES]
    role: str                 # "held_out" or "fit: <efficiency factor>"
    regime: str
    source: str
    quote: str
    published: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    unit: str
    run: dict
    note: Optional[str] = None

    @property
    def held_out(self) -> bool:
        return self.role == "held_out"


class PointsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: list[Point]


@dataclass(frozen=True)
class Result:
    point: Point
    predicted: float

    @property
    def error(self) -> float:
        """Signed relative error, (predicted - published) / published."""
        return self.predicted / self.point.published - 1

    @property
    def band_error(self) -> float:
        """The error a band is built from: a collective's as an error in its time (a bus bandwidth's inverted)."""
        if self.point.category == "collective" and self.point.run.get("what") == "busbw":
            return self.point.published / self.predicted - 1
        return self.error


@dataclass(frozen=True)
class Summary:
    category: str
    role: str                 # "held_out" | "fit"
    points: int
    median_abs_error: float
    max_abs_error: float
    median_error: float       # the bias: negative = the model is below the published values


@lru_cache(maxsize=4)
def load_points(path: str | None = None) -> tuple[Point, ...]:
    """The repository's points, or those of a file in the same format."""
    where = user_path(path) if path else data_dir("validation.yaml")
    return tuple(validated(PointsFile, read_mapping(where), str(where)).points)


def _memory(run: dict):
    """The memory report `memory` gives the run: the engine's defaults under the given knobs, and where the run gives
    no memory fraction the engine's own default at its release (SGLang computes one per GPU and layout)."""
    spec, topo = load_model(run["model"]).spec, load_topology(run["topology"])
    layout = parse_layout(run["layout"], topo)
    knobs = engine_default_knobs(run["engine"], spec, topo, layout.dp, **run.get("knobs", {}))
    if "memory_fraction" not in run.get("knobs", {}):
        knobs = replace(knobs, memory_fraction=default_memory_fraction(run["engine"], spec, topo, layout, knobs,
                                                                       run.get("engine_version")))
    return memory_report(spec, topo, layout, knobs, engine_version=run.get("engine_version"))


def _kv_capacity(run: dict) -> float:
    """KV tokens as the engine logs them (`memory`)."""
    return float(_memory(run).kv_capacity_tokens)


def _cuda_graph_gib(run: dict) -> float:
    """CUDA-graph memory of the first GPU in GiB, `memory`'s cuda_graph term (memory.terms.cuda_graph_bytes)."""
    return _memory(run).per_gpu[0].terms["cuda_graph"] / GiB


def _collective(run: dict) -> float:
    topo = load_topology(run["topology"])
    cost = collective(run["kind"], run["bytes"], run["gpus"], topo, load_calibration(None, topo),
                      algorithm=run.get("algorithm"))
    return cost.busbw_bytes_per_s / 1e9 if run["what"] == "busbw" else cost.time_s * 1e6


def _engine_all_reduce(run: dict) -> float:
    """One all-reduce in us as the step model prices it inside a domain (perf.custom_all_reduce): the engines' faster
    kernel, or the `algorithm` (one_shot, two_shot) the measurement ran."""
    topo = load_topology(run["topology"])
    if run.get("algorithm"):
        return kernel_time_s(run["algorithm"], run["bytes"], topo, run["gpus"]) * 1e6
    return engine_all_reduce(run["bytes"], run["gpus"], topo, load_calibration(None, topo))[1] * 1e6


def _ep_all_to_all(run: dict) -> float:
    """One EP dispatch or combine in us, as the step model prices it (perf.layer_comm.ep_all_to_all_s) for `tokens` per
    rank of `model` over `gpus` of `topology`, with the kernels the GPU's engines run (MoRI forwards across nodes)."""
    spec, topo = load_model(run["model"]).spec, load_topology(run["topology"])
    dispatch_s, combine_s = ep_all_to_all_s(spec, run["tokens"], run["gpus"], topo, load_calibration(None, topo),
                                            run.get("dispatch", "fp8"), run["gpus"] > topo.domain_gpus,
                                            a2a_library(topo.gpu) == "mori")
    return (dispatch_s if run["phase"] == "dispatch" else combine_s) * 1e6


def _mean_tpot(run: dict) -> float:
    """Mean TPOT in ms at `concurrency` requests in flight, as `compare -l LAYOUT --max-num-seqs N` prices it: the
    engine's defaults (and the run's `cuda_graphs: false` where it ran without them), bf16 KV unless told, its default
    memory fraction (lowered to the safe one where it would run out), targets loose enough not to bind."""
    return evaluate(*_setting(run)).tpot_s * 1e3


def _mean_ttft(run: dict) -> float:
    """Mean TTFT in ms of the same evaluation as `_mean_tpot` (the prefill forward, the decode steps it waits for,
    its queue and the part outside the forwards, `ttft_host_s`). A run of a closed-loop
    benchmark that gives its `prompts` (and the server's `prefill_budget_tokens`, what a prefill forward packs) adds
    the first wave of `concurrency` prompts sent at once, and an SGLang server's `recv_interval_steps` the wait for its
    poll of a request that arrives while it decodes (perf.closed_loop)."""
    spec, topo, layout, knobs, workload, calib = _setting(run)
    m = evaluate(spec, topo, layout, knobs, workload, calib)
    steady = m.ttft_s + (recv_wait_s(run["recv_interval_steps"], m.step_s) if run["concurrency"] > 1 and
                         "recv_interval_steps" in run else 0.0)
    if "prompts" not in run:
        return steady * 1e3
    wave = first_wave(spec, topo, layout, knobs, workload, calib, run["concurrency"], run["prefill_budget_tokens"])
    return closed_loop_mean_ttft_s(steady, wave, run["concurrency"], run["prompts"]) * 1e3


def _setting(run: dict) -> tuple:
    """(spec, topology, layout, knobs, workload, calibration) of a TPOT or TTFT run."""
    spec, topo = load_model(run["model"]).spec, load_topology(run["topology"])
    layout = parse_layout(run["layout"], topo)
    workload = Workload(input_len=run["input_len"], output_len=run["output_len"], tpot_ms=1000.0)
    base = engine_default_knobs(run["engine"], spec, topo, layout.dp, uses_ep_all_to_all(layout),
                                kv_cache_dtype=run.get("kv_cache_dtype", "bf16"), max_num_seqs=run["concurrency"],
                                max_model_len=workload.max_context_len, cuda_graphs=run.get("cuda_graphs", True))
    knobs, _ = fraction_knobs(spec, topo, layout, replace(base, host_overlap=overlaps_host(
        run["engine"], run.get("engine_version"), layout.pp)), None)
    return spec, topo, layout, knobs, workload, load_calibration(None, topo)


def _wide_ep_cluster(run: dict) -> Topology:
    """The published large-scale runs' cluster: `nodes` nodes of 8 `gpu`, one 400 Gb/s InfiniBand NIC per GPU."""
    return Topology(name=f"{run['nodes']}x8", nodes=run["nodes"], gpus_per_node=8, gpu=run["gpu"],
                    inter_node={"fabric": "infiniband", "nics_per_node": 8, "nic_gbit_per_s": 400})


def _wide_ep_tokens_per_node(run: dict) -> float:
    """Output tokens/s per 8-GPU node of a DP-attention + EP decode over every GPU of the cluster, the dense parts
    on each rank's own tokens as the published recipes run them (SGLang --moe-dense-tp-size 1
    --enable-dp-lm-head, sgl-project/sglang#6017), at the published batch per GPU and context."""
    spec = load_model(run["model"]).spec
    topo = _wide_ep_cluster(run)
    gpus = run["nodes"] * 8
    knobs = replace(engine_default_knobs("sglang", spec, topo), dense_per_rank=True)
    step = decode_step(spec, topo, Layout(tp=1, dp=gpus, ep=gpus), knobs, run["batch"], run["context"],
                       load_calibration(None, topo))
    return run["batch"] / step.tpot_s * 8


def _wide_ep_prefill_tokens_per_node(run: dict) -> float:
    """Prompt tokens/s per 8-GPU node of a disaggregated prefill instance: DP attention + EP over all its GPUs, the
    dense parts per rank, `tokens_per_device` prompt tokens packed into each rank's forward (perf.disagg.prefill_rate),
    as the published prefill profiles ran it."""
    spec = load_model(run["model"]).spec
    topo = _wide_ep_cluster(run)
    gpus = run["nodes"] * 8
    knobs = replace(engine_default_knobs("sglang", spec, topo), dense_per_rank=True,
                    max_num_batched_tokens=run["tokens_per_device"], kv_cache_dtype="bf16")
    rate = prefill_rate(spec, topo, Layout(tp=1, dp=gpus, ep=gpus), knobs,
                        Workload(input_len=run["input_len"], output_len=1), load_calibration(None, topo))
    return rate.tokens_per_s / run["nodes"]


PREDICT = {"kv_capacity": _kv_capacity, "cuda_graph_gib": _cuda_graph_gib, "busbw": _collective, "time_us": _collective,
           "engine_all_reduce_us": _engine_all_reduce, "ep_all_to_all_us": _ep_all_to_all, "mean_tpot": _mean_tpot,
           "mean_ttft": _mean_ttft, "wide_ep_tokens_per_node": _wide_ep_tokens_per_node,
           "wide_ep_prefill_tokens_per_node": _wide_ep_prefill_tokens_per_node}


def run_points(path: str | None = None, category: str | None = None) -> list[Result]:
    """Predict every point of the repository's file (or of `path`; those of `category`) with the commands' code."""
    chosen = [p for p in load_points(path) if category in (None, p.category)]
    return [Result(p, _predict(p, path)) for p in chosen]


def _predict(p: Point, path: str | None) -> float:
    what = p.run.get("what", p.category)
    where = f"{path or 'validation.yaml'}: point {p.id}"
    if not isinstance(what, str) or what not in PREDICT:
        raise PlanError(f"{where}: run.what must be one of {', '.join(PREDICT)}, got {what!r}")
    try:
        return PREDICT[what](p.run)
    except KeyError as exc:
        raise PlanError(f"{where}: run needs {exc.args[0]!r} for {what}") from None
    except (TypeError, ValueError, AttributeError, ArithmeticError) as exc:   # `run` is a free-form mapping
        raise PlanError(f"{where}: run is not a valid {what} configuration ({str(exc)[:120]})") from None


def summarise(results: list[Result]) -> list[Summary]:
    """Per category, the held-out points and the fit points apart."""
    out = []
    for category in CATEGORIES:
        for role in ("held_out", "fit"):
            errors = [r.error for r in results if r.point.category == category and r.point.held_out == (role == "held_out")]
            if errors:
                out.append(Summary(category, role, len(errors), median(abs(e) for e in errors),
                                   max(abs(e) for e in errors), median(errors)))
    return out


def band_regime(p: Point) -> str:
    """Which band a held-out point informs (perf/bands.py uses the same keys): decode TPOT by whether its TP group
    spans NVLink domains, a collective by that and its link; the other categories have one band each."""
    if p.category == "collective":
        return collective_regime(load_topology(p.run["topology"]), p.run["gpus"])
    if p.category != "decode_tpot":
        return "all"
    topo = load_topology(p.run["topology"])
    return tpot_regime(parse_layout(p.run["layout"], topo), topo)


def bands(results: list[Result]) -> dict:
    """{category: {regime: {error_low, error_high, points}}} from the held-out residuals (data/bands.yaml)."""
    out: dict = {}
    for r in results:
        if r.point.held_out and r.point.category in BANDED:
            out.setdefault(r.point.category, {}).setdefault(band_regime(r.point), []).append(r.band_error)
    return {cat: {reg: {"error_low": round(min(e), 4), "error_high": round(max(e), 4), "points": len(e)}
                  for reg, e in sorted(regimes.items())} for cat, regimes in sorted(out.items())}


def loo_coverage(results: list[Result]) -> dict:
    """{category: (covered, points)}: each held-out point against the band built from the OTHER held-out points of
    its category and regime (its category's others where its regime has no other, a platform's own regime apart from
    the rest), the honest test of a band."""
    out: dict = {}
    held = [r for r in results if r.point.held_out and r.point.category in BANDED]
    regime = {r.point.id: band_regime(r.point) for r in held}
    for r in held:
        same = [o.band_error for o in held if o is not r and o.point.category == r.point.category
                and regime[o.point.id] == regime[r.point.id]]
        others = same or [o.band_error for o in held if o is not r and o.point.category == r.point.category
                          and same_platform(regime[o.point.id], regime[r.point.id])]   # as bands.error_range pools
        covered, n = out.get(r.point.category, (0, 0))
        out[r.point.category] = (covered + (min(others) <= r.band_error <= max(others) if others else 0), n + 1)
    return out
