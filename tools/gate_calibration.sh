#!/usr/bin/env bash
# Calibrate the perf gate on a GPU machine (offline image; run after `nox -s bench`
# has benchmarked HEAD and gpu-tests has written its JUnit XML; see tools/gpu_session.sh):
#   A/A: the same code under a second commit, benchmarked again; the gate must flag nothing.
#   Injected: one commit with three known regressions; the gate must fail, naming each:
#     1. two_pass forward on one warp and 32-column chunks: far below the 1.16x floor;
#     2. fused forward fp32 at N=8192 on a configuration the tune sweep measured slower
#        (the candidate nearest 1.25x the best), a relative regression with no floor;
#     3. the attention backward's tma mode switched to regional atomics.
# Commits are made in this copy of the repository only (branch calibration). HEAD's
# results come from the main job on this machine when present; A' and B (and A
# otherwise) are benchmarked on the gated subset below, in the current environment
# (asv's "existing"), each checked out first.
#
#   tools/gate_calibration.sh run TUNE_JSON JUNIT...   the whole calibration
#   tools/gate_calibration.sh remeasure COMMIT MACHINE REGEX   (the gate's --confirm-cmd)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
SUBSET=(
  -b "LayerNorm\.time_layer_norm\('(4096x4096|4096x5000|8192x8192)', 'float32', 'fwd', '(fused|two_pass|auto|torch)'\)"
  -b "LayerNormMetrics\.track_speedup_vs_torch\('(4096x4096|4096x5000)', 'float32', 'fwd', '(two_pass|auto)'\)"
  -b "AttentionBackward\.time_backward\('seed-gqa-192-128-causal', '(tma|region|elem)'\)"
)

bench() {  # COMMIT MACHINE ASV_ARGS...
  local commit=$1 machine=$2; shift 2
  # -f: measure exactly the commit's tree, whatever a previous step left in the work tree
  # (seen once on a lent H200: the injected files reported as locally modified)
  git status --short --untracked-files=no | sed 's/^/dirty before checkout: /'
  git checkout -q -f "$commit" && python3 -m asv run -E "existing:$(command -v python3)" --launch-method forkserver \
    --machine "$machine" --set-commit-hash "$commit" --record-samples "$@" > "$OUT/asv-${commit:0:8}.log" 2>&1
}

case ${1:-} in
  remeasure) bench "$2" "$3" --append-samples -b "$4"; status=$?; git checkout -q -f calibration-injected; exit $status ;;
  run) shift; tune_json=$1; shift ;;
  *) echo "usage: $0 run TUNE_JSON JUNIT... | remeasure COMMIT MACHINE REGEX"; exit 2 ;;
esac
junit=(); for j in "$@"; do junit+=(--junit "$j"); done
git diff --quiet HEAD && [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "commit or stash first"; exit 2; }
a=$(git rev-parse HEAD)
machine=$(python3 -m harness.device_info | tail -n 1)
git checkout -q -B calibration
commit() { git -c user.name=calibration -c user.email=calibration@example.invalid commit -q "$@"; }
commit --allow-empty -m "A/A twin" && a2=$(git rev-parse HEAD)
python3 - "$tune_json" <<'PY' || exit 1
import json, sys
from harness.device_info import device_info
from kernels.layer_norm.config import TUNED_FILE, read_tuned_table, tuned_key, write_tuned_table
import torch

gpu = device_info()["gpu_class"]
table = read_tuned_table(TUNED_FILE)
entries = table.setdefault(gpu, {})
for n in (4096, 5000):
    entries[tuned_key("two_pass", "fwd", torch.float32, n)] = {"block_m": 1, "block_n": 32, "num_warps": 1}
key = tuned_key("fused", "fwd", torch.float32, 8192)
timed = [m for m in json.load(open(sys.argv[1]))["measurements"] if m["key"] == key and m["shape"] == "8192x8192"]
best = min(m["ms"] for m in timed)
slower = min(timed, key=lambda m: abs(m["ms"] / best - 1.25))
print(f"injected {key}: {slower['config']}, swept at {slower['ms'] / best:.2f}x the best")
entries[key] = slower["config"]
write_tuned_table(TUNED_FILE, table)
PY
sed -i 's/backward_kernel(shape, accum, arch, tiles)(/backward_kernel(shape, "region" if accum == "tma" else accum, arch, tiles)(/' \
  kernels/attention/ops.py
git diff --stat HEAD
git add kernels/layer_norm/tuned_configs.json kernels/attention/ops.py
commit -m "injected: two_pass below its floor, a slower fused config, tma -> region" || exit 1
b=$(git rev-parse HEAD)
git branch -f calibration-injected "$b"
todo=("$a2" "$b")  # A's results come from the main job on this machine, or are measured here first
ls ".asv/results/$machine/${a:0:8}-"*.json > /dev/null 2>&1 || todo=("$a" "${todo[@]}")
for c in "${todo[@]}"; do bench "$c" "$machine" "${SUBSET[@]}" || echo "asv run for ${c:0:8} exited non-zero"; done
git checkout -q -f calibration-injected
confirm="tools/gate_calibration.sh remeasure {commit} {machine} {regex}"
selection=(); for ((i = 1; i < ${#SUBSET[@]}; i += 2)); do selection+=(--bench "${SUBSET[i]}"); done
for pair in "A-A $a $a2" "injected $a $b"; do
  set -- $pair
  echo "=== gate: $1 (base ${2:0:8}, head ${3:0:8}) ==="
  python3 -m harness.gate --base "$2" --head "$3" --machine "$machine" "${junit[@]}" "${selection[@]}" \
    --out "$OUT/gate-$1" --confirm-cmd "$confirm" > "$OUT/gate-$1.md" 2> "$OUT/gate-$1.err"
  echo "exit code $?"; tail -n 30 "$OUT/gate-$1.md"
done
git checkout -q -f "$a"  # back to the code under test
