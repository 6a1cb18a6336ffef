//! Contour lines of a function sampled on a rectangular grid (marching squares): the crossings of
//! the level on the grid's edges, linearly interpolated, joined cell by cell into polylines —
//! closed where a contour stays inside the grid, open where it leaves it.

use std::collections::HashMap;

/// A crossing's place: the grid edge it lies on, from point (i, j) along x (`0`) or y (`1`).
type EdgeKey = (usize, usize, u8);

/// The lines where `values` (row-major over `xs` × `ys`: `values[i * ys.len() + j]` at
/// `(xs[i], ys[j])`) crosses `level`. A cell with a non-finite corner has no crossing. At a saddle
/// (two opposite corners below) the cell's centre, the mean of its corners, decides which corners
/// join.
pub fn contour_lines(xs: &[f64], ys: &[f64], values: &[f64], level: f64) -> Vec<Vec<[f64; 2]>> {
    let (nx, ny) = (xs.len(), ys.len());
    if nx < 2 || ny < 2 || values.len() != nx * ny {
        return Vec::new();
    }
    let v = |i: usize, j: usize| values[i * ny + j];
    // A crossing on an edge: where the line between its two ends meets the level.
    let point = |(i, j, dir): EdgeKey| -> [f64; 2] {
        let (i2, j2) = if dir == 0 { (i + 1, j) } else { (i, j + 1) };
        let (a, b) = (v(i, j), v(i2, j2));
        let t = if a == b { 0.5 } else { (level - a) / (b - a) };
        [xs[i] + t * (xs[i2] - xs[i]), ys[j] + t * (ys[j2] - ys[j])]
    };
    let mut segments: Vec<(EdgeKey, EdgeKey)> = Vec::new();
    for i in 0..nx - 1 {
        for j in 0..ny - 1 {
            let corners = [v(i, j), v(i + 1, j), v(i + 1, j + 1), v(i, j + 1)];
            if corners.iter().any(|c| !c.is_finite()) {
                continue;
            }
            // The cell's edges, counter-clockwise from the bottom: each joins corner k to k + 1.
            let edges: [EdgeKey; 4] = [(i, j, 0), (i + 1, j, 1), (i, j + 1, 0), (i, j, 1)];
            let below: Vec<bool> = corners.iter().map(|&c| c < level).collect();
            let crossed: Vec<usize> = (0..4).filter(|&k| below[k] != below[(k + 1) % 4]).collect();
            match crossed.len() {
                2 => segments.push((edges[crossed[0]], edges[crossed[1]])),
                4 => {
                    // A saddle: the centre says whether the corners below (0 and 2, or 1 and 3)
                    // are joined through it; the lines then cut off the other two corners.
                    let centre_below = corners.iter().sum::<f64>() / 4.0 < level;
                    let first_below = below[0];
                    if centre_below == first_below {
                        // Corners 0 and 2 connect: cut off corners 1 and 3.
                        segments.push((edges[0], edges[1]));
                        segments.push((edges[2], edges[3]));
                    } else {
                        segments.push((edges[3], edges[0]));
                        segments.push((edges[1], edges[2]));
                    }
                }
                _ => {}
            }
        }
    }
    join(segments)
        .into_iter()
        .map(|line| line.into_iter().map(point).collect())
        .collect()
}

/// Segments sharing an edge crossing joined into lines, each a list of crossings.
fn join(segments: Vec<(EdgeKey, EdgeKey)>) -> Vec<Vec<EdgeKey>> {
    let mut at: HashMap<EdgeKey, Vec<usize>> = HashMap::new();
    for (s, (a, b)) in segments.iter().enumerate() {
        at.entry(*a).or_default().push(s);
        at.entry(*b).or_default().push(s);
    }
    let mut used = vec![false; segments.len()];
    let mut lines = Vec::new();
    // Open lines start at a crossing with one segment (the grid's boundary); closed ones anywhere.
    let mut starts: Vec<usize> = (0..segments.len())
        .filter(|&s| {
            let (a, b) = segments[s];
            at[&a].len() == 1 || at[&b].len() == 1
        })
        .collect();
    starts.extend(0..segments.len());
    for first in starts {
        if used[first] {
            continue;
        }
        let (a, b) = segments[first];
        let start = if at[&a].len() == 1 { a } else { b };
        let mut line = vec![start];
        let mut current = first;
        let mut end = if start == a { b } else { a };
        loop {
            used[current] = true;
            line.push(end);
            let Some(&next) = at[&end].iter().find(|&&s| !used[s]) else {
                break;
            };
            let (c, d) = segments[next];
            current = next;
            end = if c == end { d } else { c };
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::contour_lines;

    fn grid(n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n)
            .map(|k| lo + (hi - lo) * k as f64 / (n - 1) as f64)
            .collect()
    }

    /// A circle's level set: one closed line whose points lie on the circle (to the linear
    /// interpolation's error of a cell), going once around it.
    #[test]
    fn a_paraboloids_contour_is_one_closed_circle() {
        let (xs, ys) = (grid(41, -2.0, 2.0), grid(41, -2.0, 2.0));
        let values: Vec<f64> = xs
            .iter()
            .flat_map(|x| ys.iter().map(move |y| x * x + y * y))
            .collect();
        let lines = contour_lines(&xs, &ys, &values, 1.0);
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(
            line.first(),
            line.last(),
            "a contour inside the grid closes"
        );
        assert!(line.len() > 40);
        for p in line {
            let r = (p[0] * p[0] + p[1] * p[1]).sqrt();
            assert!((r - 1.0).abs() < 3e-3, "{p:?} at radius {r}");
        }
        let turned: f64 = line
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0][1].atan2(w[0][0]), w[1][1].atan2(w[1][0]));
                let d = b - a;
                d - (2.0 * std::f64::consts::PI) * (d / (2.0 * std::f64::consts::PI)).round()
            })
            .sum();
        assert!((turned.abs() - 2.0 * std::f64::consts::PI).abs() < 1e-9);
    }

    /// A level set leaving the grid is an open line from boundary to boundary; two separate
    /// minima give two lines; a level nothing reaches gives none; NaN cells are skipped.
    #[test]
    fn open_lines_separate_islands_and_gaps() {
        let (xs, ys) = (grid(21, 0.0, 1.0), grid(21, 0.0, 1.0));
        let plane: Vec<f64> = xs.iter().flat_map(|x| ys.iter().map(move |_| *x)).collect();
        let lines = contour_lines(&xs, &ys, &plane, 0.55);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].iter().all(|p| (p[0] - 0.55).abs() < 1e-12));
        assert_eq!(lines[0].len(), 21);
        assert!(contour_lines(&xs, &ys, &plane, 2.0).is_empty());
        let islands: Vec<f64> = xs
            .iter()
            .flat_map(|x| {
                ys.iter().map(move |y| {
                    ((x - 0.25).powi(2) + (y - 0.5).powi(2))
                        .min((x - 0.75).powi(2) + (y - 0.5).powi(2))
                })
            })
            .collect();
        assert_eq!(contour_lines(&xs, &ys, &islands, 0.01).len(), 2);
        let mut holed = plane.clone();
        holed[10 * 21 + 10] = f64::NAN;
        let lines = contour_lines(&xs, &ys, &holed, 0.55);
        assert!(
            lines
                .iter()
                .flatten()
                .all(|p| p[0].is_finite() && p[1].is_finite())
        );
    }
}
