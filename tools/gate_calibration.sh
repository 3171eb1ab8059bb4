#!/usr/bin/env bash
# Calibrate the perf gate on a GPU machine (offline image; run after
# tools/gpu_session.sh has unpacked the bundle and written the JUnit XML):
#   A/A: the same code benchmarked under two commits; the gate must flag nothing.
#   Injected: a commit that (1) gives two_pass a slow launch config, below the
#   1.16x floor, and (2) switches the attention backward from TMA reduce to
#   regional atomics; the gate must fail, naming each.
# Commits are made in this copy of the repository only. Each is benchmarked
# in the current environment (asv's "existing"), checked out first.
#
#   tools/gate_calibration.sh run JUNIT...        the whole calibration
#   tools/gate_calibration.sh remeasure COMMIT MACHINE REGEX   (the gate's --confirm-cmd)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="/tmp/gpu-site:$PWD" PYTHONUNBUFFERED=1 TILELANG_CACHE_DIR=/tmp/tilelang-cache
export ASV_PYTHONPATH="$PYTHONPATH"  # asv drops PYTHONPATH from its benchmark processes
OUT=${OUT:-/tmp/out}
SUBSET=(
  -b "LayerNorm\.time_layer_norm\('(4096x4096|4096x5000)', 'float32', 'fwd', '(two_pass|auto|torch)'\)"
  -b "LayerNormMetrics\.track_speedup_vs_torch\('(4096x4096|4096x5000)', 'float32', 'fwd', '(two_pass|auto)'\)"
  -b "AttentionBackward\.time_backward\('seed-gqa-192-128-causal'"
)

bench() {  # COMMIT MACHINE ASV_ARGS...
  local commit=$1 machine=$2; shift 2
  git checkout -q "$commit" && python3 -m asv run -E "existing:$(command -v python3)" --launch-method forkserver \
    --machine "$machine" --set-commit-hash "$commit" --record-samples "$@" > "/tmp/asv-$commit.log" 2>&1
}

case ${1:-} in
  remeasure) bench "$2" "$3" --append-samples -b "$4"; status=$?; git checkout -q calibration-injected; exit $status ;;
  run) shift ;;
  *) echo "usage: $0 run JUNIT... | remeasure COMMIT MACHINE REGEX"; exit 2 ;;
esac
junit=(); for j in "$@"; do junit+=(--junit "$j"); done
git diff --quiet HEAD && [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "commit or stash first"; exit 2; }
a=$(git rev-parse HEAD)
git checkout -q -b calibration
git -c user.name=calibration -c user.email=calibration@example.invalid commit -q --allow-empty -m "A/A twin" && a2=$(git rev-parse HEAD)
machine=$(python3 -m harness.device_info | tail -n 1)
gpu=$(python3 -c "from harness.device_info import device_info; print(device_info()['gpu_class'])")
python3 - "$gpu" <<'PY'
import json, sys
from kernels.layer_norm.config import TUNED_FILE, tuned_key
import torch
table = json.loads(TUNED_FILE.read_text()) if TUNED_FILE.exists() else {}
slow = {"block_m": 1, "block_n": 32, "num_warps": 1}  # 32-element chunks, one warp: far below the floor
for n in (4096, 5000):
    table.setdefault(sys.argv[1], {})[tuned_key("two_pass", "fwd", torch.float32, n)] = slow
TUNED_FILE.write_text(json.dumps(table, indent=1) + "\n")
PY
sed -i 's/backward_kernel(shape, accum, arch)(/backward_kernel(shape, "region" if accum == "tma" else accum, arch)(/' kernels/attention/ops.py
git diff --stat HEAD
git add kernels/layer_norm/tuned_configs.json kernels/attention/ops.py  # the tuned table may be new
git -c user.name=calibration -c user.email=calibration@example.invalid commit -qm "injected: slow two_pass config, tma -> region" || exit 1
b=$(git rev-parse HEAD)
git branch -f calibration-injected "$b"
for c in "$a" "$a2" "$b"; do bench "$c" "$machine" "${SUBSET[@]}" || echo "asv run for $c exited non-zero"; done
git checkout -q calibration-injected
confirm="tools/gate_calibration.sh remeasure {commit} {machine} {regex}"
selection=(); for ((i = 1; i < ${#SUBSET[@]}; i += 2)); do selection+=(--bench "${SUBSET[i]}"); done
for pair in "A/A $a $a2" "injected $a $b"; do
  set -- $pair
  echo "=== gate: $1 (base ${2:0:8}, head ${3:0:8}) ==="
  name=${1//\//}
  python3 -m harness.gate --base "$2" --head "$3" --machine "$machine" "${junit[@]}" "${selection[@]}" \
    --out "/tmp/gate-$name" --confirm-cmd "$confirm" > "$OUT/gate-$name.md" 2>"/tmp/gate-$name.err"
  echo "exit code $?"; tail -n 25 "$OUT/gate-$name.md"
done
git checkout -q "$a"  # back to the code under test
