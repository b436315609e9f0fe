"""The Pareto front of throughput (per GPU, or in all) against speed per user: each candidate's curve as its
batch grows, the front over them, drawn in the terminal or as a PNG."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mla_planner.core.errors import PlanError
from mla_planner.perf.metrics import in_flight, tokens_per_request
from mla_planner.perf.request_times import mean_tpot_s, serving_round_s
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Workload
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class TradeoffPoint:
    option: int                        # index into SearchResult.options
    batch_per_dp_rank: int
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    tokens_per_s: float = 0.0          # the whole deployment's

    def throughput(self, rank_by: str) -> float:
        """The x of the Pareto plot, in the ranking's unit."""
        return self.tokens_per_s if rank_by == "total" else self.tokens_per_s_per_gpu


def tradeoff_curve(spec: ModelSpec, topo: Topology, index: int, o, workload: Workload,
                   calib: Calibration) -> list[TradeoffPoint]:
    """Throughput (per GPU and in all) of `o` (a search.Option) against speed per user as the running batch
    grows (powers of two up to what the KV pool holds, plus the chosen batch): the latency/throughput trade
    each layout offers, so the Pareto front shows which layout wins at which TPOT, not only at the target."""
    m, knobs, lay = o.tuned.metrics, o.tuned.knobs, o.layout
    kv_max = m.memory.requests_fit(tokens_per_request(workload, knobs.block_size))
    top = min(kv_max, knobs.max_num_seqs)     # what this deployment, as launched, can ever run
    batches = sorted({b for b in (2 ** i for i in range(12)) if b <= top} | {m.concurrency_per_dp_rank} - {0})
    out = []
    for b in batches:
        tpot, d, p = mean_tpot_s(spec, topo, lay, knobs, workload, calib, b)
        round_s = serving_round_s(spec, lay, b, workload, d, p, knobs.engine)[0]
        total = in_flight(b, lay, workload) / round_s
        out.append(TradeoffPoint(index, b, total / lay.total_gpus, 1.0 / tpot, total))
    return out


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points not dominated in both coordinates (higher is better in both), sorted by x."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1], i))
    front, best_y = [], float("-inf")
    for i in order:
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return sorted(front, key=lambda i: points[i][0])


def ascii_scatter(points: list[tuple[float, float]], front: list[int], width: int = 60, height: int = 16,
                  x_label: str = "tokens/s per GPU", y_label: str = "tokens/s per user") -> str:
    """A character plot: '*' on the Pareto front, '.' elsewhere, the best candidate as '1'."""
    if not points:
        return "(no candidates)"
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_hi, y_hi = max(xs) or 1.0, max(ys) or 1.0
    grid = [[" "] * width for _ in range(height)]
    on_front = set(front)
    for i, (x, y) in sorted(enumerate(points), key=lambda t: t[0] in on_front):
        col = min(width - 1, int(x / x_hi * (width - 1)))
        row = height - 1 - min(height - 1, int(y / y_hi * (height - 1)))
        grid[row][col] = "1" if i == 0 else ("*" if i in on_front else ".")
    lines = [f"{y_hi:>8.0f} |" + "".join(grid[0])] + ["         |" + "".join(r) for r in grid[1:]]
    lines.append("       0 +" + "-" * width)
    lines.append(f"          0{'':>{width - 12}}{x_hi:,.0f}")
    lines.append(f"          x: {x_label}   y: {y_label}   1 = best, * = Pareto front")
    return "\n".join(lines)


def png_plot(path: Path, points: list[tuple[float, float]], labels: list[str], front: list[int],
             x_label: str = "output tokens/s per GPU") -> None:
    """Write the scatter with the front highlighted; needs the optional `plot` extra (matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlanError("--plot needs matplotlib: pip install 'mla-plan[plot]'") from None
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=14, c="#9aa5b1", label="candidates")
    fx, fy = [points[i][0] for i in front], [points[i][1] for i in front]
    ax.plot(fx, fy, "o-", c="#d9480f", label="Pareto front")
    for i in front:
        ax.annotate(labels[i], points[i], fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel(x_label)
    ax.set_ylabel("output tokens/s per user")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    try:
        fig.savefig(tmp)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PlanError(f"--plot {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
