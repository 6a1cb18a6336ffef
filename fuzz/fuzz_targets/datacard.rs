//! Fuzz the datacard parser, the model builder and one NLL + gradient evaluation of the model:
//! none of them may panic on any card.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ns_compute::{CpuEvaluator, PreparedData, Scratch};

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    let _ = ns_datacard::claims_head(bytes);
    let Ok(card) = ns_datacard::parse(text, "fuzz.txt") else { return };
    let Ok(model) = ns_datacard::model(&card, &ns_datacard::ShapeFiles::none()) else { return };
    let Ok(main) = model.observations.clone() else { return };
    let Ok(data) = PreparedData::new(&model.compiled, main, model.auxdata.clone()) else { return };
    let params: Vec<f64> = model.parameter_sets.iter().map(|s| s.inits[0]).collect();
    let mut grad = vec![0.0; params.len()];
    let _ = CpuEvaluator::new(&model.compiled).nll_with_gradient(
        &params,
        &data,
        &mut Scratch::new(&model.compiled),
        Some(&mut grad),
    );
});
