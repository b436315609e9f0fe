"""Extract the CLI flag tables of vLLM and SGLang from their published wheels.

The wheels are read as zip files and their Python source is analysed with
``ast`` only: nothing from vLLM or SGLang is imported or executed, and none of
their source is copied.  The output is two JSON fixtures used by
``mla_planner/engines/parser/``:

    mla_planner/data/engines/vllm-<version>.json
    mla_planner/data/engines/sglang-<version>.json

Usage (from the repository root)::

    pip download --no-deps -d /tmp/wheels vllm==0.33.0 sglang==0.5.23
    python -m tools.engine_flags \\
        --vllm-wheel /tmp/wheels/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl \\
        --sglang-wheel /tmp/wheels/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \\
        --out-dir mla_planner/data/engines

What is extracted
-----------------
vLLM (``vllm serve``):
  * ``vllm/entrypoints/common/cli_args.py`` ``make_arg_parser`` (positional
    model, --headless, --api-server-count, ...), ``FrontendArgs`` /
    ``BaseFrontendArgs`` fields (every field becomes ``--field-name``), and
    their ``_customize_cli_kwargs`` overrides;
  * ``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args`` and
    ``AsyncEngineArgs.add_cli_args``: every ``add_argument`` call, with the
    ``**xxx_kwargs["field"]`` keyword sets re-derived from the config
    dataclasses in ``vllm/config/*.py`` by mirroring ``_compute_kwargs``
    (bool -> BooleanOptionalAction (vLLM registers EnableDisableAction for
    it), Literal -> choices unless ``str`` is also allowed, list/tuple/set ->
    nargs, int -> int / human-readable int, dataclass -> JSON, ...).
  * The attention-backend facts (compute capability, kernel block sizes,
    KV-cache dtypes) from ``vllm/v1/attention/backends/mla/*.py``, the valid
    KV-cache dtypes from ``vllm/config/cache.py`` and the auto-selection
    priorities from ``vllm/platforms/cuda.py``.

SGLang (``python -m sglang.launch_server``):
  * ``sglang/srt/server_args.py``: ServerArgs is assembled from the
    namespace structs listed in ``_INPUT_NAMESPACES``
    (``sglang/srt/arg_groups/fields/*.py``); their ``A[T, Arg(...)]`` fields
    are turned into flags by mirroring
    ``sglang/srt/arg_groups/arg_utils.py::add_cli_args_from_dataclass``;
    plus the explicit ``parser.add_argument`` calls in
    ``ServerArgs.add_cli_args``.
  * Attention-backend choices (``sglang/srt/arg_groups/choices.py``) and
    the MLA backend rules from ``sglang/srt/arg_groups/overrides.py``,
    ``parallel_hook.py``, ``serving_hook.py``,
    ``sglang/srt/layers/attention/attention_registry.py`` and
    ``sglang/srt/utils/common.py``.

Rules that are expressed as code (``if x % y``) are not interpreted
generically: for each rule the extractor locates the code it relies on in the
wheel (and fails loudly if that code is gone) and records the wheel file as
``source``.  Values (backend lists, block sizes, dtypes, capabilities) are
always read out of the wheel.

Modules
-------
wheel              reading modules out of the wheel zip; sha256 and version
symbols            module symbol tables, following imports to definitions
evaluate           static evaluation of constant expressions
flag               the Flag record and its JSON form
type_atoms         vLLM field annotations reduced to type atoms
vllm_kwargs        vLLM's get_kwargs/_compute_kwargs mirror
vllm_argparse      explicit add_argument keywords -> Flag (vLLM)
vllm_add_cli_args  walking an add_cli_args body (vLLM)
vllm_cli           the ``vllm serve`` flags
vllm_backends      vLLM attention-backend facts
vllm_rules         the other vLLM cross-flag rules
sglang_fields      SGLang A[T, Arg(...)] fields -> flags
sglang_cli         the SGLang server flags
sglang_rules       SGLang cross-flag rules
environment        the environment variables each engine reads
fixtures           the fixture documents and JSON writing
__main__           the command line
"""
