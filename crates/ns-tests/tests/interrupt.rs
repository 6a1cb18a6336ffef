//! A caller can stop long work: a set interrupt flag ends fits, batches and toy runs with
//! `Error::Interrupted` instead of results.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ns_core::Error;
use ns_inference::{FitConfig, FitJob, Fitter, TestStatistic, hypotest_toys};
use ns_tests::{model_and_data, workspace_path};
use ns_translate::Workspace;

#[test]
fn an_interrupt_stops_fits_batches_and_toys() {
    let ws = Workspace::from_path(&workspace_path("nextstat_tttt_prod.json")).unwrap();
    let (model, data) = model_and_data(&ws, Default::default());
    let config = FitConfig::suggested(&model);
    let flag = Arc::new(AtomicBool::new(false));
    let fitter = Fitter::new(&model).with_interrupt(flag.clone());
    assert!(
        fitter.fit(&data, &config).unwrap().converged,
        "an unset flag changes nothing"
    );
    flag.store(true, Ordering::Relaxed);
    assert!(matches!(
        fitter.fit(&data, &config),
        Err(Error::Interrupted)
    ));
    let jobs = vec![
        FitJob {
            data: 0,
            config: Arc::new(config.clone())
        };
        4
    ];
    assert!(matches!(
        fitter.fit_batch(std::slice::from_ref(&data), &jobs, &|_| {}),
        Err(Error::Interrupted)
    ));
    // Set while the toys run: the run stops early with the error, not with partial results.
    flag.store(false, Ordering::Relaxed);
    let stop_after = |done: usize| {
        if done >= 3 {
            flag.store(true, Ordering::Relaxed);
        }
    };
    let result = hypotest_toys(
        &fitter,
        1.0,
        &data,
        &config,
        TestStatistic::QTilde,
        2000,
        0,
        &stop_after,
    );
    assert!(matches!(result, Err(Error::Interrupted)), "{result:?}");
}
