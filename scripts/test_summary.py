#!/usr/bin/env python3
"""The summary that scripts/test.sh prints at its end, from what the test
run wrote: the log of `cargo test --no-fail-fast` (every test binary runs
even after a failure), pytest's output, and the skip log the tests write
(tests/common/skip.rs). It names every failed test with its binary, every
binary that stopped before reporting (a crash, a signal), how many of its
tests never ran, a build that failed before any test ran, and Python
tests that did not run, and exits non-zero when anything failed or did
not run that should have.

Usage (scripts/test.sh calls it):
  test_summary.py --seconds S --cargo-log F --cargo-rc N
                  [--python-log F --python-rc N | --python-not-run WHY]
                  [--skip-log F]
"""

import argparse
import re
import sys

RUNNING = re.compile(r"^\s+(Running|Doc-tests)\s+(.*?)(?:\s+\(.*\))?\s*$")
COUNT = re.compile(r"^running (\d+) tests?$")
RESULT = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored)")
# A test that died mid-line: its name, then whatever came next (cargo's
# error, on the same line since the test printed no newline).
STARTED = re.compile(r"^test (\S+) \.\.\. ?(?!ok$|FAILED$|ignored)")
TOTAL = re.compile(r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored")
SIGNAL = re.compile(r"process didn't exit successfully: .*\((signal: .*|exit status: .*)\)")


class Binary:
    def __init__(self, name):
        self.name = name
        self.expected = None
        self.seen = 0
        self.failed = []
        self.totals = None
        self.ended_by = None
        self.running = None

    def unfinished(self):
        return self.expected is not None and self.totals is None


def parse_cargo(text):
    """The test binaries in the order they ran."""
    bins, cur = [], None
    for line in text.splitlines():
        m = RUNNING.match(line)
        if m:
            kind, what = m.groups()
            cur = Binary(f"doc-tests {what}" if kind == "Doc-tests" else what)
            bins.append(cur)
            continue
        if cur is None:
            continue
        m = COUNT.match(line)
        if m:
            cur.expected = int(m.group(1))
            continue
        m = RESULT.match(line)
        if m:
            cur.running = None
            cur.seen += 1
            if m.group(2) == "FAILED":
                cur.failed.append(m.group(1))
            continue
        m = STARTED.match(line)
        if m:
            cur.running = m.group(1)
        m = TOTAL.match(line)
        if m:
            cur.totals = tuple(int(v) for v in m.groups()[1:])
            continue
        m = SIGNAL.search(line)
        if m and cur.totals is None:
            cur.ended_by = m.group(1)
    return bins


def summary(a):
    lines, bad = [], False
    cargo = open(a.cargo_log, encoding="utf-8", errors="replace").read()
    bins = parse_cargo(cargo)
    passed = sum(b.totals[0] for b in bins if b.totals)
    failed = sum(b.totals[1] for b in bins if b.totals)
    ignored = sum(b.totals[2] for b in bins if b.totals)
    # A binary that died mid-run reports no totals: count what it printed.
    for b in bins:
        if b.unfinished():
            failed += len(b.failed)
            passed += b.seen - len(b.failed)
    lines.append(f"== scripts/test.sh: {a.seconds} s")
    lines.append(
        f"Rust: {len(bins)} test binaries, {passed + failed} tests ran, {passed} passed, "
        f"{failed} failed, {ignored} ignored."
    )
    if a.cargo_rc != 0 and not bins:
        bad = True
        lines.append("Rust: no test ran: cargo test stopped before them (the build failed, or an argument was refused: above).")
    for b in bins:
        for t in b.failed:
            bad = True
            lines.append(f"FAILED: {t}   ({b.name})")
        if b.unfinished():
            bad = True
            why = b.ended_by or "it stopped without a result"
            during = f" during {b.running}" if b.running else ""
            left = b.expected - b.seen - (1 if b.running else 0)
            lines.append(
                f"DID NOT FINISH: {b.name}: {why}{during}; {left} of its {b.expected} tests never ran"
            )
    if a.cargo_rc != 0 and bins and not bad:
        bad = True
        lines.append(f"Rust: cargo test exited {a.cargo_rc} without a failed test in its log (see above)")
    if a.python_not_run:
        lines.append(f"Python: not run: {a.python_not_run}")
        bad = bad or a.python_required
    elif a.python_log:
        py = open(a.python_log, encoding="utf-8", errors="replace").read().splitlines()
        tail = [l for l in py if re.search(r"\b(passed|failed|skipped|error|errors|no tests ran)\b", l)]
        lines.append(f"Python: {tail[-1].strip('= ') if tail else 'pytest printed no result'}")
        for l in py:
            if l.startswith(("FAILED ", "ERROR ")):
                lines.append(f"{l.split(' ')[0]}: {l.split(' ', 1)[1]}   (pytest)")
        if a.python_rc != 0:
            bad = True
            if not tail:
                lines.append(f"Python: pytest exited {a.python_rc}")
    skips = []
    if a.skip_log:
        try:
            skips = sorted(set(l.rstrip("\n") for l in open(a.skip_log, encoding="utf-8") if l.strip()))
        except FileNotFoundError:
            pass
    if skips:
        lines.append("Skipped here (each with what gets it):")
        lines.extend(f"  - {s}" for s in skips)
    else:
        lines.append("Nothing was skipped.")
    return lines, bad


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=int, default=0)
    p.add_argument("--cargo-log", required=True)
    p.add_argument("--cargo-rc", type=int, default=0)
    p.add_argument("--python-log")
    p.add_argument("--python-rc", type=int, default=0)
    p.add_argument("--python-not-run")
    p.add_argument("--python-required", action="store_true")
    p.add_argument("--skip-log")
    a = p.parse_args()
    lines, bad = summary(a)
    print()
    print("\n".join(lines))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
