"""How the decoder layers are split over pipeline stages, and the split that balances the stages' KV pools.

Both engines split by layer count (`stage_layers`) unless an environment variable gives the split
(vLLM `VLLM_PP_LAYER_PARTITION`, SGLang `SGLANG_PP_LAYER_PARTITION`, "31,30"; read in each engine's
`distributed/utils.get_pp_indices`, vLLM 0.33.0 / SGLang 0.5.23). Both then size every stage's KV pool
to the smallest: vLLM v1 `kv_cache_planning.get_kv_cache_configs` sets each worker's num_blocks to the
minimum over workers; SGLang's `_apply_token_constraints` all-reduces max_total_num_tokens with MIN over
the ranks. A stage that carries more than its share - the embedding on the first, the LM head (and the
MTP layer) on the last, MoE layers where another stage has dense ones - has less room for KV, binds, and
the spare memory of the others is lost. `balance` moves layers across stage boundaries to recover it.
"""

from __future__ import annotations

from typing import Callable

from mla_planner.engines.profile import profile
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec

MIN_SPLIT_GAIN = 0.01   # a split other than the engine's is worth an environment variable from 1 % more KV room
Pools = Callable[[list[int]], list[int]]   # a split -> the KV tokens each stage's pool holds (memory.split_pools)


def stage_layers(num_layers: int, pp: int, engine: str = "vllm") -> list[int]:
    """Decoder layers per pipeline stage as the engine splits them (without VLLM_PP_LAYER_PARTITION /
    SGLANG_PP_LAYER_PARTITION). vLLM `distributed/utils.get_pp_indices`: even split, the remainder one
    each to the stages before the last, from the second-to-last backwards (61/4 -> [15, 15, 16, 15],
    vllm-project/vllm#46217); SGLang `distributed/utils.get_pp_indices`: the remainder to the last stages."""
    base, rem = divmod(num_layers, pp)
    parts = [base] * pp
    for i in range(rem):
        if profile(engine).pp_remainder_last:
            parts[pp - 1 - i] += 1
        else:
            parts[(pp - 2 - i) % pp] += 1
    return parts


def partition_env_name(engine: str) -> str:
    return profile(engine).pp_partition_env


def layer_split(spec: ModelSpec, layout: Layout, knobs: Knobs) -> list[int]:
    """Decoder layers per stage the engine will run: the knobs' partition (an environment variable at
    launch) or the engine's own split."""
    if knobs.pp_layer_partition:
        return list(knobs.pp_layer_partition)
    return stage_layers(spec.num_hidden_layers, layout.pp, knobs.engine)


def split_problem(spec: ModelSpec, layout: Layout, knobs: Knobs) -> str:
    """Why the knobs' partition cannot be run ('' when it can): both engines raise ValueError unless it
    has one entry per stage summing to the decoder layers; an empty stage we refuse ourselves."""
    parts = knobs.pp_layer_partition
    if not parts:
        return ""
    if len(parts) != layout.pp:
        return (f"pipeline partition {','.join(map(str, parts))} names {len(parts)} stage(s), the layout has "
                f"{layout.pp} (pp {layout.pp})")
    if sum(parts) != spec.num_hidden_layers or min(parts) < 1:
        return (f"pipeline partition {','.join(map(str, parts))} must give each of the {layout.pp} stages at least "
                f"one of the model's {spec.num_hidden_layers} decoder layers, summing to {spec.num_hidden_layers}")
    return ""


def balance(split: list[int], pools: Pools) -> list[int]:
    """The split whose smallest stage pool is largest, by hill-climbing from `split`: move one layer from
    any stage to any other (the stages between keep their counts and shift by one layer, so a layer can
    pass through a middle stage in one move) while the stages' pools, sorted ascending, grow
    lexicographically (the binding stage gains first). A stage's pool shrinks as it takes layers.
    tests/test_pp_split.py checks the result against every split for PP 2 to 4."""
    best, score = list(split), sorted(pools(split))
    while True:
        moves = []
        for a in range(len(best)):
            for b in range(len(best)):
                if a != b and best[a] > 1:
                    parts = list(best)
                    parts[a] -= 1
                    parts[b] += 1
                    moves.append((sorted(pools(parts)), parts))
        if not moves:
            return best
        top = max(moves)
        if top[0] <= score:
            return best
        score, best = top
