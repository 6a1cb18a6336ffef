//! Where the time of an XML model goes in one process, best of 20: reading the XML and ROOT
//! files, the typed workspace, the model, and one fit with its Hessian — under both semantics.
//!
//!     python bench/xml_load.py --out /tmp/xmlbench   # writes the 100-channel model
//!     cargo run --release -p ns-tests --example xml_timing -- /tmp/xmlbench/config/combination.xml

use std::path::Path;
use std::time::Instant;

use ns_inference::{FitConfig, Fitter};
use ns_translate::{FromWorkspace, HistFactoryModel, Workspace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let top = std::env::args()
        .nth(1)
        .ok_or("usage: xml_timing COMBINATION.XML (its folder is the base folder)")?;
    let top = Path::new(&top);
    let base = top
        .parent()
        .and_then(Path::parent)
        .ok_or("the combination XML lies in a folder of the base folder")?;
    for semantics in [ns_xml::Semantics::Root, ns_xml::Semantics::Pyhf] {
        let options = ns_xml::ReadOptions {
            semantics,
            base_dir: Some(base),
            access: ns_core::FileAccess::Local { base: Some(base) },
            sent: None,
        };
        let mut best = [f64::INFINITY; 4];
        for _ in 0..20 {
            let t0 = Instant::now();
            let value = ns_xml::read(top, &options)?;
            let t1 = Instant::now();
            let workspace = Workspace::from_value(value)?;
            let t2 = Instant::now();
            let model = HistFactoryModel::from_workspace(&workspace, &Default::default())?;
            let t3 = Instant::now();
            let data = ns_compute::Likelihood::observed(&model)?;
            let config = FitConfig {
                uncertainties: true,
                ..FitConfig::suggested(&model)
            };
            Fitter::new(&model).fit(&data, &config)?;
            let t4 = Instant::now();
            for (b, d) in best.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3]) {
                *b = b.min(d.as_secs_f64() * 1e3);
            }
        }
        println!(
            "{}: read {:.1} ms, workspace {:.1} ms, model {:.2} ms; fit + Hessian {:.1} ms",
            semantics.name(),
            best[0],
            best[1],
            best[2],
            best[3]
        );
    }
    Ok(())
}
