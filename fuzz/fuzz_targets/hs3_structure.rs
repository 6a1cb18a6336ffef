//! Fuzz the HS3 reader with documents of arbitrary structure built from the bytes (cycles,
//! shared nodes, long chains, malformed parameter points: `crates/ns-unbinned/tests/common/
//! structure.rs`, the generator of the property test), then one NLL + gradient of whatever model
//! it accepts: none may panic, recurse without bound or abort.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ns_compute::Likelihood;
use ns_unbinned::hs3::{ReadOptions, read};

#[path = "../../crates/ns-unbinned/tests/common/structure.rs"]
mod structure;

fuzz_target!(|bytes: &[u8]| {
    let doc = structure::document(bytes);
    let Ok(model) = read(&doc, &ReadOptions::default()) else { return };
    let Ok(data) = model.observed() else { return };
    let init = model.suggested_init();
    let mut grad = vec![0.0; init.len()];
    let _ = model.nll_grad(&data, &init, &mut grad);
    let _ = model.where_undefined(&init, &data);
});
