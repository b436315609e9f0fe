"""Where SGLang puts its processes: on each node it starts tp_size_per_node x pp_size_per_node schedulers on GPUs
base_gpu_id + pp_rank_on_node x tp_size_per_node + tp_rank_on_node (SGLang 0.5.23 entrypoints/engine.py
`_calculate_rank_ranges` and the scheduler launch loop), with

    pp_size_per_node = max(pp // nnodes, 1)      tp_size_per_node = tp // max(nnodes // pp, 1)

so a --tp-size 16 without --nnodes 2 asks one 8-GPU node for GPU ids 8..15, and CUDA refuses the ordinal when the
schedulers start. A --node-rank outside 0..nnodes-1 names a node the group does not have. (vLLM checks both
itself: engines/parser/vllm_rules.py.)"""

from __future__ import annotations


def sglang_node_findings(values: dict, gpus_per_node: int) -> list[tuple]:
    """(level, flag, text) for an SGLang command whose per-node processes exceed the node's GPUs, or whose
    --node-rank is outside --nnodes. VALUES: the command's flag values (audit/lint_command FIELDS)."""
    tp, pp, nnodes, rank, base = (_int(values, k, d) for k, d in
                                  (("tp", 1), ("pp", 1), ("nnodes", 1), ("node_rank", 0), ("base_gpu", 0)))
    if min(tp, pp, nnodes) < 1:
        return []          # the engine's parser reports a value that is not a positive count
    out = []
    per_node = max(pp // nnodes, 1) * (tp // max(nnodes // pp, 1))
    if base + per_node > gpus_per_node:
        fix = (f"lower --base-gpu-id to at most {gpus_per_node - per_node}" if per_node <= gpus_per_node else
               f"give --nnodes {-(-tp * pp // gpus_per_node)} with --node-rank and --dist-init-addr")
        out.append(("error", "--base-gpu-id" if per_node <= gpus_per_node else "--nnodes",
                    f"SGLang starts {per_node} GPU processes on each of --nnodes {nnodes} node(s) (tp {tp} x pp {pp}"
                    + (f", from --base-gpu-id {base}" if base else "") + f"), but a node here has {gpus_per_node} "
                    f"GPUs: {fix}"))
    if not 0 <= rank < nnodes:
        out.append(("error", "--node-rank", f"--node-rank {rank} with --nnodes {nnodes}: ranks run 0..{nnodes - 1}"))
    return out


def _int(values: dict, key: str, default: int) -> int:
    try:
        return int(values.get(key, default))
    except ValueError:
        return 0
