//! Fuzz the workspace parser, validation, the model builder, one NLL + gradient evaluation and
//! the pyhf-compatible serialiser: none of them may panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ns_translate::FromWorkspace;
use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::InterpCodes;
use ns_translate::pyjson::{DumpOptions, digest, dumps};
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    let Ok(ws) = Workspace::from_json_str(text) else { return };
    let value = ws.to_value();
    let _ = digest(&value);
    let _ = dumps(&value, DumpOptions::PYHF_CLI);
    let _ = ws.sorted();
    for codes in [InterpCodes::default(), InterpCodes::legacy()] {
        let Ok(model) = HistFactoryModel::from_workspace(&ws, &ModelOptions { codes, ..ModelOptions::default() }) else { continue };
        let Ok(full) = ws.data(&model, true) else { continue };
        let Ok(data) = PreparedData::from_full(&model.compiled, &full) else { continue };
        let eval = CpuEvaluator::new(&model.compiled);
        let mut scratch = Scratch::new(&model.compiled);
        let mut grad = vec![0.0; model.n_params()];
        let _ = eval.nll_with_gradient(&model.suggested_init(), &data, &mut scratch, Some(&mut grad));
    }
});
