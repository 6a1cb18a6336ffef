//! Profile-likelihood scans over a grid of several parameters (Combine's `MultiDimFit --algo
//! grid`): every grid point fitted with those parameters fixed there, 2ΔNLL against the
//! unconditional fit, and for two parameters the contours at chosen levels.

use ns_compute::PreparedData;
use ns_core::{Error, Result};

use crate::fit::{FitConfig, FitResult, Fitter};
use crate::scan::profile_points;

/// Most points of one grid scan (each two fits).
pub const MAX_GRID_POINTS: usize = 250_000;

/// A profile scan over the product of `axes`.
#[derive(Clone, Debug)]
pub struct GridScan {
    pub parameters: Vec<String>,
    pub axes: Vec<Vec<f64>>,
    /// Per point (row-major: the last axis varies fastest), twice_nll with the parameters fixed.
    pub twice_nll: Vec<f64>,
    /// twice_nll minus that of the unconditional fit.
    pub delta_twice_nll: Vec<f64>,
    pub fits: Vec<FitResult>,
    pub free_fit: FitResult,
}

/// The grid's points in row-major order (the last axis fastest).
pub fn grid_points(axes: &[Vec<f64>]) -> Vec<Vec<f64>> {
    axes.iter().fold(vec![Vec::new()], |points, axis| {
        points
            .iter()
            .flat_map(|p| {
                axis.iter().map(move |&v| {
                    let mut q = p.clone();
                    q.push(v);
                    q
                })
            })
            .collect()
    })
}

/// The number of points of the grid over `axes`, refused beyond [`MAX_GRID_POINTS`] or without
/// points, before any is made.
pub fn check_grid(parameters: &[String], axes: &[Vec<f64>]) -> Result<usize> {
    if parameters.len() < 2 || parameters.len() != axes.len() {
        return Err(Error::InvalidInput(format!(
            "a grid scan needs at least two parameters, each with its values ({} parameters, {} \
             lists of values); a scan of one parameter is a profile scan",
            parameters.len(),
            axes.len()
        )));
    }
    let mut points: usize = 1;
    for (name, axis) in parameters.iter().zip(axes) {
        if axis.is_empty() {
            return Err(Error::InvalidInput(format!(
                "the grid scan's values of '{name}' are empty"
            )));
        }
        if let Some(w) = axis.windows(2).find(|w| !(w[0] < w[1])) {
            return Err(Error::InvalidInput(format!(
                "the grid scan's values of '{name}' must increase ({} is followed by {})",
                w[0], w[1]
            )));
        }
        points = points.saturating_mul(axis.len());
    }
    if points > MAX_GRID_POINTS {
        return Err(Error::InvalidInput(format!(
            "a grid of {} = {points} points: at most {MAX_GRID_POINTS} (each is two fits); use \
             fewer values, or shards of a smaller grid",
            axes.iter()
                .map(|a| a.len().to_string())
                .collect::<Vec<_>>()
                .join(" × ")
        )));
    }
    Ok(points)
}

/// Fit every point of the grid over `axes` (one list of values per parameter of `parameters`).
/// `progress` receives the points done.
pub fn profile_scan_grid(
    fitter: &Fitter,
    parameters: &[usize],
    axes: &[Vec<f64>],
    data: &PreparedData,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<GridScan> {
    let names: Vec<String> = parameters
        .iter()
        .map(|&p| fitter.model().parameter_names()[p].clone())
        .collect();
    check_grid(&names, axes)?;
    let (fits, free_fit) = profile_points(
        fitter,
        parameters,
        &grid_points(axes),
        data,
        config,
        progress,
    )?;
    Ok(GridScan::new(names, axes.to_vec(), fits, free_fit))
}

/// Most rounds of a grid's refinement near its contours.
pub const MAX_REFINE_ROUNDS: usize = 5;

/// The two-parameter `scan` refined `rounds` times near its contours at 2ΔNLL `levels`: each
/// round halves every axis interval spanned by a cell that a contour crosses, and fits only the
/// points the refined grid adds (a point's fit depends on its own point only, so the points it
/// had keep theirs). Stops early where no cell is crossed, and before a round whose grid would
/// pass [`MAX_GRID_POINTS`]. `progress` receives the points added and fitted.
#[allow(clippy::too_many_arguments)]
pub fn refine_near_contours(
    fitter: &Fitter,
    parameters: &[usize],
    mut scan: GridScan,
    levels: &[f64],
    rounds: usize,
    data: &PreparedData,
    config: &FitConfig,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<GridScan> {
    if rounds > MAX_REFINE_ROUNDS {
        return Err(Error::InvalidInput(format!(
            "refine = {rounds}: at most {MAX_REFINE_ROUNDS} rounds (each can double the points \
             along both axes)"
        )));
    }
    if rounds > 0 && scan.axes.len() != 2 {
        return Err(Error::InvalidInput(format!(
            "refining near the contours needs a grid of two parameters, not {}",
            scan.axes.len()
        )));
    }
    let mut done = 0;
    for _ in 0..rounds {
        let (xs, ys) = (&scan.axes[0], &scan.axes[1]);
        let ny = ys.len();
        let v = |i: usize, j: usize| scan.delta_twice_nll[i * ny + j];
        let (mut split_x, mut split_y) = (vec![false; xs.len() - 1], vec![false; ny - 1]);
        for i in 0..xs.len() - 1 {
            for j in 0..ny - 1 {
                let corners = [v(i, j), v(i + 1, j), v(i, j + 1), v(i + 1, j + 1)];
                if corners.iter().any(|c| !c.is_finite()) {
                    continue;
                }
                let low = corners.iter().copied().fold(f64::INFINITY, f64::min);
                let high = corners.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if levels.iter().any(|&l| low < l && l <= high) {
                    split_x[i] = true;
                    split_y[j] = true;
                }
            }
        }
        if !split_x.contains(&true) {
            break;
        }
        let halved = |axis: &[f64], split: &[bool]| -> Vec<f64> {
            let mut out = vec![axis[0]];
            for (w, &s) in axis.windows(2).zip(split) {
                if s {
                    out.push(0.5 * (w[0] + w[1]));
                }
                out.push(w[1]);
            }
            out
        };
        let axes = vec![halved(xs, &split_x), halved(ys, &split_y)];
        // A round that would pass the grid's limit is not made; the rounds made stand.
        if axes[0].len().saturating_mul(axes[1].len()) > MAX_GRID_POINTS {
            break;
        }
        let old = |axis: &[f64], value: f64| axis.binary_search_by(|x| x.total_cmp(&value)).ok();
        let points = grid_points(&axes);
        let slots: Vec<Option<usize>> = points
            .iter()
            .map(|p| Some(old(xs, p[0])? * ny + old(ys, p[1])?))
            .collect();
        let fresh: Vec<Vec<f64>> = points
            .iter()
            .zip(&slots)
            .filter(|(_, s)| s.is_none())
            .map(|(p, _)| p.clone())
            .collect();
        let (new_fits, _) = profile_points(fitter, parameters, &fresh, data, config, &|k| {
            progress(done + k)
        })?;
        done += fresh.len();
        let mut new_fits = new_fits.into_iter();
        let fits: Vec<FitResult> = slots
            .iter()
            .map(|s| match s {
                Some(k) => scan.fits[*k].clone(),
                None => new_fits.next().expect("a fit per added point"),
            })
            .collect();
        scan = GridScan::new(scan.parameters, axes, fits, scan.free_fit);
    }
    Ok(scan)
}

impl GridScan {
    /// The scan from its points' fits (in grid order) and the unconditional fit.
    pub fn new(
        parameters: Vec<String>,
        axes: Vec<Vec<f64>>,
        fits: Vec<FitResult>,
        free_fit: FitResult,
    ) -> GridScan {
        let twice_nll: Vec<f64> = fits.iter().map(|f| f.twice_nll).collect();
        GridScan {
            parameters,
            axes,
            delta_twice_nll: twice_nll.iter().map(|t| t - free_fit.twice_nll).collect(),
            twice_nll,
            fits,
            free_fit,
        }
    }

    /// For a grid of two parameters, the contour lines of 2ΔNLL at `level`; `None` for more.
    pub fn contours(&self, level: f64) -> Option<Vec<Vec<[f64; 2]>>> {
        (self.axes.len() == 2).then(|| {
            crate::contour::contour_lines(
                &self.axes[0],
                &self.axes[1],
                &self.delta_twice_nll,
                level,
            )
        })
    }
}

/// 2ΔNLL of a contour at confidence level `cl` for `dof` parameters: the χ² quantile
/// (for two, −2 ln(1 − cl): 2.30 at 68.27%, 6.18 at 95.45%).
pub fn level_of_cl(cl: f64, dof: usize) -> Result<f64> {
    use statrs::distribution::{ChiSquared, ContinuousCDF};
    if !(cl > 0.0 && cl < 1.0) {
        return Err(Error::InvalidInput(format!(
            "confidence level {cl}: a contour's level lies strictly between 0 and 1 (0.6827 for \
             68.27%)"
        )));
    }
    let chi2 = ChiSquared::new(dof as f64)
        .map_err(|e| Error::InvalidInput(format!("χ² with {dof} degrees of freedom: {e}")))?;
    Ok(chi2.inverse_cdf(cl))
}
