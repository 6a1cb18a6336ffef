"""An unbinned model with a flow PDF, for comparing builds (bench/cpu_compare.sh): a Gaussian
signal over a spline-flow background in x ∈ [0, 10], 2000 events drawn from the model, the flow
exported to ONNX with nextstat.unbinned.export_flow. `python bench/flow_model.py FOLDER` writes
FOLDER/model.json (and the flow beside it); needs torch and onnxruntime."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
import flowlib  # noqa: E402
from nextstat import unbinned  # noqa: E402

folder = Path(sys.argv[1])
folder.mkdir(parents=True, exist_ok=True)
background = flowlib.Spline1D(5.0, 2.5)
manifest = unbinned.export_flow(background, folder / "flow", [("x", 0.0, 10.0)])
rng = np.random.default_rng(7)
events = np.concatenate([rng.normal(6.0, 0.5, 100), rng.uniform(0.0, 10.0, 1900)])
events = events[(events >= 0.0) & (events <= 10.0)]
doc = {
    "metadata": {"hs3_version": "0.2"},
    "distributions": [
        {"name": "model", "type": "mixture_dist", "summands": ["signal", "background"], "coefficients": ["nsig", "nbkg"], "extended": True},
        {"name": "signal", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "width"},
        {"name": "background", "type": "nextstat:flow_dist", "manifest": str(manifest.relative_to(folder)), "x": ["x"]},
    ],
    "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["obs"]}],
    "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["nsig"]}],
    "parameter_points": [{"name": "default_values", "parameters": [
        {"name": "nsig", "value": 50.0, "min": 0.0, "max": 1000.0},
        {"name": "nbkg", "value": 1900.0, "min": 0.0, "max": 5000.0},
        {"name": "mean", "value": 6.0, "min": 3.0, "max": 8.0},
        {"name": "width", "value": 0.5, "min": 0.1, "max": 2.0},
    ]}],
    "data": [{"name": "obs", "type": "unbinned", "axes": [{"name": "x", "min": 0.0, "max": 10.0}], "entries": [[float(v)] for v in events]}],
}
(folder / "model.json").write_text(json.dumps(doc))
print(folder / "model.json")
