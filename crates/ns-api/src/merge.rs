//! Calls that run together: toy-based hypothesis tests, or rankings, of one model asked for by
//! separate callers (the HTTP server's per-device queue) fitted as one batch — on a GPU one
//! device batch where each would have been its own. Every call's outcome is the same bits as
//! when it runs alone ([`Call::run_on`]).

use ns_compute::Device;
use ns_core::{Error, Result};

use crate::call::{Call, Prepared};
use crate::request::{Outcome, Request};
use ns_inference::fit::Fitter;
use ns_inference::ranking::ranking_batch;
use ns_inference::toys::{ToyTest, hypotest_toys_batch};

/// What calls must share to run as one batch: the kind of work, the device, and the optimizer's
/// tolerance (a device batch runs one set of optimizer options). Data, μ, seeds, toy counts and
/// fixed parameters may differ.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MergeKey {
    verb: &'static str,
    device: String,
    tolerance_bits: u64,
}

/// The key of a call that can share a batch with others of its model; `None` for verbs whose
/// work is not one batch of independent fits, and for devices where a fit's result depends on
/// its batch (the f32 backends hand a batch's last fits to the CPU, a tail that depends on the
/// batch's size) or that are not resolved yet (`auto`).
pub fn merge_key(call: &Call) -> Option<MergeKey> {
    if !matches!(
        Device::from_name(&call.device),
        Ok(Device::Cpu | Device::Cuda(_))
    ) {
        return None;
    }
    let verb = match call.request {
        Request::HypotestToys { .. } | Request::Ranking => call.request.verb().name,
        _ => return None,
    };
    Some(MergeKey {
        verb,
        device: call.device.clone(),
        tolerance_bits: call.fit.tolerance.to_bits(),
    })
}

/// Run `calls` — all of one [`MergeKey`], on `fitter`'s model — as one batch. A call that cannot
/// run (a bad request, a fit that cannot start) gets its own error; an interrupt or a device
/// failure fails all. `progress` receives the steps done over all calls, of the sum of their
/// [`Request::progress_steps`] (toys: exact; rankings: an upper bound).
pub fn run_merged(
    calls: &[&Call],
    fitter: &Fitter,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Result<Outcome>>> {
    let Some(key) = calls.first().and_then(|c| merge_key(c)) else {
        return Err(Error::InvalidInput(
            "run_merged takes toy hypothesis tests or rankings".into(),
        ));
    };
    if let Some(other) = calls.iter().find(|c| merge_key(c).as_ref() != Some(&key)) {
        return Err(Error::InvalidInput(format!(
            "calls of different kinds, devices or tolerances cannot share a batch: {:?} and {:?}",
            key,
            merge_key(other)
        )));
    }
    let mut outcomes: Vec<Option<Result<Outcome>>> = Vec::with_capacity(calls.len());
    let mut ready: Vec<(usize, Prepared)> = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        match call.validate().and_then(|_| call.prepare_on(fitter)) {
            Ok(p) => {
                ready.push((i, p));
                outcomes.push(None);
            }
            Err(e) => outcomes.push(Some(Err(e))),
        }
    }
    match key.verb {
        "hypotest_toys" => {
            let tests: Vec<ToyTest> = ready
                .iter()
                .map(|(i, p)| match calls[*i].request {
                    Request::HypotestToys {
                        mu,
                        test_stat,
                        n_toys,
                        seed,
                        ..
                    } => ToyTest {
                        mu,
                        data: &p.data,
                        config: &p.config,
                        stat: test_stat,
                        n_toys,
                        seed,
                        toys: 0..n_toys,
                    },
                    _ => unreachable!("the merge key holds toy tests only"),
                })
                .collect();
            let results = hypotest_toys_batch(fitter, &tests, progress)?;
            for ((i, _), (test, result)) in ready.iter().zip(tests.iter().zip(results)) {
                let teststats = matches!(
                    calls[*i].request,
                    Request::HypotestToys {
                        teststats: true,
                        ..
                    }
                );
                outcomes[*i] = Some(result.map(|result| Outcome::HypotestToys {
                    test_stat: test.stat,
                    result,
                    teststats,
                }));
            }
        }
        _ => {
            let requests: Vec<_> = ready.iter().map(|(_, p)| (&p.data, &p.config)).collect();
            let results = ranking_batch(fitter, &requests, progress)?;
            for ((i, _), result) in ready.iter().zip(results) {
                outcomes[*i] = Some(result.map(Outcome::Ranking));
            }
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.expect("every call has its outcome"))
        .collect())
}
