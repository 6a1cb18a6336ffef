//! Fuzz the HS3 reader (and through it the expression parser), then one NLL + gradient, the
//! Asimov dataset and one toy of whatever model it accepts: none may panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ns_compute::{Device, Likelihood};
use ns_unbinned::hs3::{ReadOptions, read};

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    let _ = ns_unbinned::expr::parse(text);
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(text) else { return };
    let Ok(model) = read(&doc, &ReadOptions::default()) else { return };
    let Ok(data) = model.observed() else { return };
    let init = model.suggested_init();
    let mut grad = vec![0.0; init.len()];
    let _ = model.nll_grad(&data, &init, &mut grad);
    let _ = model.where_undefined(&init, &data);
    // Small models only: the Asimov grid and a toy are as large as the model makes them.
    if model.channels().iter().all(|c| c.axes.len() <= 2) {
        let _ = model.asimov(&init);
        if let Ok(cpu) = model.open(Device::Cpu) {
            let (nu, _) = model.expected(&init).unwrap_or_default();
            if nu.iter().all(|n| *n < 1e5) {
                let _ = model.sample_toys(cpu.as_ref(), &[(&init, 0)], 1, 0, 1);
            }
        }
    }
});
