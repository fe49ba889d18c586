#!/usr/bin/env bash
# tests/package/gpu_wheel_seed.sh: the wheel on a GPU machine, against the
# source build (docs/PACKAGING.md "Measured"). Installs the wheel into a fresh
# venv (--system-site-packages, to see the machine's PyTorch; --no-index: no
# network), checks `python -m pagefast`, then runs tools/bench/seed.py in
# fresh processes, shuffled: without pagefast, with the wheel's library
# (through the venv's pagefast-run) and with the source build's library.
#
#   tests/package/gpu_wheel_seed.sh WHEEL [BUILD_DIR=build] [REPEATS=5]
#
# Prints every RESULT line and the median of each pass per configuration.
set -euo pipefail
wheel=$(readlink -f "$1")
build=$(readlink -f "${2:-build}")
repeats=${3:-5}
here=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d /tmp/pf-wheel-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$python" -m venv --system-site-packages "$work/venv"
# When $python is itself a venv's (PyTorch images often ship one), the new
# venv sees only the base interpreter's packages: add the parent's too.
"$python" -c 'import site; print("\n".join(site.getsitepackages()))' \
  >"$(echo "$work"/venv/lib/python3*/site-packages)/_pagefast_parent.pth"
"$work/venv/bin/pip" install --no-index --no-deps --quiet "$wheel"
vpy="$work/venv/bin/python"
lib=$("$vpy" -m pagefast --lib)
echo "wheel library: $lib"
"$vpy" -m pagefast
case "$lib" in "$work"/*) ;; *) echo "error: the library is not the venv's"; exit 1 ;; esac

configs="without wheel source"
: >"$work/results"
for i in $(seq "$repeats"); do
  for c in $(printf '%s\n' $configs | shuf); do
    case $c in
      without) cmd=("$vpy" "$here/tools/bench/seed.py" "$c") ;;
      wheel) cmd=("$work/venv/bin/pagefast-run" -- "$vpy" "$here/tools/bench/seed.py" "$c") ;;
      source) cmd=("$build/tools/pagefast-run" --lib "$build/interpose/libpagefast.so" -- "$vpy" "$here/tools/bench/seed.py" "$c") ;;
    esac
    env -u LD_PRELOAD PAGEFAST_STATS="$work/stats-$c-$i.json" "${cmd[@]}" | tee -a "$work/results" | grep RESULT
    if [ "$c" != without ] && ! grep -q '"cuMemAlloc_v2": [1-9]' "$work/stats-$c-$i.json"; then
      echo "error: $c: pagefast counted no cuMemAlloc_v2"; exit 1
    fi
  done
done
"$vpy" - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        kv = dict(x.split("=", 1) for x in line.split()[1:])
        rows.setdefault(kv["label"], []).append(kv)
passes = ["first_s", "second_s", "after_empty_cache_s"]
print("%-8s %5s " % ("config", "runs") + " ".join("%20s" % p for p in passes))
for label in ["without", "wheel", "source"]:
    rs = rows.get(label, [])
    print("%-8s %5d " % (label, len(rs)) + " ".join("%20.4f" % statistics.median(float(r[p]) for r in rs) for p in passes))
PY
