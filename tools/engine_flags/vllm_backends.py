"""vLLM attention-backend facts, read from the backend classes in the wheel.

* names: ``AttentionBackendEnum`` in ``vllm/v1/attention/backends/registry.py``;
  ``vllm/config/attention.py`` matches them case-insensitively and reads
  ``auto`` as automatic selection;
* per backend (``vllm/v1/attention/backends/mla/*.py`` and the DSV4 model
  packages): MLA or not, sparse or not, KV-cache dtypes, kernel block sizes
  (``AttentionBackend.supports_block_size`` in ``vllm/v1/attention/backend.py``),
  compute capability, and device-family limits found through
  ``supports_combination`` (FlashMLA dense is Hopper only:
  ``vllm/v1/attention/ops/flashmla.py``);
* the MLA auto-selection order: ``_get_backend_priorities`` in
  ``vllm/platforms/cuda.py``.
"""

from __future__ import annotations

import ast
from typing import Any

from .evaluate import dotted, try_eval
from .symbols import SourceIndex

REGISTRY = "vllm.v1.attention.backends.registry"
ATTENTION_CONFIG = "vllm.config.attention"
MAX_CHAIN = 10


def attention_backend_rules(idx: SourceIndex) -> dict:
    enum_cls, _ = idx.find_class(REGISTRY, "AttentionBackendEnum")
    names = []
    for st in enum_cls.body:
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id.isupper():
            path = try_eval(idx, st.value, REGISTRY)
            names.append((st.targets[0].id, path if isinstance(path, str) else None))
    validator_src = idx.source_of(ATTENTION_CONFIG)
    vsrc = idx.zf.read(validator_src).decode()
    if 'value.lower() == "auto"' not in vsrc or "AttentionBackendEnum[value.upper()]" not in vsrc:
        raise SystemExit("AttentionConfig backend validator changed")
    backends: dict[str, Any] = {}
    for n, path in names:
        backends[n] = _backend_entry(idx, path)
    return {
        "source": idx.source_of(REGISTRY),
        "validator_source": validator_src,
        "case_insensitive": True,
        "auto_values": ["auto"],
        "names": sorted(backends),
        "backends": {k: v for k, v in backends.items() if v.get("mla")},
        "block_size_rule": "block_size % base == 0 for some base in block_size_bases "
        "(AttentionBackend.supports_block_size; empty list = any)",
        "block_size_rule_source": idx.source_of("vllm.v1.attention.backend"),
    }


def _backend_entry(idx: SourceIndex, path: str | None) -> dict:
    """backend_info of the enum value's class path, plus its source file."""
    info: dict[str, Any] = {}
    if path:
        mod, _, clsname = path.rpartition(".")
        info = backend_info(idx, mod, clsname)
    if path and idx.module_path(path.rpartition(".")[0]):
        info["source"] = idx.source_of(path.rpartition(".")[0])
    else:
        info["source"] = idx.source_of(REGISTRY)
    return info


def _base_chain(idx: SourceIndex, cls: ast.ClassDef, mod: str) -> list[tuple[ast.ClassDef, str]]:
    """cls and its ancestors, following the first class base (at most 10)."""
    chain: list[tuple[ast.ClassDef, str]] = []
    c, m = cls, mod
    for _ in range(MAX_CHAIN):
        chain.append((c, m))
        nxt = None
        for b in c.bases:
            res = idx.resolve_expr(b, m)
            if res and res[0] == "class":
                nxt = (res[1], res[2])
                break
        if nxt is None:
            break
        c, m = nxt
    return chain


def _lookup(chain: list[tuple[ast.ClassDef, str]], name: str) -> tuple[ast.AST, str] | None:
    """The nearest method or class attribute ``name`` along the chain."""
    for c, m in chain:
        for st in c.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
                return st, m
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                tgt = st.targets[0] if isinstance(st, ast.Assign) else st.target
                if isinstance(tgt, ast.Name) and tgt.id == name:
                    return st, m
    return None


def _constant_return(f: tuple[ast.AST, str] | None, default: bool) -> bool:
    """A method's ``return <constant>`` (its first return), else default."""
    if f is not None and isinstance(f[0], ast.FunctionDef):
        ret = [n for n in ast.walk(f[0]) if isinstance(n, ast.Return)]
        if ret and isinstance(ret[0].value, ast.Constant):
            return bool(ret[0].value.value)
    return default


def backend_info(idx: SourceIndex, mod: str, clsname: str) -> dict:
    if idx.module_ast(mod) is None:
        return {}
    try:
        cls, cmod = idx.find_class(mod, clsname)
    except SystemExit:
        return {}
    chain = _base_chain(idx, cls, cmod)
    info: dict[str, Any] = {"class": f"{mod}.{clsname}"}
    info["mla"] = _constant_return(_lookup(chain, "is_mla"), any(c.name == "MLACommonBackend" for c, _ in chain[1:]))
    sparse = _constant_return(_lookup(chain, "is_sparse"), False)
    info["sparse"] = sparse
    f = _lookup(chain, "supported_kv_cache_dtypes")
    if f is not None:
        v = try_eval(idx, f[0].value, f[1])
        info["kv_cache_dtypes"] = list(v) if isinstance(v, (list, tuple)) else None
    _block_size_bases(info, chain, cls, cmod)
    f = _lookup(chain, "supports_compute_capability")
    if f is not None:
        info["compute_capability_majors"] = _cc_majors(f[0])
    # supports_combination: device family helpers (e.g. FlashMLA dense: Hopper only)
    f = _lookup(chain, "supports_combination")
    if f is not None and isinstance(f[0], ast.FunctionDef):
        fam = _combination_families(idx, f[0], sparse)
        if fam is not None:
            info["device_family_majors"], info["device_family_source"], info["device_family_message"] = fam
    return info


def _block_size_bases(info: dict, chain: list, cls: ast.ClassDef, cmod: str) -> None:
    """Kernel block sizes (``get_supported_kernel_block_sizes``: ints and
    ``MultipleOf(n)``), or the ``block_size % n`` of the class's own
    ``supports_block_size``."""
    f = _lookup(chain, "get_supported_kernel_block_sizes")
    if f is not None:
        ret = [n for n in ast.walk(f[0]) if isinstance(n, ast.Return)]
        if ret and isinstance(ret[0].value, ast.List):
            bases = []
            for e in ret[0].value.elts:
                if isinstance(e, ast.Constant):
                    bases.append(e.value)
                elif isinstance(e, ast.Call) and dotted(e.func) == "MultipleOf":
                    bases.append(e.args[0].value)
            info["block_size_bases"] = bases
    f = _lookup(chain, "supports_block_size")
    if f is not None and f[1] == cmod and any(st is f[0] for st in cls.body):
        for n in ast.walk(f[0]):
            if isinstance(n, ast.Compare) and isinstance(n.left, ast.BinOp) and isinstance(n.left.op, ast.Mod):
                info["block_size_bases"] = [n.left.right.value]


def _cc_majors(fn: ast.FunctionDef) -> Any:
    """``supports_compute_capability``: 'any', [majors], {'min': n} or 'unknown'."""
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if len(rets) != 1:
        return "unknown"
    v = rets[0].value
    if isinstance(v, ast.Constant) and v.value is True:
        return "any"
    if isinstance(v, ast.Compare) and dotted(v.left).endswith(".major"):
        op, rhs = v.ops[0], v.comparators[0]
        if isinstance(op, ast.Eq) and isinstance(rhs, ast.Constant):
            return [rhs.value]
        if isinstance(op, ast.In) and isinstance(rhs, (ast.List, ast.Tuple)):
            return [e.value for e in rhs.elts]
        if isinstance(op, ast.GtE) and isinstance(rhs, ast.Constant):
            return {"min": rhs.value}
    return "unknown"


def _branch_helper(branch: list[ast.stmt]) -> tuple[str | None, dict[str, str]]:
    """The first function called in the branch, and the branch's ``from m import`` names."""
    imports: dict[str, str] = {}
    helper = None
    for st in branch:
        for c in ast.walk(st):
            if isinstance(c, ast.ImportFrom) and c.module:
                for a in c.names:
                    imports[a.asname or a.name] = c.module
            if helper is None and isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
                helper = c.func.id
    return helper, imports


def _combination_families(idx: SourceIndex, fn: ast.FunctionDef, sparse: bool) -> tuple[list[int], str, str | None] | None:
    """Follow `if use_sparse: ... else: return helper()[1]` into the helper
    and collect its is_device_capability_family(N) tests."""
    for n in ast.walk(fn):
        if not (isinstance(n, ast.If) and dotted(n.test) == "use_sparse"):
            continue
        helper, imports = _branch_helper(n.body if sparse else n.orelse)
        if not (helper and helper in imports):
            continue
        hmod = imports[helper]
        hfn = idx.find_function(hmod, helper)
        fams = [
            c.args[0].value // 10
            for c in ast.walk(hfn)
            if isinstance(c, ast.Call) and dotted(c.func).endswith("is_device_capability_family")
        ]
        msgs = [
            c.value
            for r in ast.walk(hfn) if isinstance(r, ast.Return)
            for c in ast.walk(r)
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and "only supported" in c.value
        ]
        if fams:
            return fams, idx.source_of(hmod), (msgs[0] if msgs else None)
    return None


def _names_in_return(stmts: list[ast.stmt]) -> list[str]:
    for st in stmts:
        if isinstance(st, ast.Return) and isinstance(st.value, ast.List):
            return [e.attr for e in st.value.elts if isinstance(e, ast.Attribute)]
    return []


def auto_priority(idx: SourceIndex) -> dict:
    """MLA backends in selection order per ``device_capability.major`` branch."""
    mod = "vllm.platforms.cuda"
    fn = idx.find_function(mod, "_get_backend_priorities")
    out: dict[str, Any] = {"source": idx.source_of(mod)}
    use_mla = next(n for n in fn.body if isinstance(n, ast.If) and dotted(n.test) == "use_mla")
    node: ast.If | None = use_mla.body[0] if isinstance(use_mla.body[0], ast.If) else None
    while node is not None:
        test = node.test
        if isinstance(test, ast.Compare) and dotted(test.left) == "device_capability.major":
            out[f"sm{test.comparators[0].value}x"] = _names_in_return(node.body)
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
        else:
            out["other"] = _names_in_return(node.orelse)
            node = None
    return out


def rocm_auto_priority(idx: SourceIndex) -> dict:
    """MLA backends in selection order on ROCm (vllm/platforms/rocm.py ``_get_backend_priorities``): the sparse
    list, and the dense list with AITER's MLA switched on (VLLM_ROCM_USE_AITER=1) and off. Only these names are
    candidates on an AMD GPU; the CUDA-built backends (FlashMLA, FlashInfer, CUTLASS, FlashAttention MLA) are not."""
    mod = "vllm.platforms.rocm"
    fn = idx.find_function(mod, "_get_backend_priorities")
    out: dict[str, Any] = {"source": idx.source_of(mod)}
    sparse = next(n for n in fn.body if isinstance(n, ast.If) and dotted(n.test) == "use_sparse")
    out["sparse"] = _names_in_return(sparse.body)
    use_mla = next(n for n in fn.body if isinstance(n, ast.If) and dotted(n.test) == "use_mla")
    aiter = use_mla.body[0]
    if not (isinstance(aiter, ast.If) and "is_mla_enabled" in ast.unparse(aiter.test)):
        raise SystemExit("ROCm MLA priority: the AITER branch changed")
    out["aiter"] = _names_in_return(aiter.body)
    out["no_aiter"] = _names_in_return(aiter.orelse)
    return out
