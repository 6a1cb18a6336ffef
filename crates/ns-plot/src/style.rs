//! Colours and sizes: the Okabe–Ito palette (distinguishable with every common colour-vision
//! deficiency), a blue–white–red scale for correlations, and figure sizes that fit a slide.

use plotters::style::{RGBAColor, RGBColor};

use crate::spec::Figure;

/// The family every text is drawn in (DejaVu Sans, embedded).
pub const FONT: &str = "sans-serif";

const OKABE_ITO: [RGBColor; 7] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(230, 159, 0),   // orange
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(240, 228, 66),  // yellow
];

pub const OBSERVED: RGBColor = RGBColor(0, 0, 0);
pub const THEORY: RGBColor = RGBColor(213, 94, 0);
pub const LEVEL: RGBColor = RGBColor(213, 94, 0);
/// Impacts of +1σ and −1σ shifts (and the two toy ensembles).
pub const UP: RGBColor = RGBColor(0, 114, 178);
pub const DOWN: RGBColor = RGBColor(230, 159, 0);
/// The expected-limit bands (the usual green and yellow, in Okabe–Ito's shades).
pub const BAND_1SIGMA: RGBColor = RGBColor(0, 158, 115);
pub const BAND_2SIGMA: RGBColor = RGBColor(240, 228, 66);
pub const UNCERTAINTY: RGBAColor = RGBAColor(60, 60, 60, 0.35);

/// The colour of the `k`-th sample of a stack.
pub fn sample_color(k: usize) -> RGBColor {
    OKABE_ITO[k % OKABE_ITO.len()]
}

/// ρ in [−1, 1] on a blue–white–red scale.
pub fn diverging(rho: f64) -> RGBColor {
    let t = rho.clamp(-1.0, 1.0);
    let (end, w) = if t < 0.0 {
        ((33.0, 102.0, 172.0), -t)
    } else {
        ((178.0, 24.0, 43.0), t)
    };
    let mix = |e: f64| (255.0 + (e - 255.0) * w).round() as u8;
    RGBColor(mix(end.0), mix(end.1), mix(end.2))
}

/// Width and height in pixels: 1200 × 675 (16:9), and one row per parameter for the figures
/// that list parameters.
pub fn size_of(figure: &Figure) -> (u32, u32) {
    let rows = |n: usize, per: u32| (160 + n as u32 * per).max(400);
    match figure {
        Figure::Ranking(f) => (1200, rows(f.entries.len(), 32)),
        Figure::Pulls(f) => {
            let n: usize = f.groups.iter().map(|g| g.entries.len() + 1).sum();
            (1000, rows(n, 24))
        }
        Figure::Correlation(f) => {
            let side = (260 + f.names.len() as u32 * 28).max(700);
            (side + 200, side + 200)
        }
        Figure::Yields(f) => ((f.channels.len() as u32 * 520).max(900), 760),
        _ => (1200, 675),
    }
}
