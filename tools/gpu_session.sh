#!/usr/bin/env bash
# A full pass on an offline GPU machine whose image already has CUDA torch and
# triton (the self-hosted runner image, or a lent GPU): tests, accuracy table,
# benchmarks. Packages the image lacks (TileLang, asv, nox) come from
# .gpu-bundle/site.tar.xz, built by shared/gpu/make-bundle.sh with asv's and
# nox's pure-Python needs (the image has pyyaml, pytest-benchmark, packaging):
#   EXTRA="asv==0.6.6 asv_runner==0.3.2 build pyproject_hooks importlib_metadata lazy-importer zipp
#     json5 pympler tabulate virtualenv distlib filelock platformdirs python-discovery nox==2026.10.20
#     argcomplete attrs colorlog dependency-groups humanize" ../shared/gpu/make-bundle.sh
# The device copy has no .git: carry a copy (cp -r .git .gitcopy; carry .gitcopy) and
# restore it there (rm -rf .git; cp -r .gitcopy .git) before asv or the calibration run.
#
#   tools/gpu_session.sh STEP...
#     tests        nox -s tests (interpreter run + compiled run with --require-gpu)
#     gpu-tests    the compiled pytest run only, for images whose numpy (>= 2.4)
#                  breaks Triton 3.6's interpreter; CPU CI runs the interpreter part
#     accuracy     the LayerNorm error table
#     perf-demo    pytest-benchmark: save a run, then compare a deliberately slowed
#                  two_pass config (KERNELS_TUNED_CONFIGS) with --benchmark-compare-fail
#     bench[=ARGS] | bench-bg[=ARGS] | wait | collect
#
# bench-bg starts the benchmarks detached (setsid) so a caller limited to a few
# minutes per command can poll with `wait`. Artifacts go to $OUT (default /tmp/out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
site=/tmp/gpu-site
if [ ! -d "$site/tilelang" ]; then
  mkdir -p "$site" && tar -C "$site" -xJf .gpu-bundle/site.tar.xz || exit 1
fi
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1 KERNELS_REQUIRE_GPU=1
export ASV_PYTHONPATH="$PYTHONPATH"  # asv drops PYTHONPATH from its benchmark processes
export TILELANG_CACHE_DIR=/tmp/tilelang-cache
nox_() { python3 -m nox --no-venv --no-install "$@"; }
status=0
for step in "$@"; do
  case $step in
    tests)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
      KERNELS_JUNIT_DIR="$OUT" nox_ -s tests -- -q 2>&1 | tee "$OUT/tests.log" | grep -E "passed|failed|error|SKIPPED|^FAILED" ;
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    gpu-tests)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
      python3 -m pytest --require-gpu -q --junitxml="$OUT/compiled.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/tests.log" \
        | grep -E "passed|failed|error|SKIPPED|^FAILED"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    perf-demo)
      k="two_pass and 4096x4096 and float32 and not bwd"
      slow=$(mktemp --suffix=.json)
      gpu=$(python3 -c "from harness.device_info import device_info; print(device_info()['gpu_class'])")
      echo "{\"$gpu\": {\"two_pass/fwd/float32/4096\": {\"block_m\": 1, \"block_n\": 32, \"num_warps\": 1}}}" > "$slow"
      nox_ -s perf -- -k "$k" --benchmark-save=base 2>&1 | tee "$OUT/perf.log" | grep -E "Name|test_layer_norm|passed|Saved"
      KERNELS_TUNED_CONFIGS="$slow" nox_ -s perf -- -k "$k" --benchmark-compare --benchmark-compare-fail=median:5% \
        2>&1 | tee -a "$OUT/perf.log" | grep -E "Name|test_layer_norm|regressed|passed|failed|NOT COMPARABLE"
      [ "${PIPESTATUS[0]}" != 0 ] || { echo "perf-demo: the slowed kernel was NOT caught"; status=1; } ;;
    accuracy)
      nox_ -s accuracy 2>&1 | tee "$OUT/accuracy.md" | tail -5; [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    bench|bench=*)
      nox_ -s bench -- ${step#bench=} 2>&1 | tee /tmp/bench.log | grep -vE "^\s+(For parameters|[0-9]+x[0-9]+)" ;
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    bench-bg|bench-bg=*)
      args=${step#bench-bg}; export BENCH_ARGS=${args#=}
      rm -f /tmp/bench.rc
      setsid bash -c 'set -f; python3 -m nox --no-venv --no-install -s bench -- $BENCH_ARGS > /tmp/bench.log 2>&1; echo $? > /tmp/bench.rc' &
      echo "benchmarks started in the background" ;;
    calibrate-bench-bg|calibrate-bench-bg=*)
      # Gate calibration (needs the JUnit XML of gpu-tests in this command), then the benchmarks.
      mkdir -p /tmp/junit && cp "$OUT"/*.xml /tmp/junit/
      args=${step#calibrate-bench-bg}; export BENCH_ARGS=${args#=}
      rm -f /tmp/bench.rc /tmp/calib.rc
      setsid bash -c 'set -f; mkdir -p /tmp/calib-out
        OUT=/tmp/calib-out tools/gate_calibration.sh run /tmp/junit/compiled.xml > /tmp/calib.log 2>&1; echo $? > /tmp/calib.rc
        python3 -m nox --no-venv --no-install -s bench -- $BENCH_ARGS > /tmp/bench.log 2>&1; echo $? > /tmp/bench.rc' &
      echo "calibration and benchmarks started in the background" ;;
    wait)
      for _ in $(seq 1 110); do [ -f /tmp/bench.rc ] && break; sleep 5; done
      grep -E "^\[ *[0-9.]+%\]" /tmp/bench.log | tail -2
      if [ -f /tmp/bench.rc ]; then sed -n '/^GPU:/,$p' /tmp/bench.log; [ "$(cat /tmp/bench.rc)" = 0 ] || status=1; else echo "still running"; fi ;;
    collect)
      cp /tmp/bench.log "$OUT/bench.log" 2>/dev/null; cp /tmp/calib.log /tmp/calib-out/*.md "$OUT/" 2>/dev/null
      tar -czf "$OUT/asv.tgz" .asv/results .asv/report 2>/dev/null; ls -la "$OUT" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
exit $status
