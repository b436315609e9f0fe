"""The environment variables each engine reads, out of the wheel.

vLLM: the keys of ``environment_variables`` in ``vllm/envs.py``. vLLM itself
holds a user's environment to that table: ``Platform.validate_environ``
(``vllm/platforms/interface.py``, called from ``EngineArgs``) logs "Unknown
vLLM environment variable detected" for any ``VLLM_*`` name outside it, and
refuses to start with ``--fail-on-environ-validation``.

SGLang has no such check and reads its variables in several ways (the
``Envs`` class in ``sglang/srt/environ.py``, ``get_bool_env_var("SGLANG_...")``,
``os.environ``), so the table is every ``SGLANG_*`` / ``SGL_*`` word anywhere
in the wheel's Python source (comments included, so it errs towards knowing a
name): a name outside it is read by no code of that release.
"""

from __future__ import annotations

import ast
import re

from .wheel import WheelSource

VLLM_ENVS = "vllm.envs"
SGLANG_WORD = re.compile(r"\b(?:SGLANG|SGL)_[A-Z0-9_]*[A-Z0-9]\b")


def vllm_environment(idx: WheelSource) -> dict:
    """{names, source, check}: the variables vLLM's validate_environ accepts."""
    tree = idx.require_ast(VLLM_ENVS)
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(node.value, ast.Dict):
            names = sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant))
            break
    else:
        raise SystemExit("vllm/envs.py: the environment_variables table is gone")
    interface = idx.source_text("vllm.platforms.interface")
    if "Unknown vLLM environment variable detected" not in interface:
        raise SystemExit("vllm/platforms/interface.py: validate_environ's unknown-variable check is gone")
    return {"names": names, "prefix": "VLLM_", "source": idx.source_of(VLLM_ENVS),
            "check": idx.source_of("vllm.platforms.interface") + " validate_environ"}


def sglang_environment(idx: WheelSource) -> dict:
    """{names, source}: every SGLANG_* / SGL_* name the wheel's source mentions."""
    names: set[str] = set()
    for path in sorted(n for n in idx.names if n.endswith(".py") and n.startswith("sglang/")):
        names.update(SGLANG_WORD.findall(idx.zf.read(path).decode("utf-8")))
    if "SGLANG_USE_AITER" not in names:
        raise SystemExit("sglang: no SGLANG_* variable found; the wheel's layout changed")
    return {"names": sorted(names), "prefix": "SGLANG_", "source": "sglang/**/*.py (every SGLANG_*/SGL_* name)"}
