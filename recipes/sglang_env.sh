#!/usr/bin/env bash
# Sourced by the real-SGLang recipes on the H200 (a device run from the repository root, with
# ../shared/sglang-h200 copied to .sglreal/ and ../shared/device/* to .device-kit/, both listed in
# .git/info/exclude and carried): unpacks the SGLang 0.5.17 bundle once, sets the environment it needs,
# and defines `tiny DIR VOCAB LAYERS` (config.json files of a tiny Llama target and its 1-layer
# EAGLE-3 draft; hidden 1024 / head_dim 128 / 8 KV heads keep the bundle's prebuilt JIT kernels) and
# `deep_gemm_stub on|off` (SGLang 0.5.17 imports DeepGEMM while capturing EAGLE graphs; unused here).
K="$REPO/.sglreal"
SHA=$(cut -d' ' -f1 "$K/h200_bundle.sha256")
if [ "$(cat /tmp/b/.bundle_sha 2>/dev/null)" != "$SHA" ]; then
  rm -rf /tmp/b; mkdir -p /tmp/b && tar -C /tmp/b -xJf "$K"/h200_bundle_sglang0.5.17.tar.xz || exit 4
  echo "$SHA" > /tmp/b/.bundle_sha
fi
[ -d /tmp/b/site/pydantic ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/b/site "$K"/extra/*.whl
[ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ] && export CUDA_HOME=/usr/local/cuda
export PYTHONPATH=/tmp/b/site:$REPO TVM_FFI_CACHE_DIR=/tmp/b/tvm-ffi-cache FLASHINFER_WORKSPACE_BASE=/tmp/b \
  HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 SGLANG_ENABLE_JIT_DEEPGEMM=0
deep_gemm_stub() {
  rm -rf /tmp/b/site/deep_gemm; [ "$1" = on ] || return 0
  mkdir -p /tmp/b/site/deep_gemm
  for m in __init__ utils; do cat > /tmp/b/site/deep_gemm/$m.py <<'PY'
"""Stub: DeepGEMM is not used by this run; importing it must not fail."""
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    def unavailable(*a, **k):
        raise RuntimeError(f"deep_gemm.{name} is a stub")
    return unavailable
PY
  done
}
tiny() {  # tiny DIR VOCAB LAYERS
  python3 /tmp/b/make_tiny_models.py "$1" >/dev/null
  python3 - "$@" <<'PY'
import json, sys
d, vocab, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for name in ("target", "eagle3", "eagle"):
    p = f"{d}/{name}/config.json"; c = json.load(open(p))
    c["vocab_size"] = vocab
    if "draft_vocab_size" in c: c["draft_vocab_size"] = vocab
    if name == "target": c["num_hidden_layers"] = layers   # EAGLE-3 taps layers 2, L/2, L-3: L >= 8
    json.dump(c, open(p, "w"))
PY
}
