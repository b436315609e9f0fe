#!/usr/bin/env bash
# The one GPU check of mla-plan, sized for a borrowed single H200 (or H100): ~4 minutes, at most 415 s
# (each step has its own limit).
#   1. nvidia-smi and the torch / Triton / FlashMLA versions
#   2. pytest -m gpu tests/            the kernel's bf16 correctness and `verify --device cuda` at planned shapes
#   3. benchmarks/attention_bench.py   fast path vs plain torch (vs FlashMLA when installed), % of copy bandwidth;
#                                      target >= 80 % at B >= 64, context >= 4096, 16 heads, bf16
#   4. mla-plan verify --device cuda   DeepSeek-V3 on topologies/8xh200.yaml (a `plan` candidate when the plan
#                                      command exists, else --layout tp=8), writing a calibration file
#   5. mla-plan verify --only attention on DeepSeek-V3.2 (the sparse decode microkernel, verify-dsa.json) and on
#      DeepSeek-V4-Flash (the compressed decode microkernel per layer kind, verify-v4.json)
#   6. mla-plan compare without and with that calibration: what the measurements change
# Output lands in $OUT (else ./out): gpu_check.log (everything), attention.json, verify.json, calibration.yaml,
# plan.json (if made). Needs only the device image's python3 (torch with CUDA and Triton); pydantic and the
# pinned click are not in that image: carry them as wheels in .whl/ (docs/verify.md says how).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PY:-python3}"
if ls .whl/*.whl > /dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
FAILED=()

step() {  # step NAME SECONDS COMMAND...: run with a time limit, everything tee'd into the log
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start))s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || FAILED+=("$name:$rc")
  return 0
}

step nvidia-smi 15 nvidia-smi
step versions 30 "$PY" -c "import torch, importlib.util as u; print('torch', torch.__version__, 'cuda', torch.version.cuda,
  'gpu', torch.cuda.get_device_name(0), 'triton', u.find_spec('triton') is not None,
  'flash_mla', u.find_spec('flash_mla') is not None)"
step pytest-gpu 120 "$PY" -m pytest -m gpu tests/ -q -p no:cacheprovider --continue-on-collection-errors
step attention-bench 70 "$PY" benchmarks/attention_bench.py --json "$OUT/attention.json"

CANDIDATE=(--model deepseek-v3 --topology 8xh200 --layout tp=8)
if "$PY" -m mla_planner.cli plan --help > /dev/null 2>&1 \
   && timeout 30 "$PY" -m mla_planner.cli plan --model deepseek-v3 --topology 8xh200 --json > "$OUT/plan.json" 2>> "$LOG"; then
  CANDIDATE=(--plan "$OUT/plan.json" --candidate 1)
else
  rm -f "$OUT/plan.json"
fi
export OUT PY
step verify 80 bash -c '"$PY" -m mla_planner.cli verify --device cuda "$@" --json \
  --write-calibration "$OUT/calibration.yaml" > "$OUT/verify.json"' verify "${CANDIDATE[@]}"
[ -s "$OUT/verify.json" ] && "$PY" - "$OUT/verify.json" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
t = d["target"]
print(f"{t['source']}: {t['layout']}, micro-batch {t['micro_batch']}, context {t['context_len']}, {t['heads_per_rank']} heads")
for c in d["checks"]:
    ratio = "-" if c["ratio"] is None else f"{c['ratio']:.3f}"
    print(f"  {c['name']:<24} {c['status']:<6} ratio {ratio:<8} {c['error'] or c['detail']}")
print("verdict", d["verdict"], "| calibration", d["calibration"])
EOF
# DeepSeek Sparse Attention: the sparse decode microkernel (indexer, top-k, attention) at V3.2's planned tp8 shape
step verify-dsa 40 bash -c '"$PY" -m mla_planner.cli verify --device cuda --only attention --json \
  --model tests/fixtures/hf/DeepSeek-V3.2 --topology 8xh200 --layout tp=8 > "$OUT/verify-dsa.json"'
# DeepSeek-V4: the compressed decode microkernel (window, CSA top-k with the indexer, HCA) at V4-Flash's tp8 shape
step verify-v4 40 bash -c '"$PY" -m mla_planner.cli verify --device cuda --only attention --json \
  --model tests/fixtures/hf/DeepSeek-V4-Flash-0731 --topology 8xh200 --layout tp=8 > "$OUT/verify-v4.json"'
step compare-default 15 "$PY" -m mla_planner.cli compare --model deepseek-v3 --topology 8xh200 --layout tp=8
if [ -f "$OUT/calibration.yaml" ]; then
  step compare-calibrated 15 "$PY" -m mla_planner.cli compare --model deepseek-v3 --topology 8xh200 --layout tp=8 \
    --calibration "$OUT/calibration.yaml"
fi

echo "=== done in ${SECONDS}s; failed steps: ${FAILED[*]:-none}" | tee -a "$LOG"
[ "${#FAILED[@]}" -eq 0 ]
