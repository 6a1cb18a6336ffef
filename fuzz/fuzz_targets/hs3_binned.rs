//! Fuzz the binned HS3 reader (`histfactory_dist`) and the writer: whatever document the reader
//! accepts builds a model, evaluates one NLL + gradient at its start, and is written as HS3 and
//! read back; none of it may panic on any input. Seeds: ROOT's files of `../shared/hs3-binned`
//! (docs/testing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ns_compute::{CpuEvaluator, Likelihood, Scratch};
use ns_translate::{FromWorkspace, HistFactoryModel, ModelOptions, Workspace};

fuzz_target!(|bytes: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(bytes) else { return };
    let Ok(Some(binned)) = ns_hs3::binned::read(&doc, None) else { return };
    let Ok(workspace) = Workspace::from_value(binned.workspace) else { return };
    let options = ModelOptions { codes: binned.codes, ..ModelOptions::default() };
    let Ok(model) = HistFactoryModel::from_workspace(&workspace, &options) else { return };
    if let Ok(data) = model.observed() {
        let eval = CpuEvaluator::new(&model.compiled);
        let mut scratch = Scratch::new(&model.compiled);
        let mut grad = vec![0.0; model.n_params()];
        let _ = eval.nll_with_gradient(&model.suggested_init(), &data, &mut scratch, Some(&mut grad));
    }
    if let Ok(written) = ns_hs3::binned::write(&workspace, &model) {
        let _ = ns_hs3::binned::read(&written, None);
    }
});
