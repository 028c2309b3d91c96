#!/usr/bin/env python3
"""Seeded mutations of the pretrained model files, run through normlab.

Each mutated file is a copy of SmolLM2-135M's or Gemma 3 270M's GGUF file
with one hostile change: a truncation, flipped bytes, a hostile metadata
value (0, 1, the type's largest, 2^58 + 4, NaN, infinity, -1), a tensor
shape changed (a dimension doubled, halved, zeroed, made huge, or two
swapped), or damaged tokenizer data (a token string's length, its bytes, a
merge, a token type, an array's count). It is then run in one mode:
`normlab inspect`, or `normlab generate` with each `--weights` mode (f32,
blocks, q8, q16), the modes taken in turn.

Each run must end within 60 s, hold at most the valid model's own peak
memory in that mode plus 512 MB, and exit without a panic (101), an abort
(134) or any other signal. A clean refusal (exit 2 with a one-line message)
and a run that goes through (exit 0: a flipped weight byte is just another
weight) are both fine. The valid model's peak is measured first, mode by
mode.

    python3 scripts/mutate_models.py --count 200 --seed 1     # by hand
    python3 scripts/mutate_models.py --count 20               # as CI runs it

Needs the `gguf` package (pip install gguf) and the model files
(scripts/fetch_smollm2.sh, scripts/fetch_gemma3.sh). Exit status 1 when a
run fails, with one line per run and a summary.
"""
import argparse
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = [
    ("SmolLM2", "models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("Gemma 3", "models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf"),
]
MODES = ["inspect", "f32", "blocks", "q8", "q16"]
MUTATIONS = ["truncate", "flip", "metadata", "shape", "tokenizer"]
TIMEOUT_S = 60
MARGIN_KB = 512 * 1024
# A safety net so that a runaway allocation cannot take the machine down;
# the verdict is on the measured peak.
ADDRESS_SPACE_LIMIT = 24 << 30


def command(binary, path, mode):
    if mode == "inspect":
        # A short held-out text: the parse and the whole forward, in seconds.
        return [binary, "inspect", path, "--held-out-tokens", "64"]
    return [binary, "generate", path, "--prompt", "The", "--tokens", "4", "--weights", mode]


def run(cmd):
    """(exit status or a signal's negative number or "timeout", seconds,
    peak resident KB, the last line of stderr)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))

    t0 = time.time()
    err = tempfile.TemporaryFile()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=limit)
    status, peak = None, 0
    while True:
        pid, st, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            peak = usage.ru_maxrss
            status = os.waitstatus_to_exitcode(st)
            break
        if time.time() - t0 > TIMEOUT_S:
            p.send_signal(signal.SIGKILL)
            _, _, usage = os.wait4(p.pid, 0)
            peak, status = usage.ru_maxrss, "timeout"
            break
        time.sleep(0.02)
    err.seek(0)
    lines = err.read().decode("utf-8", "replace").strip().splitlines()
    return status, time.time() - t0, peak, lines[-1] if lines else ""


def numeric_fields(reader, gguf):
    """Scalar numeric metadata fields (the header's counts included)."""
    kinds = {
        gguf.GGUFValueType.UINT8, gguf.GGUFValueType.INT8, gguf.GGUFValueType.UINT16,
        gguf.GGUFValueType.INT16, gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32,
        gguf.GGUFValueType.UINT64, gguf.GGUFValueType.INT64, gguf.GGUFValueType.FLOAT32,
        gguf.GGUFValueType.FLOAT64, gguf.GGUFValueType.BOOL,
    }
    return [f for f in reader.fields.values() if len(f.types) == 1 and f.types[0] in kinds]


def hostile(rng, arr):
    """A hostile value for a one-element array of arr's dtype."""
    dt = arr.dtype
    if dt.kind == "f":
        return rng.choice([np.nan, np.inf, -np.inf, 0.0, -1.0, 1e30, -0.0])
    info = np.iinfo(dt)
    choices = [0, 1, info.max, info.max // 2 + 1]
    if info.min < 0:
        choices += [-1, info.min]
    if info.bits == 64:
        choices += [(1 << 58) + 4, 1 << 40]
    return rng.choice(choices)


def mutate(rng, gguf, src, dst):
    """Copy src to dst with one hostile change; returns its description."""
    kind = rng.choice(MUTATIONS)
    size = os.path.getsize(src)
    if kind == "truncate":
        cut = rng.choice([rng.randrange(0, 4096), rng.randrange(0, size)])
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read(cut))
        return f"truncated to {cut} of {size} bytes"
    shutil.copyfile(src, dst)
    reader = gguf.GGUFReader(dst, "r+")
    if kind == "flip":
        # Mostly the metadata and tensor table; sometimes the weights.
        end = reader.data_offset if rng.random() < 0.8 else size
        at = sorted(rng.randrange(0, end) for _ in range(rng.randint(1, 8)))
        del reader
        with open(dst, "r+b") as f:
            for o in at:
                f.seek(o)
                b = f.read(1)[0]
                f.seek(o)
                f.write(bytes([b ^ (1 << rng.randrange(8))]))
        return f"flipped a bit at bytes {at}"
    if kind == "metadata":
        field = rng.choice(numeric_fields(reader, gguf))
        part = field.parts[field.data[0]]
        if part.dtype.kind == "b":
            # A bool is one byte: anything but 0 and 1 is hostile.
            part = part.view(np.uint8)
        v = hostile(rng, part)
        part[0] = v
        part.flush()
        return f"{field.name} = {v}"
    if kind == "shape":
        t = rng.choice(reader.tensors)
        dims = t.field.parts[3]
        i = rng.randrange(len(dims))
        how = rng.choice(["double", "halve", "zero", "huge", "swap", "one"])
        if how == "swap" and len(dims) > 1:
            dims[0], dims[1] = int(dims[1]), int(dims[0])
        elif how == "double":
            dims[i] = int(dims[i]) * 2
        elif how == "halve":
            dims[i] = int(dims[i]) // 2
        elif how == "zero":
            dims[i] = 0
        elif how == "huge":
            dims[i] = 1 << 40
        else:
            dims[i] = 1
        dims.flush()
        return f"{t.name} dims -> {[int(x) for x in dims]} ({how})"
    # Tokenizer data.
    tokens = reader.fields["tokenizer.ggml.tokens"]
    n = len(tokens.data)
    how = rng.choice(["length", "bytes", "count", "merge", "type"])
    if how == "merge" and "tokenizer.ggml.merges" not in reader.fields:
        how = "bytes"
    if how == "length":
        j = rng.randrange(n)
        part = tokens.parts[tokens.data[j] - 1]
        part[0] = rng.choice([0, 1 << 40, int(part[0]) + 1000])
        part.flush()
        return f"token {j}'s length = {int(part[0])}"
    if how == "bytes":
        j = rng.randrange(n)
        part = tokens.parts[tokens.data[j]]
        part[:] = np.frombuffer(bytes(rng.randrange(256) for _ in range(len(part))), dtype=np.uint8)
        part.flush()
        return f"token {j}'s bytes randomised"
    if how == "count":
        part = tokens.parts[4]
        part[0] = rng.choice([0, n + 1, 1 << 40])
        part.flush()
        return f"tokens' count = {int(part[0])}"
    if how == "merge":
        merges = reader.fields["tokenizer.ggml.merges"]
        j = rng.randrange(len(merges.data))
        part = merges.parts[merges.data[j]]
        part[:] = ord("x")
        part.flush()
        return f"merge {j} = {'x' * len(part)!r}"
    types = reader.fields.get("tokenizer.ggml.token_type")
    if types is None:
        return "no token types"
    j = rng.randrange(len(types.data))
    part = types.parts[types.data[j]]
    part[0] = rng.choice([-1, 999, 1 << 30])
    part.flush()
    return f"token type {j} = {int(part[0])}"


def failed(status, peak, limit):
    """Why a run fails the rule, or None."""
    if status == "timeout":
        return f"still running after {TIMEOUT_S} s"
    if status == 101:
        return "panicked (exit 101)"
    if status == 134 or (isinstance(status, int) and status < 0):
        return f"killed by a signal ({status})"
    if peak > limit:
        return f"peak {peak // 1024} MB over the limit {limit // 1024} MB"
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bin", default=os.environ.get("NORMLAB_BIN", os.path.join(ROOT, "target", "release", "normlab")))
    ap.add_argument("--keep", help="keep failing files in this folder")
    a = ap.parse_args(argv)
    try:
        import gguf
    except ImportError:
        print("mutate_models.py needs the gguf package: pip install gguf", file=sys.stderr)
        return 2
    models = [(name, os.path.join(ROOT, p)) for name, p in MODELS if os.path.exists(os.path.join(ROOT, p))]
    if not models:
        print("no model files (scripts/fetch_smollm2.sh, scripts/fetch_gemma3.sh)", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    # The modes in turn, a model and a mutation drawn for each file.
    plan = [(rng.choice(models), MODES[i % len(MODES)]) for i in range(a.count)]
    limits = {}
    for (name, path), mode in sorted(set(plan)):
        status, secs, peak, last = run(command(a.bin, path, mode))
        if status != 0:
            print(f"the valid {name} fails in mode {mode}: exit {status}: {last}", file=sys.stderr)
            return 1
        limits[(name, mode)] = peak + MARGIN_KB
        print(f"valid {name:8} {mode:8} exit 0  {secs:5.1f} s  peak {peak // 1024:5d} MB")
    bad = 0
    counts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, ((name, path), mode) in enumerate(plan):
            dst = os.path.join(tmp, f"m{i}.gguf")
            what = mutate(rng, gguf, path, dst)
            status, secs, peak, last = run(command(a.bin, dst, mode))
            why = failed(status, peak, limits[(name, mode)])
            counts[status] = counts.get(status, 0) + 1
            line = f"{i:3d} {name:8} {mode:8} exit {status!s:7} {secs:5.1f} s  peak {peak // 1024:5d} MB  {what}"
            if why:
                bad += 1
                print(f"{line}\n    FAILED: {why}: {last}")
                if a.keep:
                    os.makedirs(a.keep, exist_ok=True)
                    shutil.copyfile(dst, os.path.join(a.keep, f"seed{a.seed}-m{i}.gguf"))
            else:
                print(f"{line}\n    {last}")
            os.remove(dst)
    summary = ", ".join(f"exit {k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0])))
    print(f"{a.count} mutated files (seed {a.seed}): {summary}; {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
