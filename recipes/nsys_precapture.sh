#!/usr/bin/env bash
# Does a process under `profile-trace --capture cudaprofilerapi` run at its unprofiled speed OUTSIDE the
# capture window? (issue 40: if so, a profile can carry its own unprofiled clock, measured in the same
# process before the window opens.) Real SGLang 0.5.17 EAGLE-3 on one GPU, engines in this order:
#   plain  recipes/sglang_sweep.py, no nsys (the sweep's rounds: the truth)
#   nsys   the same under profile-trace (nsys attached, node-level graph tracing), --precapture N rounds a
#          batch size before the window, then the window's one round a batch size (captured)
#   plain  again (engines differ by a few %: the two plain engines bracket the drift)
#   base   no speculation, no nsys (--steps 0: the speed-up's denominator)
#   plain:K  a plain engine at K steps (the shape whatif predicts from the profile)
#   device: carry [".sglreal", ".device-kit"] (park the fixtures first: recipes/device_tree.sh), command:
#     CONFIG=3:32 STEPS=3 BATCHES=1,16 bash recipes/nsys_precapture.sh
# Writes $OUT/precapture.log and $OUT/{plain1_sS,nsys,plain3_sS,base...}.json (recipes/sglang_sweep.py's output; nsys.json
# has precapture_batches beside batches). ENGINES: the order (default "plain nsys plain"). BUDGET_S: no
# engine is started after that many seconds. EXPORT=1 exports (and returns, xz) the nsys run's SQLite.
# NSYS_ROUND_S: the nsys engine's --min-round-s (default 3; 1 halves the captured batch-16 round: a smaller report).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; W=/tmp/precap; mkdir -p "$O" "$W"
IFS=: read -r V L <<< "${CONFIG:-3:32}"; S=${STEPS:-3}; B=${BATCHES:-1,16}; N=${PRECAPTURE:-5}
ENGINES=${ENGINES:-"plain nsys plain"}; BUDGET_S=${BUDGET_S:-520}; T0=${T0:-$(date +%s)}
exec > >(tee -a "$O/precapture.log") 2>&1
source recipes/sglang_env.sh
deep_gemm_stub on
source .device-kit/nsys-setup.sh >/dev/null || exit 5
python3 -m nvtx_annotate install-pth
[ -d "/tmp/tiny_v${V}_l${L}" ] || tiny "/tmp/tiny_v${V}_l${L}" "$V" "$L"
SW=(python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" --batches "$B")
PT=(python3 -m nvtx_annotate.profile_trace --nsys "$NSYS" -t cuda,nvtx --force --capture cudaprofilerapi
    --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none ${PT_EXTRA:-})
[ "${EXPORT:-0}" = 1 ] || PT+=(--no-export)
i=0
for e in $ENGINES; do
  i=$((i + 1)); el=$(( $(date +%s) - T0 ))
  if [ "$el" -gt "$BUDGET_S" ]; then echo "== budget: skipping $e ($i)"; continue; fi
  k=${e#*:}; [ "$k" = "$e" ] && k=$S; e=${e%%:*}     # plain:K: another step count
  name=$e; [ "$e" = plain ] && name="plain${i}_s$k"; steps=(--steps "$k"); [ "$e" = base ] && steps=(--steps 0)
  echo "== $(date -u +%T) +${el}s engine $name v$V l$L s$S batches $B"
  if [ "$e" = nsys ]; then
    timeout 300 "${PT[@]}" -o "$W/nsys" -- "${SW[@]}" "${steps[@]}" --profile-window --precapture "$N" --min-rounds 1 \
      --min-round-s "${NSYS_ROUND_S:-3}" \
      --max-rounds 1 --out "$O/nsys.json" 2>&1 | grep -e '^{' -e 'engine up' -e 'rror' -e '^nsys\|analyze-trace'
  else
    timeout 240 "${SW[@]}" "${steps[@]}" --out "$O/$name.json" 2>&1 | grep -e '^{' -e 'engine up' -e 'rror'
  fi
done
if [ "${EXPORT:-0}" = 1 ] && [ -f "$W/nsys.sqlite" ]; then
  (cd "$W" && xz -T0 -6 -c nsys.sqlite > "$O/nsys.sqlite.xz"); ls -la "$O"
fi
echo "== done in $(( $(date +%s) - T0 ))s"
