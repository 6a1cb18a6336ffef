"""Make examples/unbinned/: a Gauss + exponential model with a Gaussian-constrained background
normalisation, built in RooFit and exported to HS3 by ROOT 6.40 (RooJSONFactoryWSTool), so the
example is exactly what a RooFit user's export looks like.

    .venv/bin/python scripts/make_unbinned_example.py
"""

from pathlib import Path

import ROOT as R

R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.WARNING)
R.RooRandom.randomGenerator().SetSeed(2026)
out = Path(__file__).resolve().parents[1] / "examples" / "unbinned"
out.mkdir(parents=True, exist_ok=True)

x = R.RooRealVar("mass", "mass", 100, 150)
mean = R.RooRealVar("mean", "", 125, 110, 140)
width = R.RooRealVar("width", "", 2.0, 0.5, 10)
slope = R.RooRealVar("slope", "", -0.04, -1, 0)
mu = R.RooRealVar("mu", "", 1, 0, 20)
theta = R.RooRealVar("theta_bkg", "", 0, -5, 5)
glob = R.RooRealVar("glob_theta_bkg", "", 0, -5, 5)
glob.setConstant(True)
nsig = R.RooFormulaVar("nsig", "mu*60", R.RooArgList(mu))
nbkg = R.RooFormulaVar("nbkg", "1000*(1+0.05*theta_bkg)", R.RooArgList(theta))
sig = R.RooGaussian("signal", "", x, mean, width)
bkg = R.RooExponential("background", "", x, slope)
model = R.RooAddPdf("model", "", R.RooArgList(sig, bkg), R.RooArgList(nsig, nbkg))
cons = R.RooGaussian("constraint_bkg", "", glob, theta, R.RooFit.RooConst(1.0))
full = R.RooProdPdf("full", "", R.RooArgList(model, cons))
data = full.generate(R.RooArgSet(x))

ws = R.RooWorkspace("w")
cat = R.RooCategory("channel", "")
cat.defineType("diphoton")
sim = R.RooSimultaneous("simPdf", "", {"diphoton": full}, cat)
ws.Import(sim)
ws.Import(R.RooDataSet("obsData", "", R.RooArgSet(x), R.RooFit.Index(cat), R.RooFit.Import({"diphoton": data})))
mc = R.RooStats.ModelConfig("ModelConfig", ws)
mc.SetPdf(ws.pdf("simPdf"))
mc.SetParametersOfInterest("mu")
mc.SetObservables("mass,channel")
mc.SetGlobalObservables("glob_theta_bkg")
ws.Import(mc)
(out / "resonance.json").write_text(R.RooJSONFactoryWSTool(ws).exportJSONtoString() + "\n")
print(f"wrote {out / 'resonance.json'} ({data.numEntries()} events)")
