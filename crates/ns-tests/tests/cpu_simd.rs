//! The CPU evaluator gives the same bits on every instruction set it is compiled for (baseline,
//! AVX2, AVX-512 where this CPU has them), on every shared workspace and published likelihood,
//! for every interpolation pair, at the suggested init, with the POI at 0, and at random points.
//! An instruction set the CPU lacks is an error, not a crash.

use ns_compute::cpu::simd;
use ns_compute::{CpuEvaluator, Scratch};
use ns_tests::{
    TestRng, all_code_pairs, model_and_data, published_likelihoods, random_point, shared_workspaces,
};

#[test]
fn every_instruction_set_gives_the_same_bits() {
    let sets = simd::available();
    eprintln!("instruction sets on this CPU: {sets:?}");
    let mut workspaces = shared_workspaces();
    for (name, dir) in published_likelihoods() {
        let ws = ns_translate::Workspace::from_path(&dir.join("workspace.json"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        workspaces.push((name, ws));
    }
    let mut compared = 0;
    for (name, ws) in &workspaces {
        for codes in all_code_pairs() {
            let (model, data) = model_and_data(ws, codes);
            let eval = CpuEvaluator::new(&model.compiled);
            let mut rng = TestRng::new(name.len() as u64);
            let mut points = vec![model.suggested_init()];
            if let Some(poi) = model.poi_index() {
                let mut at_zero = model.suggested_init();
                at_zero[poi] = 0.0;
                points.push(at_zero);
            }
            points.extend((0..2).map(|_| random_point(&model, &mut rng)));
            for p in &points {
                let mut reference = None;
                for &set in sets {
                    let mut grad = vec![0.0; model.n_params()];
                    let mut s = Scratch::new(&model.compiled);
                    let nll = eval
                        .nll_minus_constant_on(set, p, &data, &mut s, Some(&mut grad))
                        .unwrap();
                    let bits: Vec<u64> =
                        std::iter::once(nll).chain(grad).map(f64::to_bits).collect();
                    match &reference {
                        None => reference = Some(bits),
                        Some(r) => assert_eq!(
                            r, &bits,
                            "{name} ({codes}): {set:?} differs from the baseline"
                        ),
                    }
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > 0);
}

#[test]
fn an_instruction_set_is_chosen_by_name_and_one_the_cpu_lacks_is_an_error() {
    for set in [simd::Simd::Baseline, simd::Simd::Avx2, simd::Simd::Avx512] {
        assert_eq!(simd::Simd::from_name(set.name()).unwrap(), set);
    }
    let err = simd::Simd::from_name("sse9").unwrap_err().to_string();
    assert!(err.contains("baseline, avx2, avx512"), "{err}");
    assert!(simd::available().contains(&simd::Simd::Baseline));
    assert!(simd::available().contains(&simd::best()));
    let (name, ws) = shared_workspaces().remove(0);
    let (model, data) = model_and_data(&ws, Default::default());
    let eval = CpuEvaluator::new(&model.compiled);
    for set in [simd::Simd::Avx2, simd::Simd::Avx512] {
        let result = eval.nll_minus_constant_on(
            set,
            &model.suggested_init(),
            &data,
            &mut Scratch::new(&model.compiled),
            None,
        );
        match result {
            Ok(_) => assert!(simd::available().contains(&set)),
            Err(e) => assert!(e.to_string().contains(set.name()), "{name}: {e}"),
        }
    }
}
