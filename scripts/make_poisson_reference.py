#!/usr/bin/env python3
"""Writes tests/fixtures/poisson_mpmath.json: exact -ln Pois(n|lam) = lam - n ln(lam) + lnGamma(n+1)
(50-digit mpmath) on a grid of counts and rates from 0 to 1e15, for the precision test of the
Poisson terms (crates/ns-compute/tests/poisson_precision.rs). Run: python3 scripts/make_poisson_reference.py"""
import json
import pathlib

import mpmath

mpmath.mp.dps = 50

counts = [0.0, 1e-8, 0.3, 1.0, 2.0, 5.0, 10.0, 14.5, 15.0, 15.5, 16.0, 17.0, 31.7, 100.0,
          1234.0, 1e4, 98765.4321, 1e6, 3.3e7, 1e9, 1.892859e11, 1e12, 4.2e13, 1e15]
relative = [0.0, 1e-13, -1e-13, 1e-10, -1e-9, 1e-6, -1e-6, 1e-4, -3e-4, 0.01, -0.02,
            0.0999, -0.0999, 0.1001, -0.1001, 0.18, -0.2, 0.5, -0.5, 2.0, 9.0, -0.9]
absolute = [1e-8, 0.5, 3.0, 1e3, 1e9, 1e15]

cases = []
for n in counts:
    rates = {n * (1.0 + r) for r in relative if n * (1.0 + r) > 0}
    rates |= set(absolute)
    for lam in sorted(rates):
        exact = lam - (n * mpmath.log(lam) if n else 0) + mpmath.loggamma(mpmath.mpf(n) + 1)
        cases.append({"n": n, "lambda": lam, "nll": mpmath.nstr(exact, 25)})

out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "poisson_mpmath.json"
out.write_text(json.dumps({"generator": "scripts/make_poisson_reference.py", "mpmath_dps": 50,
                           "cases": cases}, indent=1) + "\n")
print(f"{len(cases)} cases -> {out}")
