#!/usr/bin/env python3
"""Fit the rational tanh of normlab's DyT kernel (crates/normlab-kernels/
src/norm/pointwise.rs, `tanh`) and print its f32 coefficients.

    tanh(x) = x * P(x^2) / Q(x^2)   for |x| <= 9 (x clamped to +-9 beyond:
                                     tanh(9) = 1 - 3e-8, which is 1 in f32)

P and Q have degree 4 in z = x^2 with P(0) = Q(0) = 1 (so tanh(x) = x for
tiny x, subnormals included). The fit minimises the largest *relative*
error by Lawson's iteration on a linearised weighted least-squares problem
(P - f Q = 0 with f = tanh(x)/x, weights 1/(f Q_previous)), in the scaled
variable t = z / 81 for conditioning, on a grid dense near 0 and 9. It
prints the fit's own error (about 2e-8) and the error of the f32
evaluation exactly as the kernel does it (Horner from the highest
coefficient, x * P / Q, the result clamped to [-1, 1]), which is f32
rounding (about 3e-7 relative, within the kernel's test bound of 4e-7).

Needs numpy.  python3 scripts/fit_tanh.py
"""

import numpy as np

C = 9.0
DEG_P, DEG_Q = 4, 4


def fit(iters=60):
    n = 20000
    th = np.linspace(0, np.pi, n)
    xs = np.concatenate([C * (1 - np.cos(th)) / 2 + 1e-6, np.linspace(1e-6, C, n)])
    t = xs**2 / C**2
    f = np.tanh(xs) / xs
    w = np.ones_like(t)
    qprev = np.ones_like(t)
    best = None
    for _ in range(iters):
        cols = [t**k for k in range(1, DEG_P + 1)] + [-f * t**k for k in range(1, DEG_Q + 1)]
        a = np.array(cols).T
        weight = np.sqrt(w) / (qprev * f)
        sol, *_ = np.linalg.lstsq(a * weight[:, None], (f - 1.0) * weight, rcond=None)
        p = np.concatenate([[1.0], sol[:DEG_P]])
        q = np.concatenate([[1.0], sol[DEG_P:]])
        pv, qv = np.polyval(p[::-1], t), np.polyval(q[::-1], t)
        if np.any(qv <= 0):
            break
        qprev = qv
        err = (pv / qv - f) / f
        m = np.abs(err).max()
        if best is None or m < best[2]:
            best = (p.copy(), q.copy(), m)
        w = np.maximum(w * np.abs(err), 1e-300)
        w /= w.sum()
    return best


def eval_f32(pz, qz, x):
    """The kernel's evaluation, in f32."""
    f32 = np.float32
    xc = np.clip(x, f32(-C), f32(C)).astype(f32)
    z = (xc * xc).astype(f32)
    num = np.full_like(z, pz[-1])
    for c in pz[-2::-1]:
        num = (num * z).astype(f32) + f32(c)
    den = np.full_like(z, qz[-1])
    for c in qz[-2::-1]:
        den = (den * z).astype(f32) + f32(c)
    return np.clip(((xc * num).astype(f32) / den).astype(f32), f32(-1), f32(1))


def main():
    p, q, e = fit()
    pz = [np.float32(p[k] / C ** (2 * k)) for k in range(len(p))]
    qz = [np.float32(q[k] / C ** (2 * k)) for k in range(len(q))]
    xs = np.concatenate([
        np.linspace(-12, 12, 2_000_001, dtype=np.float32),
        np.logspace(-40, 1, 100_000).astype(np.float32),
    ])
    got = eval_f32(pz, qz, xs)
    want = np.tanh(xs.astype(np.float64))
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-38)
    print(f"fit's largest relative error {e:.3g}; f32 evaluation's {rel.max():.3g}")
    print("const TANH_P: [f32; 5] = [" + ", ".join(np.format_float_scientific(c, unique=True) if abs(c) < 1e-3 else np.format_float_positional(c, unique=True) for c in pz) + "];")
    print("const TANH_Q: [f32; 5] = [" + ", ".join(np.format_float_scientific(c, unique=True) if abs(c) < 1e-3 else np.format_float_positional(c, unique=True) for c in qz) + "];")


if __name__ == "__main__":
    main()
