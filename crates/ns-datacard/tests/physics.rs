//! multiSignalModel's maps (`--po map=…`): one POI per map, the processes it names scaled by
//! it, the others as they are; with every POI at r it is the default model at r.

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_datacard::{ShapeFiles, SignalMaps, model, model_with, parse};

const CARD: &str = "imax 2\njmax 2\nkmax *\n---\nbin a b\nobservation 9 5\n---\n\
bin a a a b b b\nprocess ggH qqH bkg ggH qqH bkg\nprocess -1 0 1 -1 0 1\n\
rate 2 1 5 1 2 3\n---\nlumi lnN 1.02 1.02 1.02 1.02 1.02 1.02\n\
bg lnN - - 1.1 - - 1.2\n";

fn nll(m: &ns_core::model::HistFactoryModel, x: &[f64]) -> f64 {
    let data = PreparedData::new(
        &m.compiled,
        m.observations.clone().unwrap(),
        m.auxdata.clone(),
    )
    .unwrap();
    CpuEvaluator::new(&m.compiled)
        .nll(x, &data, &mut Scratch::new(&m.compiled))
        .unwrap()
}

#[test]
fn maps_scale_the_processes_they_name() {
    let card = parse(CARD, "card.txt").unwrap();
    let files = ShapeFiles::none();
    let default = model(&card, &files).unwrap();
    let maps = SignalMaps::parse(&[
        "map=.*/ggH:r_ggH[1,0,10]".into(),
        "map=.*/qqH:r_qqH[0.5,-2,8]".into(),
    ])
    .unwrap();
    let split = model_with(&card, &files, &maps).unwrap();
    assert_eq!(split.poi_name, "r_ggH");
    assert_eq!(split.par_names, ["r_ggH", "r_qqH", "lumi", "bg"]);
    assert_eq!(split.parameter_sets[1].inits, [0.5]);
    assert_eq!(split.parameter_sets[1].bounds, [(-2.0, 8.0)]);
    for (r, lumi, bg) in [(1.0, 0.0, 0.0), (1.7, 0.4, -0.8), (0.2, -1.1, 1.5)] {
        let both = nll(&split, &[r, r, lumi, bg]);
        assert!((both - nll(&default, &[r, lumi, bg])).abs() < 1e-12);
    }
    // The two POIs move their own processes: r_qqH = 0 is the default model without qqH.
    let no_qqh = SignalMaps::parse(&["map=.*/ggH:r[1,0,20]".into(), "turnoff=qqH".into()]).unwrap();
    let without = model_with(&card, &files, &no_qqh).unwrap();
    assert_eq!(without.par_names, ["r", "lumi", "bg"]);
    let a = nll(&split, &[1.3, 0.0, 0.2, 0.1]);
    let b = nll(&without, &[1.3, 0.2, 0.1]);
    assert!((a - b).abs() < 1e-12, "{a} vs {b}");
}
