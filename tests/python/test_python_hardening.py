"""The Python package as a careless script would use it: wrong types are refused with a TypeError
or ValueError that says what was expected (never silently coerced), engine errors are
`nextstat.NextStatError` subclasses that name the file, and the q0 drop-in matches pyhf."""

import json

import numpy as np
import pyhf
import pytest

import nextstat
from conftest import workspace_file

NAME = "nextstat_complex_workspace"


@pytest.fixture(scope="module")
def model():
    return nextstat.Workspace(workspace_file(NAME)).model()


def test_error_classes_are_public_and_say_what_they_are():
    assert nextstat.NextStatError.__module__ == "nextstat"
    assert issubclass(nextstat.NextStatError, ValueError)
    assert issubclass(nextstat.InvalidInputError, nextstat.NextStatError)
    assert issubclass(nextstat.ComputationError, nextstat.NextStatError)
    assert "nextstat.InvalidInputError" in repr(nextstat.InvalidInputError)
    assert isinstance(nextstat.__version__, str) and nextstat.__version__[0].isdigit()


def test_json_errors_name_the_file(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"channels": [}')
    with pytest.raises(nextstat.InvalidInputError, match="broken.json.*line 1 column 15"):
        nextstat.Workspace(broken)
    spec = json.loads(workspace_file(NAME).read_text())
    spec["channels"][0]["samples"][0]["data"] = ["x"] * len(spec["channels"][0]["samples"][0]["data"])
    bad = tmp_path / "bad_type.json"
    bad.write_text(json.dumps(spec))
    with pytest.raises(nextstat.InvalidInputError, match=r"channels\[0\]\.samples\[0\]\.data"):
        nextstat.Workspace(bad)
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + workspace_file(NAME).read_bytes())
    assert nextstat.Workspace(bom).digest() == nextstat.Workspace(workspace_file(NAME)).digest()


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda m: nextstat.fit(m, data=np.ones((2, len(m.observed) // 2))), ValueError, "shape"),
        (lambda m: nextstat.fit(m, data=np.asarray(m.observed) + 0j), TypeError, "complex"),
        (lambda m: nextstat.fit(m, data=[None] + m.observed[1:]), TypeError, r"data\[0\] is None"),
        (lambda m: nextstat.fit(m, data=np.array(["3"] + m.observed[1:], dtype=object)), TypeError, r"data\[0\] is '3'"),
        (lambda m: nextstat.hypotest_toys(1.0, m, n_toys=2.7), TypeError, "n_toys must be a whole number"),
        (lambda m: nextstat.hypotest("1.0", m), TypeError, "poi_value must be a number"),
        (lambda m: nextstat.fit(m, fixed_params=["False"] * m.config.npars), TypeError, r"fixed_params\[0\] is 'False'"),
        (lambda m: nextstat.fit(m, init_pars=[float("nan")] * m.config.npars), ValueError, r"init_pars\[0\] is nan"),
        (lambda m: nextstat.fit(m, par_bounds=[(0, 1, 2)] * m.config.npars), ValueError, "pair"),
        (lambda m: nextstat.upper_limit(m, level=float("nan")), ValueError, "level"),
        (lambda m: nextstat.hypotest(1.0, m, test_stat=0), TypeError, "test_stat"),
        (lambda m: nextstat.fit("not a model"), TypeError, "nextstat.Model"),
        (lambda m: m.logpdf([[1.0] * m.config.npars], m.observed), ValueError, "shape"),
    ],
)
def test_wrong_types_are_refused_not_coerced(model, call, error, message):
    with pytest.raises(error, match=message):
        call(model)


def test_a_workspace_is_not_a_patchset():
    ws = nextstat.Workspace(workspace_file(NAME))
    with pytest.raises(TypeError, match="not a Workspace"):
        nextstat.PatchSet(ws)
    with pytest.raises(nextstat.InvalidInputError, match="looks like a workspace"):
        nextstat.PatchSet(json.loads(workspace_file(NAME).read_text()))


def test_engine_refusals_are_invalid_input(model):
    with pytest.raises(nextstat.InvalidInputError, match="outside the bounds of 'mu'"):
        nextstat.hypotest(-1.0, model)
    fixed = model.config.suggested_fixed()
    fixed[model.config.poi_index] = True
    with pytest.raises(nextstat.InvalidInputError, match="is fixed"):
        nextstat.hypotest(1.0, model, fixed_params=fixed)
    with pytest.raises(nextstat.InvalidInputError, match="between 1 and"):
        nextstat.hypotest_toys(1.0, model, n_toys=10**12)


def test_q0_drop_in_returns_p0_as_pyhf():
    pyhf.set_backend("numpy")
    spec = json.loads(workspace_file(NAME).read_text())
    pws = pyhf.Workspace(spec)
    pmodel = pws.model()
    pdata = pws.data(pmodel)
    theirs = pyhf.infer.hypotest(0.0, pdata, pmodel, test_stat="q0", return_tail_probs=True, return_expected_set=True)
    model = nextstat.Workspace(spec).model()
    ours = nextstat.infer.hypotest(0.0, pdata, model, test_stat="q0", return_tail_probs=True, return_expected_set=True)
    assert float(ours[0]) == pytest.approx(float(theirs[0]), rel=1e-4)
    assert len(ours[1]) == len(theirs[1]) == 1
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-4)
    native = nextstat.hypotest(0.0, model, test_stat="q0")
    assert native.p0_obs == float(ours[0])
    with pytest.raises(AttributeError, match="p0"):
        native.cls_obs
    significance = nextstat.significance(model)
    assert significance.p0_obs == native.p0_obs


def test_limits_outside_the_poi_bounds_warn_and_have_no_value(tmp_path):
    spec = {
        "channels": [{"name": "SR", "samples": [
            {"name": "signal", "data": [8.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
            {"name": "background", "data": [50.0], "modifiers": [{"name": "u", "type": "shapesys", "data": [5.0]}]}]}],
        "observations": [{"name": "SR", "data": [52.0]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [{"name": "mu", "bounds": [[0, 1]]}]}}],
        "version": "1.0.0",
    }
    model = nextstat.Workspace(spec).model()
    with pytest.warns(RuntimeWarning, match="lies above"):
        limit = nextstat.upper_limit(model)
    assert np.isnan(limit.obs)
    assert limit.obs_outside == {"above": 1.0}


def test_progress_is_shown_only_when_asked_and_interactive(monkeypatch, capfd):
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert nextstat._verbs._progress_label(False, "toys") is None
    with pytest.raises(TypeError, match="progress"):
        nextstat._verbs._progress_label("yes", "toys")
    monkeypatch.setattr("sys.stderr", Terminal())
    assert nextstat._verbs._progress_label(True, "toys") == "toys"
    monkeypatch.undo()
    # pytest's captured stderr is not a terminal: a long call draws nothing.
    model = nextstat.Workspace(workspace_file(NAME)).model()
    nextstat.hypotest_toys(1.0, model, n_toys=20)
    assert "toys" not in capfd.readouterr().err
    # Where it is shown, tqdm draws the bar on stderr.
    pytest.importorskip("tqdm")
    monkeypatch.setattr(nextstat._verbs, "_progress_label", lambda progress, label: label if progress else None)
    nextstat.hypotest_toys(1.0, model, n_toys=200)
    assert "toys" in capfd.readouterr().err
    nextstat.hypotest_toys(1.0, model, n_toys=200, progress=False)
    assert "toys" not in capfd.readouterr().err


def test_round4_messages_name_the_cause(tmp_path):
    """Hardening round 4 (issue 44, class 7): each raised the wrong exception or a bare one."""
    import http.server
    import threading

    from nextstat import unbinned
    from nextstat.remote import Client, ServerError

    # The remote client raises ServerError for everything: an HTML page, a connection refused,
    # a timeout, an answer without the keys it needs, a wrong argument.
    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the library's name
            if self.path.endswith("slow"):
                threading.Event().wait(3)
            body = b"<html>not the server</html>" if not self.path.endswith("json") else b'{"status": "running"}'
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        for call, says in [
            (lambda: Client(url).health(), "which is not JSON"),
            (lambda: Client(url, timeout=0.5)._request("GET", "/slow"), "timeout"),
            (lambda: Client("http://127.0.0.1:1").health(), "connection"),
            (lambda: Client(url).upload({"channels": []}), "which is not JSON"),
            (lambda: Client(url)._answer({"status": "x"}, ("id",), "POST /v1/models"), "lacks id"),
            (lambda: Client(url).fit("not a model"), "model must be a RemoteModel"),
            (lambda: Client(url).run("teleport", "x"), "model must be a RemoteModel"),
        ]:
            with pytest.raises(ServerError, match=says):
                call()
    finally:
        httpd.shutdown()

    # mixture_nll: a NaN weight, negative offsets and a wrong values shape are named as such.
    logp = np.log(np.full((2, 4), 0.25))
    for kwargs, says in [
        (dict(yields=[1.0, 2.0], weights=[1.0, float("nan"), 1.0, 1.0]), r"weights\[1\] is nan"),
        (dict(yields=[[1.0, 2.0]], offsets=[-1, 4]), "offsets must be event positions"),
        (dict(yields=[1.0, 2.0], constraints=[(0.0, 1.0)], values=[[1.0, 2.0, 3.0]]), "values must hold one value per constraint"),
    ]:
        with pytest.raises(ValueError, match=says):
            unbinned.mixture_nll(logp, **kwargs)

    # An unbinned model refuses a NaN parameter instead of answering NaN.
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "examples" / "unbinned" / "resonance.json"
    m = unbinned.load(str(example))
    pars = np.array(m.suggested_init() if hasattr(m, "suggested_init") else m.config.suggested_init(), dtype=float)
    pars[0] = np.nan
    with pytest.raises(ValueError, match=r"pars\[0\] is nan"):
        m.nll_grad(pars)

    # distributed with no client or no model: a TypeError that says what is expected.
    from nextstat import distributed
    model = nextstat.Workspace(workspace_file(NAME)).model()
    with pytest.raises(TypeError, match="dask.distributed.Client"):
        distributed.hypotest_toys(None, 1.0, model)
    with pytest.raises(TypeError, match="dask.distributed.Client"):
        distributed.patchset_grid(None, {}, {})

    # Figures: a NaN in a result names its entry; text that is not JSON says so.
    from nextstat import plot
    fit = nextstat.fit(model).to_dict()
    fit["bestfit"][0] = float("nan")
    with pytest.raises(nextstat.NextStatError, match="NaN"):
        plot.figure_data("pulls", fit)
    with pytest.raises(ValueError, match="the result text is not JSON"):
        plot.figure_data("pulls", "{not json")
