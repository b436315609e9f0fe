"""The words of a launch: what one node runs (`NodeCommand`), what it is built from (`LaunchInputs`),
and the typed flag list both engine modules use (`flag_words`).

An argv is a plain list of strings. The only words that are not literal are `ShellRef`s: references
to a variable the node script itself defines (`HEAD_IP`, `VLLM_HOST_IP`), rendered as `"${NAME}"`
followed by the quoted literal suffix; everything else is shell-quoted when rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Union

from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import engine_version
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

MODES = ("native", "ray")
FlagValue = Union[None, bool, int, float, str, tuple]   # a tuple: several words after the flag


GPU_TAG = "mla_plan_gpu"    # bench.sh records the GPU in its result file (audit/calibrate.py refuses another GPU's)
DEPLOYMENT_TAG = "mla_plan_deployment"   # ... and, behind a prefill/decode router, its deployment (calibrate refuses)
REPLICAS_TAG = "mla_plan_replicas"   # ... and the replicas behind its endpoint (a balancer: calibrate splits the load)


class ShellRef(str):
    """An argv word `prefix${VAR}suffix`: a variable the node script sets, with a literal prefix (`http://`) and
    suffix (`:5000`)."""

    def __new__(cls, var: str, suffix: str = "", prefix: str = "") -> "ShellRef":
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", var):
            raise ValueError(f"not a shell variable name: {var!r}")
        word = super().__new__(cls, prefix + "${" + var + "}" + suffix)
        word.var, word.suffix, word.prefix = var, suffix, prefix
        return word

    def __reduce__(self):
        return ShellRef, (self.var, self.suffix, self.prefix)


@dataclass(frozen=True)
class Ports:
    """Default ports (the engines' own defaults), shifted by `stride` per replica: SGLang with DP
    attention also binds the 7 ports above --dist-init-addr's (or --port + 233), so neighbours need room."""
    vllm_api: int = 8000
    sglang_api: int = 30000
    vllm_master: int = 29501      # --master-port (torch.distributed rendezvous, mp executor)
    vllm_dp_rpc: int = 13345      # --data-parallel-rpc-port (vLLM docs/serving/data_parallel_deployment.md)
    sglang_dist_init: int = 5000  # --dist-init-addr HOST:PORT (SGLang docs/basic_usage/deepseek_v3.md)
    ray: int = 6379               # ray start --head --port
    stride: int = 10

    def of(self, base: int, replica: int) -> int:
        return base + self.stride * replica


@dataclass(frozen=True)
class LaunchInputs:
    spec: ModelSpec
    topology: Topology
    workload: Workload
    layout: Layout
    knobs: Knobs
    model_path: str
    mode: str = "native"
    pp_partition: Optional[tuple[int, ...]] = None   # layers per PP stage, None: the engine's own split
    ports: Ports = Ports()


@dataclass(frozen=True)
class NodeCommand:
    """One process tree started on one node: `env` exported, then `argv` exec'd.

    node_rank    which node of the topology (and which node-K.sh) runs it
    gpus         GPUs the command claims on that node, by the engine's own rules
    role         server (runs the HTTP API), headless (engine ranks only), ray-head, ray-worker
    program_len  words of `argv` before the engine's own arguments (`vllm serve` = 2)
    before       commands run first on the node (`ray start --head`)
    needs        script variables the argv refers to (HEAD_IP, VLLM_HOST_IP)
    cluster_gpus ray-head only: GPUs to wait for in the Ray cluster before serving
    notes        fixed-text warnings for the script's comments (never user-supplied text)
    """
    node_rank: int
    argv: list[str]
    env: dict[str, str]
    gpus: int
    replica: int = 0
    role: str = "server"
    port: Optional[int] = None
    program_len: int = 0
    before: list[list[str]] = field(default_factory=list)
    needs: tuple[str, ...] = ()
    cluster_gpus: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def engine_args(self) -> list[str]:
        """The arguments the engine's parser sees (what mla_planner/engines/parser/ checks)."""
        return self.argv[self.program_len:]

    @property
    def runs_engine(self) -> bool:
        return self.role != "ray-worker"


def format_value(value: FlagValue) -> str:
    """A flag value as the engine parses it: ints plainly, floats without float noise."""
    if isinstance(value, bool):
        raise TypeError("booleans are bare flags, not values")
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)


def flag_words(flags: list[tuple[str, FlagValue]]) -> list[str]:
    """[(flag, value)] -> argv words. None/False: omitted; True: the bare flag; a tuple: the flag and each value; else
    flag + value."""
    words: list[str] = []
    for flag, value in flags:
        if value is None or value is False:
            continue
        values = value if isinstance(value, tuple) else (value,)
        words += [flag] if value is True else \
            [flag, *(v if isinstance(v, ShellRef) else format_value(v) for v in values)]
    return words


def check_model_path(model_path: str) -> str:
    """The model word must be one non-empty argument that no parser can mistake for a flag."""
    if not model_path:
        raise PlanError("the plan names no model an engine can serve (a model read from a .json file not named "
                        "config.json; engines load a folder holding config.json and the weights): give --model-path "
                        "to `emit`")
    if model_path.startswith("-"):
        raise PlanError(f"model path {model_path!r} starts with '-', which the engines would parse as a flag; "
                        "use ./ in front of a local folder")
    return model_path


def check_inputs(inp: LaunchInputs) -> None:
    """What neither engine can express, whatever the layout's shape."""
    check_model_path(inp.model_path)
    if inp.mode not in MODES:
        raise PlanError(f"launch mode '{inp.mode}' is not one of {', '.join(MODES)}")
    if inp.layout.kv_layout != "replicated":
        raise PlanError(f"{inp.layout.label}: the {inp.layout.kv_layout} KV layout has no flag in vLLM "
                        f"{engine_version('vllm')} or SGLang {engine_version('sglang')} (both keep the full latent "
                        "on every TP rank); pick a replicated candidate")
    if inp.knobs.mtp and inp.spec.drafter is None:
        raise PlanError(f"MTP speculative decoding needs a model with MTP layers or a DSpark draft; {inp.spec.name} "
                        "has neither")
