"""Unbinned events from Parquet (the `nextstat:parquet` HS3 extension), files written by pyarrow:
the same events give the same NLL and fit as inline HS3 entries; the axes' ranges select events
(whole row groups outside are skipped, single events outside dropped); bad files are errors that
name the file and column."""

import json

import pytest

from conftest import cli_json, run_cli

pa = pytest.importorskip("pyarrow", reason="pyarrow is in requirements-test.txt")
pq = pytest.importorskip("pyarrow.parquet")
np = pytest.importorskip("numpy")


def model(data_entry):
    return {
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "sig", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "sigma"},
            {"name": "bkg", "type": "exponential_dist", "x": "x", "c": "c"},
            {"name": "model", "type": "mixture_dist", "summands": ["sig", "bkg"], "coefficients": ["nsig", "nbkg"], "extended": True},
        ],
        "data": [data_entry],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": [data_entry["name"]]}],
        "domains": [{"name": "d", "type": "product_domain", "axes": [
            {"name": "mean", "min": 0, "max": 10}, {"name": "sigma", "min": 0.1, "max": 5},
            {"name": "c", "min": -1, "max": 2}, {"name": "nsig", "min": 0, "max": 5000}, {"name": "nbkg", "min": 0, "max": 50000}]}],
        "parameter_points": [{"name": "default_values", "parameters": [
            {"name": "mean", "value": 5}, {"name": "sigma", "value": 1}, {"name": "c", "value": 0.3},
            {"name": "nsig", "value": 500}, {"name": "nbkg", "value": 5000}]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["nsig"], "domains": ["d"]}],
    }


@pytest.fixture(scope="module")
def events():
    rng = np.random.default_rng(5)
    mass = np.concatenate([rng.normal(5, 1, 500), rng.exponential(1 / 0.3, 6000)])
    rng.shuffle(mass)
    return mass


def write(tmp_path, table, name="events.parquet", **kw):
    pq.write_table(table, tmp_path / name, **kw)
    return name


def test_parquet_events_fit_as_inline_events(tmp_path, events):
    inside = events[(events >= 0) & (events <= 10)]
    table = pa.table({"mass": events, "other": np.arange(len(events), dtype=np.float64)})
    name = write(tmp_path, table, row_group_size=1000)
    axis = {"name": "x", "min": 0, "max": 10}
    pq_model = tmp_path / "parquet.json"
    pq_model.write_text(json.dumps(model({"name": "obs", "type": "nextstat:parquet", "path": name, "axes": [{**axis, "column": "mass"}]})))
    inline = tmp_path / "inline.json"
    inline.write_text(json.dumps(model({"name": "obs", "type": "unbinned", "axes": [axis], "entries": [[v] for v in inside]})))
    a, b = cli_json("fit", pq_model), cli_json("fit", inline)
    assert a["nll"] == b["nll"] and a["bestfit"] == b["bestfit"], "events outside [0, 10] dropped, order kept"
    assert cli_json("eval", pq_model)["expected_data"]["main"] == [5500.0]


def test_weights_and_column_types(tmp_path, events):
    w = np.linspace(0.5, 1.5, len(events))
    keep = (events >= 0) & (events <= 10)
    table = pa.table({"x": events.astype(np.float32), "w": w})
    name = write(tmp_path, table)
    entry = {"name": "obs", "type": "nextstat:parquet", "path": name, "axes": [{"name": "x", "min": 0, "max": 10}], "weights": "w"}
    p = tmp_path / "w.json"
    p.write_text(json.dumps(model(entry)))
    inline = tmp_path / "wi.json"
    xs = events.astype(np.float32).astype(np.float64)
    keep = (xs >= 0) & (xs <= 10)
    inline.write_text(json.dumps(model({"name": "obs", "type": "unbinned", "axes": [{"name": "x", "min": 0, "max": 10}], "entries": [[v] for v in xs[keep]], "weights": list(w[keep])})))
    assert cli_json("eval", p)["nll"] == cli_json("eval", inline)["nll"]


def test_bad_files_are_named(tmp_path, events):
    name = write(tmp_path, pa.table({"mass": events}))
    for entry, says in [
        ({"path": "missing.parquet"}, "missing.parquet"),
        ({"path": name, "axes": [{"name": "x", "min": 0, "max": 10, "column": "energy"}]}, "no column 'energy'"),
        ({"path": name, "weights": 3}, "names a column"),
    ]:
        full = {"name": "obs", "type": "nextstat:parquet", "axes": [{"name": "x", "min": 0, "max": 10, "column": "mass"}], **entry}
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(model(full)))
        code, _, err = run_cli("fit", p, expect_ok=False)
        assert code != 0 and says in err and "panicked" not in err, err
    # Snappy, LZ4 and uncompressed files are read; zstd is not built in (it needs a C compiler
    # on every target): the reader says so.
    for codec, ok in (("snappy", True), ("lz4", True), ("none", True), ("zstd", False), ("gzip", False)):
        name = write(tmp_path, pa.table({"mass": events}), name=f"{codec}.parquet", compression=codec)
        p = tmp_path / f"{codec}.json"
        p.write_text(json.dumps(model({"name": "obs", "type": "nextstat:parquet", "path": name, "axes": [{"name": "x", "min": 0, "max": 10, "column": "mass"}]})))
        code, _, err = run_cli("eval", p, expect_ok=ok)
        if not ok:
            assert code != 0 and codec.upper() in err and "snappy or LZ4" in err and "flate2" not in err, err
    strings = write(tmp_path, pa.table({"x": ["a", "b"]}), name="strings.parquet")
    p = tmp_path / "s.json"
    p.write_text(json.dumps(model({"name": "obs", "type": "nextstat:parquet", "path": strings, "axes": [{"name": "x", "min": 0, "max": 10}]})))
    code, _, err = run_cli("fit", p, expect_ok=False)
    assert code != 0 and "not numbers" in err, err


def test_nested_columns_folders_and_unknown_columns_are_named(tmp_path, events):
    nested = write(tmp_path, pa.table({"mass": pa.array([[1.0, 2.0]] * 3), "s": pa.array([{"a": 1.0}] * 3)}), name="nested.parquet")
    (tmp_path / "folder.parquet").mkdir()
    for path, column, says in [
        (nested, "mass", "column 'mass' holds List"),
        (nested, "s", "column 's' holds Struct"),
        (nested, "energy", "no column 'energy' (the file has mass, s)"),
        ("folder.parquet", "mass", "not a file (a folder or a device)"),
    ]:
        p = tmp_path / "m.json"
        p.write_text(json.dumps(model({"name": "obs", "type": "nextstat:parquet", "path": path, "axes": [{"name": "x", "min": 0, "max": 10, "column": column}]})))
        code, _, err = run_cli("eval", p, expect_ok=False)
        assert code != 0 and says in err and "No such device" not in err, err


def test_every_numeric_column_type_is_read(tmp_path):
    """Integers of every width and sign, half floats, decimals and dictionary-encoded floats give
    the events a float64 column gives."""
    values = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=np.float64)
    reference = tmp_path / "f64.json"
    write(tmp_path, pa.table({"x": values}), name="f64.parquet")
    reference.write_text(json.dumps(model({"name": "obs", "type": "nextstat:parquet", "path": "f64.parquet", "axes": [{"name": "x", "min": 0, "max": 10}]})))
    expected = cli_json("eval", reference)["nll"]
    import decimal
    columns = {
        "uint32": pa.array(values.astype(np.uint32)),
        "uint8": pa.array(values.astype(np.uint8)),
        "uint64": pa.array(values.astype(np.uint64)),
        "int16": pa.array(values.astype(np.int16)),
        "int8": pa.array(values.astype(np.int8)),
        "float16": pa.array(values.astype(np.float16)),
        "decimal": pa.array([decimal.Decimal(int(v)) for v in values], type=pa.decimal128(5, 2)),
        "dictionary": pa.array(values).dictionary_encode(),
    }
    for kind, column in columns.items():
        name = write(tmp_path, pa.table({"x": column}), name=f"{kind}.parquet")
        p = tmp_path / f"{kind}.json"
        p.write_text(json.dumps(model({"name": "obs", "type": "nextstat:parquet", "path": name, "axes": [{"name": "x", "min": 0, "max": 10}]})))
        assert cli_json("eval", p)["nll"] == expected, kind


def test_damaged_files_are_input_errors(tmp_path):
    """Files on which the parquet crate panics, or whose page headers claim more than their bytes
    hold (tests/fixtures/damaged-parquet), are input errors naming the file, from the CLI and in
    process, never a crash, a panic's message or an allocation of what a header claims."""
    import shutil

    import nextstat
    from conftest import ROOT

    damaged = sorted((ROOT / "tests" / "fixtures" / "damaged-parquet").glob("*.parquet"))
    assert len(damaged) == 4, damaged
    for source in damaged:
        shutil.copy(source, tmp_path / source.name)
        p = tmp_path / f"{source.stem}.json"
        p.write_text(json.dumps(model({"name": "obs", "type": "nextstat:parquet", "path": source.name, "axes": [{"name": "x", "min": 0, "max": 10}]})))
        code, _, err = run_cli("eval", p, expect_ok=False)
        assert code == 2 and f"{source.name}" in err and "is damaged" in err and "panicked" not in err, err
        with pytest.raises(nextstat.InvalidInputError, match="is damaged"):
            nextstat.load_hs3(p)
