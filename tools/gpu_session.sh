#!/usr/bin/env bash
# A session on an offline GPU machine whose image already has CUDA torch and
# triton (the self-hosted runner image, or a lent GPU): tests, sweeps, the main
# benchmark job and the gate calibration. Packages the image lacks (TileLang,
# asv, nox) come from .gpu-bundle/site.tar.xz, built by shared/gpu/make-bundle.sh
# with asv's and nox's pure-Python needs (the image has pyyaml, pytest-benchmark):
#   EXTRA="asv==0.6.6 asv_runner==0.3.2 build pyproject_hooks importlib_metadata lazy-importer zipp
#     json5 pympler tabulate virtualenv distlib filelock platformdirs python-discovery nox==2026.10.20
#     argcomplete attrs colorlog dependency-groups humanize" ../shared/gpu/make-bundle.sh
# The device tool takes 64 MiB a transfer, tracked files included (14.8 MB in session 19). z3's
# command-line binary and an SBOM file can go (51.5 -> 43.0 MB; the asv attention benchmarks ran
# without them, on an H200):
#   xz -dc .gpu-bundle/site.tar.xz > /tmp/site.tar && tar --delete -f /tmp/site.tar \
#     ./z3_solver-4.15.4.0.data/data/bin/z3 ./virtualenv-21.15.8.dist-info/sboms/virtualenv.cdx.json \
#     && xz -9 -T2 -c /tmp/site.tar > .gpu-bundle/site.tar.xz
# A device copy without .git gets it from a carried copy: cp -r .git .gitcopy, carry .gitcopy.
#
#   tools/gpu_session.sh STEP...       run the steps in order
#   tools/gpu_session.sh bg STEP...    run them detached (setsid), for callers limited to a few
#                                      minutes per command; then call `poll` until it says done
# Steps:
#   gpu-tests[=ARGS] the compiled pytest run with --require-gpu, JUnit XML for the gate (the image's
#                   numpy >= 2.4 breaks Triton 3.6's interpreter, and it lacks the workflow checkers:
#                   CPU CI runs those parts)
#   tune[=ARGS]     nox -s tune: LayerNorm launch configs, raw sweep in tune.json (ARGS e.g.
#                   "--variants fused --directions fwd --no-seed": one kernel's keys)
#   tune-attention  the attention backward tile sweep
#   compare=OLD     python -m harness.compare_tables: the fused kernels under table OLD vs the
#                   checkout's table, case by case, in one process (after a tune: did it pay?)
#   host-overhead   per-call host cost of the LayerNorm wrapper vs eager torch
#   metrics[=ARGS]  python -m harness.metrics: every LayerNorm case's asv metrics, in minutes
#   perf-attention  pytest-benchmark, attention backward (nox -s perf -- -k attention)
#   perf-demo       pytest-benchmark: save, slow two_pass (KERNELS_TUNED_CONFIGS), compare-fail
#   accuracy        the LayerNorm error table
#   bench[=ARGS]    nox -s bench (warm-up, asv run, publish, table, chart)
#   calibrate=TUNE_JSON  tools/gate_calibration.sh (after bench; needs gpu-tests' JUnit XML and a tune sweep)
#   poll            wait (up to ~9 min) for a `bg` run, print its progress
#   collect         logs, sweeps, the tuned table, asv results and report into $OUT/session.tgz
# Logs and artifacts go to $ART (/tmp/art), which outlives each command's $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
ART=${ART:-/tmp/art}
OUT=${OUT:-/tmp/out}
mkdir -p "$ART" "$OUT"
site=/tmp/gpu-site
if [ ! -d "$site/tilelang" ]; then
  mkdir -p "$site" && tar -C "$site" -xJf .gpu-bundle/site.tar.xz || exit 1
fi
# The carried .git, once per machine (a device copy may hold a stale one).
if [ -d .gitcopy ] && [ ! -f /tmp/git-restored ]; then rm -rf .git && cp -r .gitcopy .git && touch /tmp/git-restored; fi
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1 KERNELS_REQUIRE_GPU=1
export ASV_PYTHONPATH="$PYTHONPATH"  # asv drops PYTHONPATH from its benchmark processes
export TILELANG_CACHE_DIR=/tmp/tilelang-cache
nox_() { python3 -m nox --no-venv --no-install "$@"; }
log() { tee -a "$ART/$1.log"; }

if [ "${1:-}" = bg ]; then
  shift
  rm -f "$ART/bg.rc"
  setsid bash -c "'$0' $* > '$ART/bg.log' 2>&1; echo \$? > '$ART/bg.rc'" < /dev/null &
  echo "started in the background: $*"
  exit 0
fi

status=0
for step in "$@"; do
  echo "=== $step $(date +%T)"
  arg=""; [[ $step == *=* ]] && arg=${step#*=}  # STEP=ARG
  case $step in
    gpu-tests|gpu-tests=*)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | log gpu
      python3 -m pytest --require-gpu -q -p no:cacheprovider --ignore=tests/test_workflows.py \
        --junitxml="$ART/compiled.xml" $arg 2>&1 \
        | log tests \
        | grep -E "passed|failed|error|SKIPPED|^FAILED"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    tune|tune=*)
      nox_ -s tune -- --json "$ART/tune.json" $arg 2>&1 | log tune | grep -E "best|estimate|^\[|Error"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    tune-attention)
      python3 -m harness.tune_attention 2>&1 | log tune-attention | tail -40; [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    compare=*)
      python3 -m harness.compare_tables "$arg" kernels/layer_norm/tuned_configs.json 2>&1 | log compare
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    host-overhead)
      python3 -m harness.host_overhead 2>&1 | log host-overhead; [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    metrics|metrics=*)
      python3 -m harness.metrics $arg 2>&1 | log metrics | grep -vE "^measured"; [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    perf-attention)
      nox_ -s perf -- -k attention 2>&1 | log perf-attention | tail -30; [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    perf-demo)
      k="two_pass and 4096x4096 and float32 and not bwd"
      slow=$(mktemp --suffix=.json)
      gpu=$(python3 -c "from harness.device_info import device_info; print(device_info()['gpu_class'])")
      echo "{\"$gpu\": {\"two_pass/fwd/float32/4096\": {\"block_m\": 1, \"block_n\": 32, \"num_warps\": 1}}}" > "$slow"
      nox_ -s perf -- -k "$k" --benchmark-save=base 2>&1 | log perf-demo | grep -E "Name|test_layer_norm|passed|Saved"
      KERNELS_TUNED_CONFIGS="$slow" nox_ -s perf -- -k "$k" --benchmark-compare --benchmark-compare-fail=median:5% \
        2>&1 | log perf-demo | grep -E "Name|test_layer_norm|regressed|passed|failed|NOT COMPARABLE"
      [ "${PIPESTATUS[0]}" != 0 ] || { echo "perf-demo: the slowed kernel was NOT caught"; status=1; } ;;
    accuracy)
      nox_ -s accuracy > "$ART/accuracy.md" 2>&1; [ $? = 0 ] || status=1; tail -3 "$ART/accuracy.md" ;;
    bench|bench=*)
      nox_ -s bench -- $arg 2>&1 | log bench | grep -vE "^\s+(For parameters|[0-9]+x[0-9]+)|^\[.*(warm|/)"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    calibrate=*)
      OUT="$ART" tools/gate_calibration.sh run "$arg" "$ART/compiled.xml" 2>&1 | log calibrate
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    poll)
      for _ in $(seq 1 108); do [ -f "$ART/bg.rc" ] && break; sleep 5; done
      grep -E "^=== |^\[ *[0-9.]+%\]|^\[[0-9]+/[0-9]+\]" "$ART/bg.log" | tail -4
      if [ -f "$ART/bg.rc" ]; then echo "bg done, exit $(cat "$ART/bg.rc")"; else echo "bg still running"; fi ;;
    collect)
      mkdir -p "$ART/repo" && cp -r --parents kernels/layer_norm/tuned_configs.json .asv/results .asv/report "$ART/repo/" 2>/dev/null
      tar -czf "$OUT/session.tgz" -C "$ART" . && ls -la "$OUT" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
exit $status
