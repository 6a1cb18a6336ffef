"""A client of ``nextstat-server`` (docs/server.md) with the calls of the local API, returning
the same result objects::

    from nextstat.remote import Client

    client = Client("http://127.0.0.1:8750", api_key=None)
    model = client.upload("workspace.json")          # a path, JSON text, a dict or a Workspace
    fit = client.fit(model)                          # nextstat.FitResult
    cls = client.hypotest(1.0, model).cls_obs
    job = client.submit("hypotest_toys", model, mu=1.0, n_toys=5000)
    result = client.wait(job)                        # nextstat.ToyHypotestResult

Only the standard library is used (urllib): nothing to install beside nextstat.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Optional

from ._core import NextStatError
from ._validate import _json_text
from ._verbs import _RESULT_OF_VERB, _VERBS
from ._workspace import Workspace

__all__ = ["Client", "RemoteModel", "ServerError"]

#: Request verbs (the engine's call) → endpoint paths.
_PATHS = {v["name"]: v["route"] for v in _VERBS if v["route"]}


class ServerError(NextStatError):
    """An error answer of the server: ``status`` (HTTP), ``kind`` and the engine's message."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(f"{status} {kind}: {message}")
        self.status, self.kind, self.message = status, kind, message


class RemoteModel:
    """A model held by the server (its id), with its parameter names."""

    def __init__(self, description: Dict[str, Any]):
        self.id = description["id"]
        self.kind = description["kind"]
        self.parameter_names = list(description["parameter_names"])
        self.poi = description.get("poi")

    def __repr__(self) -> str:
        return f"RemoteModel({self.id}, {self.kind}, {len(self.parameter_names)} parameters)"


class Client:
    """A connection to one server; ``api_key`` is sent as ``Authorization: Bearer``."""

    def __init__(self, url: str, api_key: Optional[str] = None, timeout: float = 3600.0):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        """One request; every failure — the server's error answers, a connection or a timeout,
        an answer that is not the server's JSON — is a ``ServerError``."""
        try:
            data = None if body is None else json.dumps(body, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise ServerError(0, "request", f"the request cannot be sent as JSON: {e}") from None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as e:
            try:
                error = json.loads(e.read())["error"]
                kind, message = str(error["kind"]), str(error["message"])
            except Exception:  # not one of the server's answers
                raise ServerError(e.code, "http", f"{method} {self.url}{path}: {e}") from None
            raise ServerError(e.code, kind, message) from None
        except urllib.error.URLError as e:
            raise ServerError(0, "connection", f"{self.url}: {e.reason}") from None
        except (TimeoutError, OSError) as e:
            raise ServerError(0, "timeout" if isinstance(e, TimeoutError) else "connection",
                              f"{method} {self.url}{path}: {e or 'no answer within the timeout'} (timeout {self.timeout} s)") from None
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise ServerError(status, "invalid_answer",
                              f"{method} {self.url}{path} answered {text[:80]!r}, which is not JSON: is this a nextstat-server?") from None

    def _answer(self, answer: Any, keys, what: str) -> Any:
        """`answer` checked to hold `keys`: else a ``ServerError`` naming what is missing."""
        if not isinstance(answer, dict) or any(k not in answer for k in keys):
            raise ServerError(0, "invalid_answer", f"{what}: the answer {str(answer)[:120]} lacks {', '.join(keys)}")
        return answer

    def health(self) -> Dict[str, Any]:
        return self._request("GET", "/v1/health")

    def devices(self) -> Dict[str, Any]:
        return self._request("GET", "/v1/devices")

    def upload(self, workspace: Any, *, measurement: Optional[str] = None, patches: Any = None) -> RemoteModel:
        """Upload a model: a pyhf workspace or HS3 model (a path, JSON text, a dict or a
        ``nextstat.Workspace``), with optional JSON patches; identical uploads give one id."""
        if isinstance(workspace, Workspace):
            document = workspace.spec
        else:
            document = json.loads(_json_text(workspace, "workspace")[0])
        reference: Dict[str, Any] = {"workspace": document}
        if measurement is not None:
            reference["measurement"] = measurement
        if patches:
            reference["patches"] = [json.loads(_json_text(p, "patch")[0]) for p in patches]
        answer = self._request("POST", "/v1/models", reference)
        return RemoteModel(self._answer(answer, ("id", "kind", "parameter_names"), "POST /v1/models"))

    def forget(self, model: RemoteModel) -> None:
        self._request("DELETE", f"/v1/models/{model.id}")

    def _call(self, verb: str, model: RemoteModel, fit: Optional[Dict[str, Any]], device: str, **request: Any) -> Dict[str, Any]:
        if not isinstance(model, RemoteModel):
            raise ServerError(0, "argument", f"model must be a RemoteModel (client.upload(...)), not {type(model).__name__}")
        if verb not in _PATHS:
            raise ServerError(0, "argument", f"no verb '{verb}' (verbs: {', '.join(_PATHS)})")
        call = {
            "model": {"id": model.id},
            "request": {"verb": verb, **{k: v for k, v in request.items() if v is not None}},
            "device": device,
        }
        if fit:
            call["fit"] = {k: v for k, v in fit.items() if v is not None}
        return call

    def run(self, verb: str, model: RemoteModel, *, fit: Optional[Dict[str, Any]] = None, device: str = "cpu", **request: Any):
        """Run a verb (the engine's request name: fit, hypotest, hypotest_toys, upper_limit,
        significance, profile_scan, ranking, gof, eval) and wrap the answer as the local API
        does."""
        call = self._call(verb, model, fit, device, **request)
        answer = self._request("POST", f"/v1/{_PATHS[verb]}", call)
        return answer if verb == "eval" else _RESULT_OF_VERB[verb]._from_json(json.dumps(answer))

    def fit(self, model: RemoteModel, **kw):
        return self.run("fit", model, uncertainties=True, **kw)

    def hypotest(self, poi_value: float, model: RemoteModel, test_stat: str = "qtilde", **kw):
        return self.run("hypotest", model, mu=float(poi_value), test_stat=test_stat, **kw)

    def hypotest_toys(self, poi_value: float, model: RemoteModel, n_toys: int = 2000, seed: int = 0, test_stat: str = "qtilde", **kw):
        return self.run("hypotest_toys", model, mu=float(poi_value), n_toys=int(n_toys), seed=int(seed), test_stat=test_stat, **kw)

    def upper_limit(self, model: RemoteModel, level: Optional[float] = None, scan=None, **kw):
        return self.run("upper_limit", model, level=level, scan=None if scan is None else [float(v) for v in scan], **kw)

    def significance(self, model: RemoteModel, **kw):
        return self.run("significance", model, **kw)

    def profile_scan(self, model: RemoteModel, mu_values, parameter: Optional[str] = None, **kw):
        return self.run("profile_scan", model, values=[float(v) for v in mu_values], parameter=parameter, **kw)

    def ranking(self, model: RemoteModel, **kw):
        return self.run("ranking", model, **kw)

    def gof(self, model: RemoteModel, **kw):
        return self.run("gof", model, **kw)

    def submit(self, verb: str, model: RemoteModel, *, fit: Optional[Dict[str, Any]] = None, device: str = "cpu", **request: Any) -> str:
        """Start a verb as a background job; returns the job's id."""
        call = self._call(verb, model, fit, device, **request)
        call["verb"] = _PATHS[verb]
        return self._request("POST", "/v1/jobs", call)["id"]

    def job(self, job_id: str) -> Dict[str, Any]:
        """The job's status, progress and (when done) its result JSON."""
        return self._request("GET", f"/v1/jobs/{job_id}")

    def cancel(self, job_id: str) -> Dict[str, Any]:
        return self._request("DELETE", f"/v1/jobs/{job_id}")

    def wait(self, job_id: str, poll: float = 0.2, timeout: Optional[float] = None):
        """Wait for a job and return its result as the local API would."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self._answer(self.job(job_id), ("status",), f"job {job_id}")
            if state["status"] == "done":
                verb = next((v for v, p in _PATHS.items() if p == state.get("verb")), None)
                if verb is None or "result" not in state:
                    raise ServerError(0, "invalid_answer", f"job {job_id}: done, but its answer names no known verb or result")
                return state["result"] if verb == "eval" else _RESULT_OF_VERB[verb]._from_json(json.dumps(state["result"]))
            if state["status"] in ("failed", "cancelled"):
                error = state.get("error") or {"status": 0, "kind": state["status"], "message": f"job {job_id} was {state['status']}"}
                raise ServerError(error.get("status", 0), error.get("kind", state["status"]), error.get("message", ""))
            if deadline is not None and time.monotonic() > deadline:
                raise ServerError(0, "timeout", f"job {job_id} is still {state['status']} ({state.get('progress')}) after {timeout} s")
            time.sleep(poll)
