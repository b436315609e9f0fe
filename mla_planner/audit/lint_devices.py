"""Which GPUs a launch command sees (lint): the visible-device variables against the GPU processes the command
starts on its node.

  vLLM 0.33.0   on ROCm copies HIP_VISIBLE_DEVICES into CUDA_VISIBLE_DEVICES and raises "Inconsistent GPU
                visibility env vars" when both are set and differ (vllm/platforms/rocm.py _sync_hip_cuda_env_vars);
                on one node it starts tp x pp x dp workers, one per visible GPU
  SGLang 0.5.23 reads only CUDA_VISIBLE_DEVICES for its GPU ids, while the HIP runtime applies HIP_VISIBLE_DEVICES
                first; on each node it starts tp_per_node x pp_per_node schedulers from --base-gpu-id
                (audit/lint_nodes.py), times the --dp-size replicas
Fewer visible GPUs than processes stops start-up (a device ordinal past the visible ones). A command that runs across
nodes (vLLM's --nnodes, --headless or --data-parallel-size-local) is left alone: its per-node share is not in the
command's own flags alone."""

from __future__ import annotations

from mla_planner.audit.lint_command import Command
from mla_planner.specs.layout import Layout

# flags (and their short aliases, vllm/engine/arg_utils.py) after which a vLLM command's share of GPUs on this node is
# not tp x pp x dp: across nodes, a per-node DP size, or one DP rank of an external load balancer
VLLM_ACROSS_NODES = ("--nnodes", "-n", "--headless", "--data-parallel-size-local", "-dpl", "--data-parallel-start-rank",
                     "-dpr", "--data-parallel-rank", "-dpn", "--data-parallel-external-lb",
                     "--data-parallel-hybrid-lb", "--data-parallel-multi-port-external-lb")


def device_findings(cmd: Command, layout: Layout, gpu, gpus_per_node: int) -> list[tuple[str, str, str]]:
    """(level, flag, text): visibility variables that contradict each other, or name fewer GPUs than the command
    starts processes on this node; and vLLM's data-parallel ranks all started on one node that cannot hold them
    (without --data-parallel-size-local, and not across nodes, vLLM 0.33 runs every DP rank locally:
    engine/arg_utils.py "local DP size defaults to global DP size if not set")."""
    hip, cuda = cmd.env.get("HIP_VISIBLE_DEVICES"), cmd.env.get("CUDA_VISIBLE_DEVICES")
    out = []
    if gpu.vendor == "amd" and hip and cuda and hip != cuda:
        out.append(("error" if cmd.engine == "vllm" else "warn", "HIP_VISIBLE_DEVICES",
                    f"'{hip}' and CUDA_VISIBLE_DEVICES '{cuda}' differ: " +
                    ("vLLM 0.33 refuses to start ('Inconsistent GPU visibility env vars', vllm/platforms/rocm.py)"
                     if cmd.engine == "vllm" else "the HIP runtime applies HIP_VISIBLE_DEVICES, SGLang numbers its "
                     "GPUs from CUDA_VISIBLE_DEVICES") + ": set one"))
    shown = [v for v in (hip if gpu.vendor == "amd" else None, cuda) if v is not None]
    needed = _processes_on_node(cmd, layout)
    if cmd.engine == "vllm" and layout.dp > 1 and layout.tp * layout.pp <= gpus_per_node < needed:
        out.append(("error", "--data-parallel-size", f"{layout.dp} ranks of tp {layout.tp} x pp {layout.pp} all start "
                    f"on this node ({needed} GPU processes; it has {gpus_per_node}): across nodes give each node "
                    "--data-parallel-size-local, --data-parallel-start-rank and --data-parallel-address"))
    if shown and needed:
        visible = min(len([d for d in v.split(",") if d.strip()]) for v in shown)
        if visible < needed:
            name = "CUDA_VISIBLE_DEVICES" if cuda is not None else "HIP_VISIBLE_DEVICES"
            out.append(("error", name, f"names {visible} GPU(s), but the command needs {needed} visible GPUs on "
                                       "this node (its GPU processes, from --base-gpu-id on): they cannot all find a "
                                       "device"))
    return out


def _processes_on_node(cmd: Command, layout: Layout) -> int:
    """GPU processes the command starts on its own node (0: not known from its flags)."""
    if cmd.engine == "vllm":
        words = {a.split("=", 1)[0].replace("_", "-") for a in cmd.args if a.startswith("-")}   # --nnodes=2 too
        return 0 if words & set(VLLM_ACROSS_NODES) else layout.instance_gpus
    tp, pp = layout.stage_gpus, layout.pp     # SGLang's --tp-size is the whole group, DP attention included
    nnodes = int(cmd.values["nnodes"]) if str(cmd.values.get("nnodes", "")).isdigit() else 1
    if nnodes < 1:
        return 0
    base = int(cmd.values["base_gpu"]) if str(cmd.values.get("base_gpu", "")).isdigit() else 0
    return base + max(pp // nnodes, 1) * (tp // max(nnodes // pp, 1)) * layout.replicas
