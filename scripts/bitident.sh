#!/usr/bin/env bash
# Bit-identity of a refactor: run a fixed set of runs and `book --quick`
# with one normlab binary into a folder, so that two binaries (before and
# after a change that must not alter results) can be compared:
#
#   scripts/bitident.sh run  BIN OUTDIR   # write the runs with BIN
#   scripts/bitident.sh diff DIR_A DIR_B  # compare two such folders
#   scripts/bitident.sh diff --tolerance DIR_A DIR_B
#                          # the same, but decoder reports (SmolLM2, Gemma 3,
#                          # the tiny families) agree within 1e-6 of each
#                          # field's largest value
#
# The set: the toy net and the GPT in every placement, the GPT with every
# row-wise norm kind, the residual options (residual off, 1/sqrt(N)
# write-back, ReZero, LayerScale, LayerNorm Scaling, Mix-LN), QK-Norm,
# SwiGLU, bf16 and f16 storage, the residual designs (hyper-connections
# static and dynamic, mHC, block and full Attention Residuals), the
# attention output gate (elementwise and headwise), the sweep run ids of
# collapse and lr-sensitivity (`sweep --dry-run --json`), and `inspect`'s
# reports (JSON and figures) of a run folder, an HC run folder, every tiny
# family of the test fixtures (Hugging Face folders and GGUF files, on
# token ids) and, when
# models/ holds them (scripts/fetch_smollm2.sh, scripts/fetch_gemma3.sh,
# scripts/fetch_minilm.sh), SmolLM2, Gemma 3 (also with --ffn-clamp) and
# MiniLM: a missing model is named on stderr and its report left out, so
# compare folders written on machines that hold the same models. `diff` masks only the fields
# that record time, date and machine: in JSON files the keys `date`,
# `machine`, `elapsed_seconds`, `wall_seconds`, `seconds`, `step_seconds`,
# `started`, `finished`, `timings`, `steps_per_sec`, `tokens_per_sec`, and
# any key ending in `_ms`/`_seconds` (also inside safetensors metadata);
# in report.md and findings.md the lines that print a date, a machine, a
# wall time or a measured speed-up; the speed chapter's files (timings
# only) are skipped, and its entries in findings.json. Everything else (metrics.jsonl, checkpoints, figures' data,
# verdicts) must be byte-identical.
set -euo pipefail
mode="${1:?usage: bitident.sh run BIN OUT | diff [--tolerance] A B}"

run_set() {
  local bin="$1" out="$2"
  mkdir -p "$out/runs"
  local common=(--steps 6 --batch 2 --eval-sequences 2 --eval-every 3 --log-every 1 --quiet)
  local gpt=(--model gpt --layers 2 --d-model 32 --heads 2 --seq 16 --hidden 64)
  local toy=(--model toy --layers 3)
  for p in none post pre sandwich peri olmo2 deepnorm mixln; do
    "$bin" train "${toy[@]}" --placement "$p" "${common[@]}" --out "$out/runs/toy-$p"
    "$bin" train "${gpt[@]}" --placement "$p" "${common[@]}" --out "$out/runs/gpt-$p"
  done
  for n in layernorm rmsnorm zrmsnorm scalenorm none dyt derf; do
    "$bin" train "${gpt[@]}" --norm "$n" "${common[@]}" --out "$out/runs/gpt-norm-$n"
  done
  "$bin" train "${gpt[@]}" --no-residual "${common[@]}" --out "$out/runs/gpt-nores"
  "$bin" train "${gpt[@]}" --branch-scale invsqrt "${common[@]}" --out "$out/runs/gpt-invsqrt"
  "$bin" train "${gpt[@]}" --rezero "${common[@]}" --out "$out/runs/gpt-rezero"
  "$bin" train "${gpt[@]}" --layerscale 0.1 "${common[@]}" --out "$out/runs/gpt-layerscale"
  "$bin" train "${gpt[@]}" --lns "${common[@]}" --out "$out/runs/gpt-lns"
  "$bin" train "${toy[@]}" --lns "${common[@]}" --out "$out/runs/toy-lns"
  "$bin" train "${gpt[@]}" --placement mixln --mixln-post-layers 1 "${common[@]}" --out "$out/runs/gpt-mixln1"
  "$bin" train "${gpt[@]}" --qk-norm "${common[@]}" --out "$out/runs/gpt-qknorm"
  "$bin" train "${gpt[@]}" --act swiglu "${common[@]}" --out "$out/runs/gpt-swiglu"
  for t in bf16 f16; do
    "$bin" train "${gpt[@]}" --dtype "$t" "${common[@]}" --out "$out/runs/gpt-$t"
  done
  "$bin" train "${gpt[@]}" --hc 3 "${common[@]}" --out "$out/runs/gpt-hc"
  "$bin" train "${gpt[@]}" --hc 3 --hc-dynamic "${common[@]}" --out "$out/runs/gpt-hc-dynamic"
  "$bin" train "${toy[@]}" --hc 2 --hc-dynamic "${common[@]}" --out "$out/runs/toy-hc-dynamic"
  "$bin" train "${gpt[@]}" --mhc 3 "${common[@]}" --out "$out/runs/gpt-mhc"
  "$bin" train "${toy[@]}" --mhc 2 "${common[@]}" --out "$out/runs/toy-mhc"
  "$bin" train "${gpt[@]}" --attnres 2 "${common[@]}" --out "$out/runs/gpt-attnres2"
  "$bin" train "${gpt[@]}" --attnres 1 "${common[@]}" --out "$out/runs/gpt-attnres1"
  "$bin" train "${gpt[@]}" --attn-gate elementwise "${common[@]}" --out "$out/runs/gpt-gate-elem"
  "$bin" train "${gpt[@]}" --attn-gate headwise "${common[@]}" --out "$out/runs/gpt-gate-head"
  mkdir -p "$out/inspect"
  # (The run folder's path, which the report names, written as OUT.)
  "$bin" inspect "$out/runs/gpt-pre" --json | sed "s|$out|OUT|g" > "$out/inspect/run-gpt-pre.json"
  "$bin" inspect "$out/runs/gpt-hc" --json | sed "s|$out|OUT|g" > "$out/inspect/run-gpt-hc.json"
  "$bin" inspect "$out/runs/gpt-sandwich" | sed "s|$out|OUT|g" > "$out/inspect/run-gpt-sandwich.txt"
  local smol=models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf
  local gemma=models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf
  local minilm=models/all-MiniLM-L6-v2
  if [ -f "$smol" ]; then
    "$bin" inspect "$smol" --json --held-out-tokens 128 --out "$out/inspect/smollm2" > "$out/inspect/smollm2.json"
    "$bin" inspect "$smol" --held-out-tokens 64 --text "The river runs" > "$out/inspect/smollm2.txt"
  else
    echo "bitident: $smol missing (scripts/fetch_smollm2.sh): its inspect report is left out" >&2
  fi
  if [ -f "$gemma" ]; then
    "$bin" inspect "$gemma" --json --held-out-tokens 128 --out "$out/inspect/gemma3" > "$out/inspect/gemma3.json"
    "$bin" inspect "$gemma" --json --held-out-tokens 64 --ffn-clamp 7 --text "The river runs" > "$out/inspect/gemma3-clamp.json"
  else
    echo "bitident: $gemma missing (scripts/fetch_gemma3.sh): its inspect report is left out" >&2
  fi
  if [ -d "$minilm" ]; then
    "$bin" inspect "$minilm" --json > "$out/inspect/minilm.json"
  else
    echo "bitident: $minilm missing (scripts/fetch_minilm.sh): its inspect report is left out" >&2
  fi
  # Every tiny family of the fixtures (Hugging Face folders and GGUF
  # files, none with a tokenizer: token ids).
  local fx=crates/normlab/tests/fixtures
  local ids=(--ids "1,2,3,4,5,6,7,8,9,10,11,12" --ids "1,20,21,22,23,24,25" --held-out-ids "$(seq -s, 1 60)")
  for f in "$fx"/hf_tiny/* "$fx"/gemma3_tiny "$fx"/gguf_tiny/*.gguf; do
    "$bin" inspect "$f" --json "${ids[@]}" > "$out/inspect/tiny-$(basename "$f").json"
    "$bin" inspect "$f" "${ids[@]}" > "$out/inspect/tiny-$(basename "$f").txt"
  done
  for e in collapse lr-sensitivity; do
    "$bin" sweep "$e" --dry-run --json --out "$out/sweep-$e" > "$out/sweep-$e.json"
  done
  "$bin" book --quick --out "$out/book" > /dev/null
}

# A JSON file with the time/date/machine fields removed, keys sorted.
mask_json() {
  python3 - "$1" <<'EOF'
import json, sys
MASK = {"date", "machine", "elapsed_seconds", "wall_seconds", "seconds", "step_seconds",
        "train_seconds", "steps_per_sec", "tokens_per_sec", "started", "finished", "timings",
        "other_machines", "recorded", "started_unix", "ms_per_step", "speed_vs_layernorm",
        # residual-routing's equal-wall-time comparison (from its step timings)
        "step_ratio", "step_ratio_q1_q3", "equal_time_step", "loss_equal_time",
        "loss_equal_time_std"}
def strip(v):
    if isinstance(v, dict) and v.get("experiment") == "speed":
        return "(a speed measurement)"
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items()
                if k not in MASK and not k.endswith("_ms") and not k.endswith("_seconds")}
    if isinstance(v, list):
        return [strip(x) for x in v]
    if isinstance(v, str) and " Step time: " in v:
        return v[:v.index(" Step time: ")]  # norm-kind's measured step times
    return v
def show(text):
    try:
        return json.dumps(strip(json.loads(text)), sort_keys=True)
    except ValueError:
        return text.rstrip("\n")
path = sys.argv[1]
if path.endswith(".safetensors"):
    # The tensors byte for byte; the metadata (a resume file's progress,
    # which counts training seconds) masked as JSON.
    import hashlib, struct
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = {k: show(v) for k, v in header.pop("__metadata__", {}).items()}
    print(json.dumps(header, sort_keys=True), json.dumps(meta, sort_keys=True))
    print(hashlib.sha256(raw[8 + n:]).hexdigest())
    sys.exit(0)
text = open(path).read()
try:
    print(json.dumps(strip(json.loads(text)), sort_keys=True, indent=1))
except ValueError:
    # JSON lines (metrics.jsonl, `--json` listings), or not JSON at all.
    for line in text.splitlines():
        print(show(line))
EOF
}

# With --tolerance: two decoder reports (JSON, or the text inspect prints)
# agree when every number is within 1e-6 of the largest |value| of its
# field (the same key path, array positions ignored) in the first report;
# in text, within that or one unit of the last digit printed. Fields only
# the second report has are listed (an additive change), not compared.
close_reports() {
  python3 - "$1" "$2" <<'EOF'
import json, re, sys
a_path, b_path = sys.argv[1], sys.argv[2]
def flat(v, key, out):
    if isinstance(v, dict):
        for k, x in v.items():
            flat(x, key + "/" + k, out)
    elif isinstance(v, list):
        for x in v:
            flat(x, key + "[]", out)
    else:
        out.append((key, v))
    return out
def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)
if a_path.endswith(".json"):
    try:
        a, b = (flat(json.load(open(p)), "", []) for p in (a_path, b_path))
    except ValueError:
        sys.exit(1)
    # Fields added by the second report are listed, not held against it
    # (an additive change to the report); every field of the first must
    # be in the second, in order.
    keys_a = [k for k, _ in a]
    b_in_a = [(k, v) for k, v in b if k in set(keys_a)]
    added = sorted({k for k, _ in b} - set(keys_a))
    if added:
        print(f"  added fields (not compared): {', '.join(added[:8])}{' ...' if len(added) > 8 else ''}")
    b = b_in_a
    if keys_a != [k for k, _ in b]:
        print("  the reports' fields differ")
        sys.exit(1)
    scale = {}
    for k, v in a:
        if is_num(v):
            scale[k] = max(scale.get(k, 0.0), abs(v))
    for (k, x), (_, y) in zip(a, b):
        if is_num(x) and is_num(y):
            if abs(x - y) > 1e-6 * scale[k]:
                print(f"  {k}: {x} against {y}")
                sys.exit(1)
        elif x != y:
            print(f"  {k}: {x!r} against {y!r}")
            sys.exit(1)
    sys.exit(0)
NUM = re.compile(r"-?\d+(?:\.(\d+))?(?:e[-+]?\d+)?", re.I)
la, lb = open(a_path).read().splitlines(), open(b_path).read().splitlines()
if len(la) != len(lb):
    sys.exit(1)
for x, y in zip(la, lb):
    if NUM.sub("#", x) != NUM.sub("#", y):
        print(f"  {x!r} against {y!r}")
        sys.exit(1)
    for m, n in zip(NUM.finditer(x), NUM.finditer(y)):
        u, v = float(m.group(0)), float(n.group(0))
        if "e" in m.group(0).lower():
            unit = abs(u) * 1e-3
        else:
            unit = 10.0 ** -len(m.group(1) or "")
        if abs(u - v) > max(1e-6 * abs(u), unit * 1.0001):
            print(f"  {x!r} against {y!r}")
            sys.exit(1)
EOF
}

diff_sets() {
  local tol=0
  if [ "$1" = "--tolerance" ]; then tol=1; shift; fi
  local a="$1" b="$2" bad=0
  (cd "$a" && find . -type f | sort) > /tmp/bitident-a.list
  (cd "$b" && find . -type f | sort) > /tmp/bitident-b.list
  if ! diff -q /tmp/bitident-a.list /tmp/bitident-b.list >/dev/null; then
    echo "different file lists:"; diff /tmp/bitident-a.list /tmp/bitident-b.list | head -20; bad=1
  fi
  while read -r f; do
    [ -f "$b/$f" ] || continue
    # Decoder reports, with --tolerance: numbers within 1e-6 of their
    # field's largest value.
    case "$f" in
      ./inspect/smollm2*|./inspect/gemma3*|./inspect/tiny-*)
        if [ "$tol" = 1 ] && [ "${f##*.}" != png ] && [ "${f##*.}" != svg ]; then
          if ! close_reports "$a/$f" "$b/$f"; then echo "differs beyond 1e-6 of the field's largest value: $f"; bad=1; fi
          continue
        fi ;;
    esac
    case "$f" in
      */speed/*) ;;  # the speed chapter: timings only
      *.json|*.jsonl|*.safetensors)
        if ! cmp -s <(mask_json "$a/$f") <(mask_json "$b/$f"); then echo "differs: $f"; bad=1; fi ;;
      *.md|*.txt)
        # Lines that print a date, a machine, a wall time or a measured
        # speed-up (their numbers are compared in result.json).
        # (Blank lines too: a line left out leaves its blank one.)
        local t='^$|date|machine|wall time|[0-9.]+ (s|min)\b|[0-9]\.[0-9]+x|ms per step|^[|] (layer|rms|zrms|scale)norm [|]'
        if ! cmp -s <(grep -viE "$t" "$a/$f") <(grep -viE "$t" "$b/$f"); then
          echo "differs: $f"; bad=1; fi ;;
      *.png|*.svg)
        # Figures of timings (speed) differ by nature; the others must match.
        case "$f" in *speed*|*bench*) ;; *)
          if ! cmp -s "$a/$f" "$b/$f"; then echo "differs: $f"; bad=1; fi ;; esac ;;
      *)
        if ! cmp -s "$a/$f" "$b/$f"; then echo "differs: $f"; bad=1; fi ;;
    esac
  done < /tmp/bitident-a.list
  [ "$bad" = 0 ] && echo "identical (masked: dates, machines, wall times)"
  return "$bad"
}

case "$mode" in
  run) run_set "$(realpath "$2")" "$3" ;;
  diff) shift; diff_sets "$@" ;;
  *) echo "usage: bitident.sh run BIN OUT | diff [--tolerance] A B" >&2; exit 2 ;;
esac
