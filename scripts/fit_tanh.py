#!/usr/bin/env python3
"""Fit the piecewise-polynomial tanh of normlab's DyT kernel
(crates/normlab-kernels/src/norm/tanh.rs, `tanh4` and `TANH_PW`) and
print its f32 coefficient table.

The kernel evaluates, with no division (a division per element made DyT
compute-bound: 10-16 cycles per 16 lanes on the x86 machines measured):

    w = 4 u                      exact (the kernels compute (4 alpha) x)
    v = min(|w|, 37)             |u| clamped at 9.25: tanh(9.25) = 1 - 1.8e-8,
                                 which is 1 in f32, so saturated inputs get
                                 exactly 1 and a zero derivative 1 - t^2
    i = min(trunc(v), 31)        32 intervals of width 1/4 in |u|; the last
                                 one, i = 31, covers |u| in [7.75, 9.25]
    t = v - i                    exact; in [0, 1), [0, 6] for the last
    p = c[i][5] t^5 + ... + c[i][0]   Horner with fused multiply-adds
    tanh(u) = copysign(p, u)

Each interval's degree-5 polynomial is a minimax fit (Lawson's iteration on
weighted least squares over Chebyshev nodes): in absolute error, except on
the first interval, where c[0][0] = 0 exactly and the fit is in relative
error (tanh(u) ~ u near 0, so small inputs keep their relative accuracy,
subnormals included). The script prints the largest relative error of the
f32 evaluation exactly as the kernel does it (the fused multiply-adds
emulated in f64, which is exact for f32 operands up to the final rounding),
about 1.6e-7, and the Rust table. It checks that no polynomial exceeds 1
(the top of each interval, every f32 t there) and that the clamped end
gives exactly 1, so the kernel needs no clamp to 1.

Needs numpy.  python3 scripts/fit_tanh.py
"""

import numpy as np

N, DEG, VMAX = 32, 5, np.float32(37.0)


def lawson(a, f, w, iters=40):
    """Minimise max |w (a c - f)| by Lawson's iteration."""
    best, lw = None, np.ones_like(f)
    for _ in range(iters):
        sw = np.sqrt(lw) * w
        c, *_ = np.linalg.lstsq(a * sw[:, None], f * sw, rcond=None)
        err = np.abs((a @ c - f) * w)
        if best is None or err.max() < best[1]:
            best = (c, err.max())
        lw = np.maximum(lw * err, 1e-300)
        lw /= lw.sum()
    return best[0]


def fit():
    rows = []
    for i in range(N):
        hi = 1.0 if i < N - 1 else float(VMAX) - (N - 1)
        th = np.linspace(0, np.pi, 4000)
        t = hi * (1 - np.cos(th)) / 2
        if i == 0:
            t = t[1:]
            f = np.tanh(t / 4)
            a = np.array([t**k for k in range(1, DEG + 1)]).T
            rows.append(np.concatenate([[0.0], lawson(a, f, 1 / f)]))
        else:
            f = np.tanh((i + t) / 4)
            a = np.array([t**k for k in range(DEG + 1)]).T
            rows.append(lawson(a, f, np.ones_like(f)))
    return np.array(rows, dtype=np.float32)


def eval_f32(c, u):
    """The kernel's evaluation, in f32."""
    f32 = np.float32
    w = (u * f32(4)).astype(f32)
    v = np.minimum(np.abs(w), VMAX).astype(f32)
    i = np.minimum(v.astype(np.int32), N - 1)
    t = (v - i.astype(f32)).astype(f32)
    return np.copysign(poly(c, i, t), w)


def poly(c, i, t):
    p = c[i, DEG]
    for k in range(DEG - 1, -1, -1):
        p = (p.astype(np.float64) * t + c[i, k]).astype(np.float32)
    return p


def lit(x):
    return np.format_float_scientific(x, unique=True) if x != 0 and abs(x) < 1e-3 else np.format_float_positional(x, unique=True, trim="0")


def main():
    c = fit()
    u = np.concatenate([
        np.linspace(-12, 12, 4_000_001, dtype=np.float32),
        np.logspace(-40, 1, 200_000).astype(np.float32),
    ])
    got = eval_f32(c, u).astype(np.float64)
    want = np.tanh(u.astype(np.float64))
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-38)
    assert np.all(np.abs(got[np.abs(u) > 9.25]) == 1.0)
    # every f32 t in [1 - 2^-14, 1), and in [4, 6] on the last interval
    t = np.arange(2**24 - 2**10, 2**24, dtype=np.int64).astype(np.float32) / np.float32(2**24)
    last = np.arange(np.float32(4).view(np.int32), np.float32(6).view(np.int32) + 1).view(np.float32)
    for i, ts in [(i, t) for i in range(N)] + [(N - 1, last)]:
        top = poly(c, np.full(ts.shape, i), ts).max()
        assert top <= 1.0, f"interval {i} reaches {top} > 1"
    end = poly(c, np.array([N - 1]), np.array([VMAX - (N - 1)], dtype=np.float32))[0]
    assert end == 1.0, f"the clamped end gives {end}, not 1"
    print(f"// f32 evaluation's largest relative error {rel.max():.3g} (at u = {u[rel.argmax()]:.4g})")
    print(f"const TANH_PW: [[f32; {DEG + 1}]; {N}] = [")
    for row in c:
        print("    [" + ", ".join(lit(x) for x in row) + "],")
    print("];")


if __name__ == "__main__":
    main()
