#!/usr/bin/env python3
"""RooStats' toy-based upper limit on a model, timed: `HypoTestInverter` with a
`FrequentistCalculator` and the one-sided profile-likelihood statistic (q̃, as pyhf's and
nextstat's toys), ROOT 6.40 from PyPI, on the HS3 file `nextstat export-hs3` writes of the model
(the same likelihood: tests/python/test_hs3_export.py). A whole limit on tHq (10 μ × 2000 toys a
hypothesis) takes RooStats many hours, so this runs TOYS toys a hypothesis at MU_POINTS μ values
and reports the seconds per toy; the full limit's time is that × 2 × 2000 × 10.

    python3 bench/roostats_toy_limit.py MODEL.hs3.json [--toys 4] [--mu-points 1] [--mu 0.3]

Prints one JSON line: seconds, toys fitted, seconds per toy, the extrapolated 10 × 2000 limit."""

import argparse
import json
import time

import ROOT as R


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--toys", type=int, default=4)
    parser.add_argument("--mu-points", type=int, default=1)
    parser.add_argument("--mu", type=float, default=0.3)
    args = parser.parse_args()
    R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.ERROR)
    ws = R.RooWorkspace("w")
    assert R.RooJSONFactoryWSTool(ws).importJSON(args.model)
    sb = ws.obj("ModelConfig")
    data = ws.data("obsData")
    # ROOT 6.40's importer leaves the channel category out of the ModelConfig's observables; the
    # toy sampler then cannot generate the simultaneous pdf (it crashes).
    pdf = sb.GetPdf()
    if pdf.InheritsFrom("RooSimultaneous"):
        observables = R.RooArgSet(sb.GetObservables())
        observables.add(pdf.indexCat())
        sb.SetObservables(observables)
    poi = sb.GetParametersOfInterest().first()
    poi.setVal(1.0)
    sb.SetSnapshot(R.RooArgSet(poi))
    b_only = sb.Clone("b_only")
    poi.setVal(0.0)
    b_only.SetSnapshot(R.RooArgSet(poi))
    calculator = R.RooStats.FrequentistCalculator(data, b_only, sb)
    statistic = R.RooStats.ProfileLikelihoodTestStat(sb.GetPdf())
    statistic.SetOneSided(True)
    sampler = calculator.GetTestStatSampler()
    sampler.SetTestStatistic(statistic)
    calculator.SetToys(args.toys, args.toys)
    R.RooRandom.randomGenerator().SetSeed(1)
    inverter = R.RooStats.HypoTestInverter(calculator)
    inverter.SetConfidenceLevel(0.95)
    inverter.UseCLs(True)
    if args.mu_points == 1:
        inverter.SetFixedScan(1, args.mu, args.mu)
    else:
        inverter.SetFixedScan(args.mu_points, 0.1, args.mu)
    start = time.perf_counter()
    inverter.GetInterval()
    seconds = time.perf_counter() - start
    toys = 2 * args.toys * args.mu_points
    per_toy = seconds / toys
    print(json.dumps({"model": args.model, "seconds": seconds, "toys": toys, "seconds_per_toy": per_toy,
                      "limit_10x2000_hours": per_toy * 2 * 2000 * 10 / 3600}))


if __name__ == "__main__":
    main()
