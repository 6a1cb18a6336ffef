"""How long reading HistFactory XML + ROOT files takes next to a fit: writes a TRExFitter-sized
model — 100 channels of 10 bins, 4 samples each (a signal with the POI, three backgrounds), 200
parameters in all (the POI, 3 normalisations, 196 OverallSys drawn from a pool, 4 HistoSys, the
lumi) — as combination XML + one zlib ROOT file (written with uproot), then
times, best of 5 whole processes: `nextstat xml2json` (reading alone), `nextstat fit` of the XML,
and `nextstat fit` of the same workspace as JSON.

    python bench/xml_load.py [--bin target/release/nextstat] [--out FOLDER]
"""
import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import uproot

CHANNELS, BINS, POOL = 100, 10, 196


def write_model(folder: Path):
    rng = np.random.default_rng(3)
    (folder / "config").mkdir(parents=True, exist_ok=True)
    edges = np.linspace(0.0, 1.0, BINS + 1)
    histos = {}
    channel_inputs = []
    used = set()
    for c in range(CHANNELS):
        ch = f"ch{c:03d}"
        shape = np.exp(-np.linspace(0, 2, BINS))
        samples = {"signal": 5 * shape[::-1], "bkg1": 50 * shape, "bkg2": 30 * shape, "bkg3": 10 * np.ones(BINS)}
        total = sum(samples.values())
        histos[f"{ch}/data"] = (rng.poisson(total).astype(float), edges)
        lines = ['<!DOCTYPE Channel SYSTEM "HistFactorySchema.dtd">', f'<Channel Name="{ch}" InputFile="data/model.root" HistoPath="{ch}">',
                 '  <Data HistoName="data"/>', '  <StatErrorConfig RelErrorThreshold="0.05" ConstraintType="Poisson"/>']
        for s, (name, values) in enumerate(samples.items()):
            histos[f"{ch}/{name}"] = (values, edges)
            histos[f"{ch}/{name}_up"] = (values * (1 + 0.05 * np.linspace(-1, 1, BINS)), edges)
            histos[f"{ch}/{name}_down"] = (values * (1 - 0.05 * np.linspace(-1, 1, BINS)), edges)
            lines.append(f'  <Sample Name="{name}" HistoName="{name}" NormalizeByTheory="True">')
            for k in rng.choice(POOL, 5, replace=False):
                used.add(int(k))
                lines.append(f'    <OverallSys Name="syst{k:03d}" Low="{0.95 - 0.01 * (k % 5):.2f}" High="{1.05 + 0.01 * (k % 5):.2f}"/>')
            lines.append(f'    <HistoSys Name="shape_{name}" HistoNameHigh="{name}_up" HistoNameLow="{name}_down" HistoPathHigh="{ch}" HistoPathLow="{ch}"/>')
            lines.append('    <NormFactor Name="mu" Val="1" Low="0" High="10"/>' if name == "signal" else f'    <NormFactor Name="norm_{name}" Val="1" Low="0" High="5"/>')
            lines.append("  </Sample>")
        lines.append("</Channel>")
        (folder / "config" / f"{ch}.xml").write_text("\n".join(lines))
        channel_inputs.append(f"  <Input>config/{ch}.xml</Input>")
    top = ['<!DOCTYPE Combination SYSTEM "HistFactorySchema.dtd">', '<Combination OutputFilePrefix="results/model">', *channel_inputs,
           '  <Measurement Name="meas" Lumi="1" LumiRelErr="0.02">', "    <POI>mu</POI>", '    <ParamSetting Const="True">Lumi</ParamSetting>', "  </Measurement>", "</Combination>"]
    (folder / "config" / "combination.xml").write_text("\n".join(top))
    (folder / "data").mkdir(exist_ok=True)
    with uproot.recreate(folder / "data" / "model.root", compression=uproot.ZLIB(1)) as f:
        for name, h in histos.items():
            f[name] = h
    return folder / "config" / "combination.xml", len(used)


def best(cmd, cwd, runs=5):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, cmd))}: {out.stderr}")
    return min(times), out.stdout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/release/nextstat")
    p.add_argument("--out", default="/tmp/nextstat-xml-load")
    a = p.parse_args()
    binary = str(Path(a.bin).resolve())
    folder = Path(a.out)
    top, systematics = write_model(folder)
    t_read, ws = best([binary, "xml2json", str(top)], folder)
    (folder / "workspace.json").write_text(ws)
    t_fit_xml, fit = best([binary, "fit", str(top)], folder)
    t_fit_json, _ = best([binary, "fit", str(folder / "workspace.json")], folder)
    n_par = len(json.loads(fit)["parameter_names"])
    print(f"model: {CHANNELS} channels × {BINS} bins, {n_par} parameters ({systematics} OverallSys), "
          f"ROOT file {(folder / 'data' / 'model.root').stat().st_size / 1e6:.1f} MB")
    print("| whole process, best of 5 | seconds |\n|---|---|")
    print(f"| `nextstat xml2json` (read XML + ROOT, write JSON) | {t_read:.3f} |")
    print(f"| `nextstat fit combination.xml` | {t_fit_xml:.3f} |")
    print(f"| `nextstat fit workspace.json` (the same model) | {t_fit_json:.3f} |")


if __name__ == "__main__":
    main()
