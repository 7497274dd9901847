#!/usr/bin/env python3
"""Fits the polynomial of the exact GELU kernels (`vmath::gelu`, the AVX2 and
AVX-512 `Gelu` of `simd::vexp`).

GELU(x) = x Phi(x), and with a = |x| / sqrt 2:
    Phi(x) = h        for x < 0,
    Phi(x) = 1 - h    for x >= 0,    where h = erfc(a) / 2.
The kernels compute h = t P(t) e^(-x^2 / 2) with t = 1 / (1 + K a): P(t) is
erfcx(a) / (2 t), smooth on the whole of t in (0, 1], so one polynomial
covers every a (no branch where erf would cancel). This script fits P in
relative error (Lawson's iteratively reweighted least squares on Chebyshev
nodes, against mpmath in 40 digits) over a in [0, 16 / sqrt 2] (the kernels
clamp x to +-16, where h is far below the f32 range), rounds the
coefficients to f32 (refitting the higher ones after each rounding) and
prints them lowest degree first with the fit's error. The defaults, K =
0.6 and degree 10, are the kernels': a smaller K needs a lower degree but
makes P steep near t = 1, where t's rounding then costs several ulp
(K = 0.3 with degree 8 fits to 2e-8 yet gave 6 ulp near x = 0).

Needs `pip install mpmath numpy`; the project does not run it.
"""
import argparse
import mpmath as mp
import numpy as np

mp.mp.dps = 40


def lawson(v, target, scale, rounds):
    """Coefficients minimising the largest error of `v @ c` relative to
    `scale`."""
    nodes = len(target)
    weights = np.ones(nodes) / nodes
    for _ in range(rounds):
        w = np.sqrt(weights) / scale
        c, *_ = np.linalg.lstsq(v * w[:, None], target * w, rcond=None)
        err = np.abs(v @ c - target) / scale
        weights = weights * err
        weights /= weights.sum()
    return c, err.max()


def fit(k, degree, amax, nodes=1500, rounds=40):
    tmin = 1.0 / (1.0 + k * amax)
    j = np.arange(nodes)
    ts = (tmin + 1) / 2 + (1 - tmin) / 2 * np.cos(np.pi * (j + 0.5) / nodes)
    target = []
    for t in ts:
        a = (1 / mp.mpf(t) - 1) / mp.mpf(k)
        target.append(float(mp.exp(a * a) * mp.erfc(a) / (2 * mp.mpf(t))))
    target = np.array(target)
    v = np.vander(ts, degree + 1, increasing=True)
    rel = np.abs(target)
    _, err = lawson(v, target, rel, rounds)
    # Rounded to f32 one coefficient at a time, lowest degree first, the
    # higher ones refitted each time to absorb the rounding.
    fixed = []
    for i in range(degree + 1):
        rest = target - v[:, :i] @ np.array(fixed, dtype=np.float64)
        c, _ = lawson(v[:, i:], rest, rel, rounds)
        fixed.append(float(np.float32(c[0])))
    c32 = np.array(fixed, dtype=np.float32)
    err32 = np.abs(v @ c32.astype(np.float64) - target) / rel
    return c32, err, err32.max()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=float, default=0.6)
    ap.add_argument("--degree", type=int, default=10)
    ap.add_argument("--clamp", type=float, default=16.0, help="the kernels' clamp of |x|")
    args = ap.parse_args()
    # The kernels compute 1 + (K / sqrt 2) |x| with K / sqrt 2 rounded to
    # f32: fit for the K that rounding gives.
    k_x = np.float32(args.k / np.sqrt(2.0))
    k = float(mp.mpf(float(k_x)) * mp.sqrt(2))
    c, err, err32 = fit(k, args.degree, args.clamp / np.sqrt(2.0))
    print(f"K / sqrt 2 = {np.format_float_positional(k_x, unique=True)}, degree {args.degree}: "
          f"relative error {err:.3g} (f32 coefficients {err32:.3g})")
    for v in c:
        print(f"    {np.format_float_positional(v, unique=True)},")


if __name__ == "__main__":
    main()
