//! Property tests of every interpolation code: the derivative is the derivative of the value,
//! and the value is continuous where pyhf's formula is.

use ns_core::interp::{NormsysTerm, histosys_delta_and_derivative};
use ns_core::{HistosysCode, NormsysCode};
use proptest::prelude::*;

fn away_from_kinks(alpha: f64) -> bool {
    alpha.abs() > 1e-3 && (alpha.abs() - 1.0).abs() > 1e-3
}

fn central(f: impl Fn(f64) -> f64, x: f64) -> f64 {
    let h = 1e-6;
    (f(x + h) - f(x - h)) / (2.0 * h)
}

proptest! {
    #[test]
    fn normsys_slope_is_the_derivative(hi in 0.5f64..2.0, lo in 0.5f64..2.0, alpha in -4.0f64..4.0) {
        prop_assume!(away_from_kinks(alpha));
        for code in [NormsysCode::Code1, NormsysCode::Code4] {
            let term = NormsysTerm::new(code, hi, lo);
            let (_, slope) = term.factor_and_derivative(code, alpha);
            let fd = central(|a| term.factor_and_derivative(code, a).0, alpha);
            prop_assert!((slope - fd).abs() <= 1e-6 * slope.abs().max(1.0), "{code:?}: {slope} vs {fd}");
        }
    }

    #[test]
    fn histosys_slope_is_the_derivative(up in -5.0f64..5.0, down in -5.0f64..5.0, alpha in -4.0f64..4.0) {
        prop_assume!(away_from_kinks(alpha));
        for code in [HistosysCode::Code0, HistosysCode::Code2, HistosysCode::Code4p] {
            let (_, slope) = histosys_delta_and_derivative(code, alpha, up, down);
            let fd = central(|a| histosys_delta_and_derivative(code, a, up, down).0, alpha);
            prop_assert!((slope - fd).abs() <= 1e-6 * slope.abs().max(1.0), "{code:?}: {slope} vs {fd}");
        }
    }

    #[test]
    fn code4_and_code4p_are_smooth_at_the_joins(hi in 0.5f64..2.0, lo in 0.5f64..2.0, up in -5.0f64..5.0, down in -5.0f64..5.0) {
        let term = NormsysTerm::new(NormsysCode::Code4, hi, lo);
        for join in [-1.0f64, 1.0] {
            let eps = 1e-9;
            let (a, da) = term.factor_and_derivative(NormsysCode::Code4, join - eps * join.signum());
            let (b, db) = term.factor_and_derivative(NormsysCode::Code4, join + eps * join.signum());
            prop_assert!((a - b).abs() < 1e-7 && (da - db).abs() < 1e-6, "code4 at {join}: {a} {b} {da} {db}");
            let (a, da) = histosys_delta_and_derivative(HistosysCode::Code4p, join - eps * join.signum(), up, down);
            let (b, db) = histosys_delta_and_derivative(HistosysCode::Code4p, join + eps * join.signum(), up, down);
            prop_assert!((a - b).abs() < 1e-7 && (da - db).abs() < 1e-6, "code4p at {join}: {a} {b} {da} {db}");
        }
        // Both polynomials reproduce the variations at ±1 exactly.
        prop_assert!((term.factor_and_derivative(NormsysCode::Code4, 0.999_999_999).0 - hi).abs() < 1e-7);
    }

    #[test]
    fn code0_and_code1_are_continuous_at_zero_and_take_the_upper_branch(hi in 0.5f64..2.0, lo in 0.5f64..2.0, up in -5.0f64..5.0, down in -5.0f64..5.0) {
        let term = NormsysTerm::new(NormsysCode::Code1, hi, lo);
        let (v0, d0) = term.factor_and_derivative(NormsysCode::Code1, 0.0);
        prop_assert_eq!(v0, 1.0);
        prop_assert!((d0 - hi.ln()).abs() < 1e-15, "the kink takes the α ≥ 0 branch");
        let (h0, s0) = histosys_delta_and_derivative(HistosysCode::Code0, 0.0, up, down);
        prop_assert_eq!(h0, 0.0);
        prop_assert_eq!(s0, up);
        let (hp, _) = histosys_delta_and_derivative(HistosysCode::Code0, 1e-12, up, down);
        prop_assert!(hp.abs() < 1e-11);
    }

    #[test]
    fn code2_matches_pyhf_formula_including_its_discontinuity(up in -5.0f64..5.0, down in -5.0f64..5.0, alpha in -4.0f64..4.0) {
        let a = 0.5 * (up - down);
        let b = 0.5 * (up + down);
        let expected = if alpha > 1.0 { (b + 2.0 * a) * (alpha - 1.0) } else if alpha >= -1.0 { a * alpha * alpha + b * alpha } else { (b - 2.0 * a) * alpha };
        let (v, _) = histosys_delta_and_derivative(HistosysCode::Code2, alpha, up, down);
        prop_assert!((v - expected).abs() <= 1e-12 * expected.abs().max(1.0));
    }
}
