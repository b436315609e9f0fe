"""How sure a prediction is: the low/high band around a predicted figure, from the validation residuals.

data/bands.yaml holds, per category and regime, the range [e_low, e_high] of (predicted - published) / published
over the held-out published measurements (`mla-plan validate`). If a new prediction errs as those did, the value
a deployment would measure lies in [predicted / (1 + e_high), predicted / (1 + e_low)]; a figure that varies as
the inverse (throughput, tokens/s per user, at the same batch) lies in [predicted (1 + e_low), predicted (1 + e_high)].
A regime with fewer than MIN_POINTS points is widened to its whole category's range: one point gives no spread.
TTFT's band is wide: the part outside the forward passes (`ttft_host_s`, the server's tokenizing, scheduling and
streaming) is one constant fit to one sweep, while published mean TTFTs grow faster with the load than the model's.
The TPOT band's evidence is TP8 runs on one node, SGLang's of DeepSeek-R1 and vLLM's of Kimi-K2.5
(data/validation.yaml); other layouts and models borrow it. AMD Instinct GPUs have a regime of their own, whose
evidence is SGLang's DeepSeek-R1 sweep on MI325X (1.2-1.5x slower than the model) and GLM-5.1 sweep on MI300X
(TileLang DSA kernels, 2.1-2.7x); an AMD TP group across nodes takes the widest of that and the cross-node TP
range. Collective times take the nccl-tests / rccl-tests residuals (bus bandwidths turned into time errors), by
whether the group crosses NVLink domains and, inside one, by the link: inside an NVLink or Infinity Fabric node the
held-out points are the engines' own all-reduce kernels' (perf/custom_all_reduce.py, which prices a step's
all-reduces there); nccl-tests' NVLink points only set factors.
"""

from __future__ import annotations

from functools import lru_cache

from mla_planner.core.resources import data_dir, read_data
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import Topology

MIN_POINTS = 3
PLATFORM_REGIMES = ("rocm",)   # a platform's own kernels: neither lend their range to the others' fallback nor borrow


@lru_cache(maxsize=1)
def _table() -> dict:
    return read_data(data_dir("bands.yaml"))


def error_range(category: str, regime: str = "all") -> tuple[float, float]:
    """(e_low, e_high) of the held-out residuals of `category` in `regime`, widened to the category's whole range
    where the regime has fewer than MIN_POINTS points (a platform's own regime and the others do not mix there)."""
    regimes = _table()[category]
    entry = regimes.get(regime)
    if entry and entry["points"] >= MIN_POINTS:
        return entry["error_low"], entry["error_high"]
    pool = [e for name, e in regimes.items() if same_platform(name, regime)] or list(regimes.values())
    return min(e["error_low"] for e in pool), max(e["error_high"] for e in pool)


def same_platform(a: str, b: str) -> bool:
    """Whether two regimes may pool their residuals: a platform's own regime (PLATFORM_REGIMES) only with another
    platform regime, the rest only with each other."""
    return (a in PLATFORM_REGIMES) == (b in PLATFORM_REGIMES)


def tpot_regime(layout: Layout, topo: Topology) -> str:
    """Decode TPOT's regime: on AMD Instinct GPUs their own ("rocm": the engines' ROCm kernels err apart from the
    CUDA ones the other points ran), else whether the TP group spans NVLink domains (its all-reduces cross the
    NICs)."""
    if topo.gpu.vendor == "amd":
        return "rocm"
    return "tp_across_domains" if layout.tp > topo.domain_gpus else "tp_in_domain"


def tpot_errors(layout: Layout, topo: Topology) -> tuple[float, float]:
    """Decode TPOT's (e_low, e_high) for `layout`: its regime's, and on AMD with a TP group across nodes the widest of
    the rocm and tp_across_domains ranges (both apply; neither's evidence covers the two together)."""
    errors = error_range("decode_tpot", tpot_regime(layout, topo))
    if topo.gpu.vendor == "amd" and layout.tp > topo.domain_gpus:
        across = error_range("decode_tpot", "tp_across_domains")
        errors = (min(errors[0], across[0]), max(errors[1], across[1]))
    return errors


def collective_regime(topo: Topology, gpus: int) -> str:
    """A collective's regime: across NVLink domains (the NICs bound it), else the link inside one."""
    if gpus > topo.domain_gpus:
        return "across_domains"
    return {"xgmi": "xgmi", "pcie": "pcie"}.get(topo.intra_node.kind, "nvlink")


def band(value: float, errors: tuple[float, float], inverse: bool = False) -> tuple[float, float]:
    """(low, high) of what would be measured for a predicted `value` (module docstring)."""
    low, high = errors
    if inverse:
        return value * (1 + low), value * (1 + high)
    return value / (1 + high), value / (1 + low)


def performance_bands(m, topo: Topology) -> dict[str, float]:
    """`name_low` / `name_high` of every decode figure of the metrics `m` (perf.metrics.Metrics) that a candidate or a
    compared layout carries; the step errs as the TPOT it sets does, and without CUDA graphs also as the published
    eager runs did (validate's eager_tpot)."""
    errors = tpot_errors(m.layout, topo)
    if not m.memory.knobs.cuda_graphs:     # a host-bound eager step errs as the eager runs did, too
        eager = error_range("eager_tpot")
        errors = (min(errors[0], eager[0]), max(errors[1], eager[1]))
    out = {}
    for name, inverse in (("tpot_s", False), ("step_s", False), ("throughput_tokens_per_s", True),
                          ("throughput_tokens_per_s_per_gpu", True), ("tokens_per_s_per_user", True)):
        out[f"{name}_low"], out[f"{name}_high"] = band(getattr(m, name), errors, inverse)
    for name in ("ttft_s", "ttft_longest_s"):
        out[f"{name}_low"], out[f"{name}_high"] = band(getattr(m, name), error_range("ttft"))
    return out


def collective_band(seconds: float, layout: Layout, topo: Topology) -> tuple[float, float]:
    """(low, high) of the collective seconds a decode step of `layout` would measure: its widest group (the stage:
    TP x DP attention, EP over it) sets the regime."""
    return band(seconds, error_range("collective", collective_regime(topo, layout.stage_gpus)))


def kv_band(tokens: int) -> tuple[int, int]:
    """(low, high) KV capacity the engine would log for a predicted `tokens`."""
    low, high = band(tokens, error_range("kv_capacity"))
    return int(low), int(high)


def beside(figures: dict, bands: dict) -> dict:
    """`figures` with each `name_low` / `name_high` of `bands` placed right after `name` (the JSON convention)."""
    out = {}
    for name, value in figures.items():
        out[name] = value
        out.update({k: bands[k] for k in (f"{name}_low", f"{name}_high") if k in bands})
    return out
