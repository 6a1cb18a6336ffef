"""nextstat writes floats exactly as CPython's repr does (json.dumps, pyhf digests), checked on
over a million doubles: random bit patterns, float32 values widened to double (where decimal ties
between two shortest candidates are common), integers, powers of ten, subnormals and the 1e-4 / 1e16
switch points between fixed and exponent notation."""

import json
import math
import random
import struct

import pyhf

from conftest import run_cli


def _doubles():
    rng = random.Random(20261123)
    values = []

    def add(x):
        if math.isfinite(x):
            values.append(x)

    for _ in range(400_000):
        add(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
    for _ in range(400_000):
        add(float(struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0]))
    for _ in range(100_000):  # float32-rounded histogram-like yields
        add(float(struct.unpack("<f", struct.pack("<f", rng.uniform(0, 1000)))[0]))
    for _ in range(100_000):
        add(rng.random() * 10 ** rng.randint(-30, 30))
    for k in range(-330, 309):
        add(10.0**k)
        add(float(f"1e{k}"))
        add(float(f"9.999999999999999e{k}"))
    for k in range(-1074, -1000):
        add(2.0**k)
    for i in range(1, 60_000):
        add(float(i))
        add(float(i) * 2**53 / 7)
    for x in (1e-4, 9.999999999999999e-05, 0.0001000000000000001, 1e16, 9999999999999998.0,
              1.0000000000000002e16, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308):
        add(x)
        add(-x)
    return values


def test_float_repr_matches_cpython_on_a_million_doubles(tmp_path):
    values = _doubles()
    assert len(values) > 1_000_000
    spec = {
        "channels": [{"name": "c", "samples": [{"name": "s", "data": values, "modifiers": [
            {"name": "mu", "type": "normfactor", "data": None}]}]}],
        "observations": [{"name": "c", "data": values}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0",
    }
    path = tmp_path / "floats.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "sorted.json"
    run_cli("sort", path, "-o", out)
    ours = out.read_text().rstrip("\n").split("\n")
    expected = json.dumps(spec, indent=4, sort_keys=True).split("\n")
    assert len(ours) == len(expected)
    mismatches = [(e, o) for e, o in zip(expected, ours) if e != o]
    assert not mismatches, f"{len(mismatches)} lines differ, first: CPython {mismatches[0][0]!r}, nextstat {mismatches[0][1]!r}"
    assert run_cli("digest", path)[1].strip() == "sha256:" + pyhf.utils.digest(spec)
