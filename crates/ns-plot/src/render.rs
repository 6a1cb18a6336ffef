//! Figures drawn as SVG with plotters. Text is laid out with the embedded DejaVu Sans; sizes fit
//! a slide (1200 px wide), and figures with one row per parameter grow with their rows so that
//! no label overlaps another.

use std::sync::Once;

use ns_core::{Error, Result};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{IntoSegmentedCoord, SegmentValue};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

use crate::spec::{
    ClsCurve, Contours, Correlation, Figure, Impacts, LikelihoodScan, LimitBand, Pulls,
    ToyDistributions, Yields,
};
use crate::style::{self, FONT};

/// The figure as an SVG document, with its size in pixels.
pub fn svg(figure: &Figure) -> Result<(String, (u32, u32))> {
    static FONTS: Once = Once::new();
    FONTS.call_once(|| {
        // The embedded fonts are valid TrueType: registering them cannot fail.
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
    let size = style::size_of(figure);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw(root.fill(&WHITE))?;
        match figure {
            Figure::Limit(f) => limit_band(&root, f)?,
            Figure::Cls(f) => cls_curve(&root, f)?,
            Figure::Ranking(f) => impacts(&root, f)?,
            Figure::Pulls(f) => pulls(&root, f)?,
            Figure::Correlation(f) => correlation(&root, f)?,
            Figure::Scan(f) => likelihood_scan(&root, f)?,
            Figure::Contour(f) => contours(&root, f)?,
            Figure::Yields(f) => yields(&root, f)?,
            Figure::Toys(f) => toys(&root, f)?,
        }
        draw(root.present())?;
    }
    Ok((out, size))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A drawing error as the engine's.
fn draw<T, E: std::fmt::Debug>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| Error::Computation(format!("drawing the figure: {e:?}")))
}

/// A range around `values` with a margin; a flat range is widened.
fn padded(values: impl Iterator<Item = f64>, margin: f64) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
        (l.min(v), h.max(v))
    });
    // A range too narrow for an axis's ticks (flat, or subnormal) is widened.
    let wide = hi - lo > 1e-9 * lo.abs().max(hi.abs()).max(1e-200);
    let span = if wide { hi - lo } else { lo.abs().max(1.0) };
    (lo - margin * span, hi + margin * span)
}

/// The legend box every figure draws: its series' labels at `size` points, on white, framed.
fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    size: u32,
    position: SeriesLabelPosition,
) -> Result<()> {
    draw(
        chart
            .configure_series_labels()
            .label_font((FONT, size))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(position)
            .draw(),
    )
}

fn line_legend(color: RGBColor, width: u32) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(width))
}

/// Tick labels of a logarithmic axis: 0.05, 1e-4.
fn log_label(v: &f64) -> String {
    if *v == 0.0 {
        "0".into()
    } else if (1e-3..1e4).contains(&v.abs()) {
        let text = format!("{v:.4}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.0e}")
    }
}

fn box_legend(color: RGBAColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 6), (x + 24, y + 6)], color.filled())
}

/// The expected band (±2σ, ±1σ) with its median dashed, and the observed line, over `x`: what
/// the limit-band and CLs plots share. Each value is drawn at `y(value)` (a floor on a log axis).
fn brazil<'a, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    x: &[f64],
    expected: &[Vec<f64>],
    observed: &[f64],
    y: impl Fn(f64) -> f64,
) -> Result<()> {
    let curve = |values: &[f64]| -> Vec<(f64, f64)> {
        x.iter()
            .copied()
            .zip(values.iter().map(|&v| y(v)))
            .collect()
    };
    let polygon = |low: &[f64], high: &[f64]| {
        let mut points = curve(low);
        points.extend(curve(high).into_iter().rev());
        points
    };
    for (low, high, color, label) in [
        (0, 4, style::BAND_2SIGMA, "expected ± 2σ"),
        (1, 3, style::BAND_1SIGMA, "expected ± 1σ"),
    ] {
        draw(chart.draw_series(std::iter::once(Polygon::new(
            polygon(&expected[low], &expected[high]),
            color.filled(),
        ))))?
        .label(label)
        .legend(box_legend(color.to_rgba()));
    }
    draw(chart.draw_series(DashedLineSeries::new(
        curve(&expected[2]),
        12,
        8,
        BLACK.stroke_width(2),
    )))?
    .label("expected (median)")
    .legend(|(x, y)| {
        EmptyElement::at((x, y))
            + PathElement::new(vec![(0, 0), (9, 0)], BLACK.stroke_width(2))
            + PathElement::new(vec![(15, 0), (24, 0)], BLACK.stroke_width(2))
    });
    draw(chart.draw_series(LineSeries::new(
        curve(observed),
        style::OBSERVED.stroke_width(3),
    )))?
    .label("observed")
    .legend(line_legend(style::OBSERVED, 3));
    Ok(())
}

fn limit_band(root: &Area, f: &LimitBand) -> Result<()> {
    let all = f
        .expected
        .iter()
        .flatten()
        .chain(&f.observed)
        .chain(f.theory.iter().flatten());
    let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
    let (x0, x1) = padded(f.x.iter().copied(), 0.02);
    let caption = format!("{:.0} % CL upper limits", 100.0 * f.cl);
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, (FONT, 28))
        .margin(24)
        .x_label_area_size(60)
        .y_label_area_size(90);
    let log = lo > 0.0 && hi / lo > 20.0;
    macro_rules! body {
        ($chart:expr) => {{
            let chart = &mut $chart;
            draw(
                chart
                    .configure_mesh()
                    .x_desc(f.x_label.as_str())
                    .y_desc("upper limit on μ")
                    .y_label_formatter(&|v: &f64| log_label(v))
                    .label_style((FONT, 18))
                    .axis_desc_style((FONT, 22))
                    .draw(),
            )?;
            brazil(chart, &f.x, &f.expected, &f.observed, |v| v)?;
            draw(
                chart.draw_series(
                    f.x.iter()
                        .zip(&f.observed)
                        .map(|(&x, &y)| Circle::new((x, y), 4, style::OBSERVED.filled())),
                ),
            )?;
            // μ = 1: where the limit falls below it, the signal as predicted is excluded.
            draw(chart.draw_series(DashedLineSeries::new(
                [(x0, 1.0), (x1, 1.0)],
                6,
                4,
                style::LEVEL.stroke_width(2),
            )))?
            .label("μ = 1")
            .legend(line_legend(style::LEVEL, 2));
            if let Some(theory) = &f.theory {
                draw(chart.draw_series(LineSeries::new(
                    f.x.iter().copied().zip(theory.iter().copied()),
                    style::THEORY.stroke_width(2),
                )))?
                .label("theory")
                .legend(line_legend(style::THEORY, 2));
            }
            legend(chart, 18, SeriesLabelPosition::UpperLeft)?;
        }};
    }
    if log {
        let mut chart = draw(builder.build_cartesian_2d(x0..x1, (lo * 0.7..hi * 1.5).log_scale()))?;
        body!(chart);
    } else {
        let mut chart = draw(builder.build_cartesian_2d(x0..x1, 0.0..hi * 1.15))?;
        body!(chart);
    }
    Ok(())
}

fn cls_curve(root: &Area, f: &ClsCurve) -> Result<()> {
    let smallest = f
        .expected
        .iter()
        .flatten()
        .chain(&f.observed)
        .copied()
        .filter(|&v| v > 0.0)
        .fold(1.0, f64::min)
        .max(1e-6);
    let (x0, x1) = padded(f.mu.iter().copied(), 0.0);
    let mut chart = draw(
        ChartBuilder::on(root)
            .caption("CLs against μ", (FONT, 28))
            .margin(24)
            .x_label_area_size(60)
            .y_label_area_size(90)
            .build_cartesian_2d(x0..x1, (smallest * 0.5..1.5).log_scale()),
    )?;
    draw(
        chart
            .configure_mesh()
            .x_desc("μ")
            .y_desc("CLs")
            .y_label_formatter(&log_label)
            .label_style((FONT, 18))
            .axis_desc_style((FONT, 22))
            .draw(),
    )?;
    let floor = smallest * 0.5;
    let clamp = |v: f64| v.max(floor);
    brazil(&mut chart, &f.mu, &f.expected, &f.observed, clamp)?;
    draw(chart.draw_series(LineSeries::new(
        [(x0, f.level), (x1, f.level)],
        style::LEVEL.stroke_width(2),
    )))?
    .label(format!("CLs = {}", f.level))
    .legend(line_legend(style::LEVEL, 2));
    // A limit beyond the scan (null in the result) has no crossing to mark.
    for (limit, color) in [
        (f.observed_limit, style::OBSERVED),
        (f.expected_limit, BLACK),
    ]
    .into_iter()
    .filter_map(|(limit, color)| Some((limit?, color)))
    {
        draw(chart.draw_series(LineSeries::new(
            [(limit, floor), (limit, f.level)],
            color.stroke_width(1),
        )))?;
        draw(chart.draw_series(std::iter::once(Circle::new(
            (limit, f.level),
            6,
            color.filled(),
        ))))?;
    }
    legend(&mut chart, 18, SeriesLabelPosition::LowerLeft)?;
    Ok(())
}

/// `n` rows (or columns) of a segmented axis, row `i` centred on `CenterOf(i)`.
fn segments(
    n: i32,
) -> plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordi32> {
    // A range a..b holds the segments a..=b.
    (0..(n - 1).max(1)).into_segmented()
}

/// The left label area for names of `width` characters.
fn name_area(names: impl Iterator<Item = usize>) -> u32 {
    (names.max().unwrap_or(4) as u32 * 10 + 20).clamp(80, 420)
}

fn impacts(root: &Area, f: &Impacts) -> Result<()> {
    let n = f.entries.len() as i32;
    let reach = f
        .entries
        .iter()
        .flat_map(|e| {
            [
                Some(e.postfit_up),
                Some(e.postfit_down),
                e.prefit_up,
                e.prefit_down,
            ]
        })
        .flatten()
        .map(f64::abs)
        .fold(0.0, f64::max)
        .max(1e-12)
        * 1.15;
    let row = |k: usize| SegmentValue::CenterOf(n - 1 - k as i32);
    let label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) if (0..n).contains(i) => {
            f.entries[(n - 1 - i) as usize].name.clone()
        }
        _ => String::new(),
    };
    let body = draw(root.titled(
        &format!(
            "Impact on {} (top {} of {})",
            f.poi,
            f.entries.len(),
            f.ranked
        ),
        (FONT, 26),
    ))?;
    let mut chart = draw(
        ChartBuilder::on(&body)
            .margin(20)
            .x_label_area_size(60)
            .top_x_label_area_size(60)
            .y_label_area_size(name_area(f.entries.iter().map(|e| e.name.chars().count())))
            .build_cartesian_2d(-reach..reach, segments(n)),
    )?
    .set_secondary_coord(-2.0..2.0, segments(n));
    draw(
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n as usize)
            .y_label_formatter(&label)
            .x_desc(format!("Δ{}", f.poi))
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 20))
            .draw(),
    )?;
    draw(
        chart
            .configure_secondary_axes()
            .x_desc("pull (θ̂ − θ₀)/Δθ")
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 20))
            .draw(),
    )?;
    // One bar per shift: pre-fit outlined, post-fit filled.
    let rect = |k: usize, value: f64, inset: u32, style: ShapeStyle| {
        let y = n - 1 - k as i32;
        let mut bar = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(y)),
                (value, SegmentValue::Exact(y + 1)),
            ],
            style,
        );
        // Rows apart: the bar leaves `inset` pixels above and below.
        bar.set_margin(inset, inset, 0, 0);
        bar
    };
    for (up, color, label, prefit_label) in [
        (true, style::UP, "post-fit +1σ", "pre-fit +1σ"),
        (false, style::DOWN, "post-fit −1σ", "pre-fit −1σ"),
    ] {
        draw(
            chart.draw_series(f.entries.iter().enumerate().filter_map(|(k, e)| {
                let prefit = if up { e.prefit_up } else { e.prefit_down }?;
                Some(rect(k, prefit, 3, color.stroke_width(2)))
            })),
        )?
        .label(prefit_label)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.stroke_width(2)));
        draw(
            chart.draw_series(f.entries.iter().enumerate().map(|(k, e)| {
                let value = if up { e.postfit_up } else { e.postfit_down };
                rect(k, value, 6, color.mix(0.75).filled())
            })),
        )?
        .label(label)
        .legend(box_legend(color.mix(0.75)));
    }
    draw(
        chart.draw_secondary_series(f.entries.iter().enumerate().filter_map(|(k, e)| {
            let (pull, constraint) = (e.pull?, e.constraint?);
            Some(PathElement::new(
                vec![(pull - constraint, row(k)), (pull + constraint, row(k))],
                BLACK.stroke_width(2),
            ))
        })),
    )?;
    draw(
        chart.draw_secondary_series(
            f.entries
                .iter()
                .enumerate()
                .filter_map(|(k, e)| Some(Circle::new((e.pull?, row(k)), 5, BLACK.filled()))),
        ),
    )?
    .label("pull ± constraint")
    .legend(|(x, y)| Circle::new((x + 12, y), 5, BLACK.filled()));
    legend(&mut chart, 16, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

fn pulls(root: &Area, f: &Pulls) -> Result<()> {
    // Rows top to bottom: a header per group, then its parameters.
    let mut rows: Vec<(String, Option<(f64, f64)>)> = Vec::new();
    for g in &f.groups {
        rows.push((format!("[{}]", g.kind), None));
        rows.extend(
            g.entries
                .iter()
                .map(|e| (e.name.clone(), Some((e.pull, e.constraint)))),
        );
    }
    let n = rows.len() as i32;
    let reach = rows
        .iter()
        .filter_map(|r| r.1.map(|(p, c)| p.abs() + c))
        .fold(2.5, f64::max)
        .min(10.0)
        * 1.1;
    let at = |k: usize| SegmentValue::CenterOf(n - 1 - k as i32);
    let label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) if (0..n).contains(i) => rows[(n - 1 - i) as usize].0.clone(),
        _ => String::new(),
    };
    let mut chart = draw(
        ChartBuilder::on(root)
            .caption("Pulls of the constrained parameters", (FONT, 26))
            .margin(20)
            .x_label_area_size(60)
            .y_label_area_size(name_area(rows.iter().map(|r| r.0.chars().count())))
            .build_cartesian_2d(-reach..reach, segments(n)),
    )?;
    draw(
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n as usize)
            .y_label_formatter(&label)
            .x_desc("(θ̂ − θ₀)/Δθ")
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 20))
            .draw(),
    )?;
    for (width, color) in [(2.0, style::BAND_2SIGMA), (1.0, style::BAND_1SIGMA)] {
        draw(chart.draw_series(std::iter::once(Rectangle::new(
            [
                (-width, SegmentValue::Exact(0)),
                (width, SegmentValue::Exact(n)),
            ],
            color.mix(0.5).filled(),
        ))))?;
    }
    draw(
        chart.draw_series(rows.iter().enumerate().filter_map(|(k, r)| {
            let (pull, constraint) = r.1?;
            Some(PathElement::new(
                vec![(pull - constraint, at(k)), (pull + constraint, at(k))],
                BLACK.stroke_width(2),
            ))
        })),
    )?;
    draw(
        chart.draw_series(
            rows.iter()
                .enumerate()
                .filter_map(|(k, r)| Some(Circle::new((r.1?.0, at(k)), 5, BLACK.filled()))),
        ),
    )?;
    Ok(())
}

fn correlation(root: &Area, f: &Correlation) -> Result<()> {
    let n = f.names.len() as i32;
    let label_x = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) if (0..n).contains(i) => f.names[*i as usize].clone(),
        _ => String::new(),
    };
    let label_y = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) if (0..n).contains(i) => f.names[(n - 1 - i) as usize].clone(),
        _ => String::new(),
    };
    let names = name_area(f.names.iter().map(|s| s.chars().count()));
    let mut chart = draw(
        ChartBuilder::on(root)
            .caption(
                format!(
                    "Correlations (|ρ| ≥ {} with another parameter: {} of {})",
                    f.threshold,
                    f.names.len(),
                    f.total
                ),
                (FONT, 24),
            )
            .margin(20)
            .x_label_area_size(names)
            .y_label_area_size(names)
            .build_cartesian_2d(segments(n), segments(n)),
    )?;
    draw(
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(n as usize)
            .y_labels(n as usize)
            .x_label_formatter(&label_x)
            .y_label_formatter(&label_y)
            .x_label_style((FONT, 14).into_font().transform(FontTransform::Rotate90))
            .label_style((FONT, 14))
            .draw(),
    )?;
    let cells = (0..n).flat_map(|i| (0..n).map(move |j| (i, j)));
    draw(chart.draw_series(cells.clone().map(|(i, j)| {
        let rho = f.matrix[i as usize][j as usize];
        let y = n - 1 - i;
        Rectangle::new(
            [
                (SegmentValue::Exact(j), SegmentValue::Exact(y)),
                (SegmentValue::Exact(j + 1), SegmentValue::Exact(y + 1)),
            ],
            style::diverging(rho).filled(),
        )
    })))?;
    if n <= 25 {
        draw(chart.draw_series(cells.map(|(i, j)| {
            let rho = f.matrix[i as usize][j as usize];
            let color = if rho.abs() > 0.6 { WHITE } else { BLACK };
            Text::new(
                format!("{rho:.2}"),
                (SegmentValue::CenterOf(j), SegmentValue::CenterOf(n - 1 - i)),
                (FONT, 13)
                    .into_font()
                    .color(&color)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            )
        })))?;
    }
    Ok(())
}

fn likelihood_scan(root: &Area, f: &LikelihoodScan) -> Result<()> {
    let (x0, x1) = padded(f.values.iter().copied(), 0.0);
    let top = f.delta.iter().copied().fold(4.5, f64::max) * 1.08;
    let mut chart = draw(
        ChartBuilder::on(root)
            .caption(format!("Profile likelihood of {}", f.parameter), (FONT, 28))
            .margin(24)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, 0.0..top),
    )?;
    draw(
        chart
            .configure_mesh()
            .x_desc(f.parameter.as_str())
            .y_desc("Δ(2 ln L) = −2 Δ ln L")
            .label_style((FONT, 18))
            .axis_desc_style((FONT, 22))
            .draw(),
    )?;
    for c in &f.crossings {
        draw(chart.draw_series(LineSeries::new(
            [(x0, c.level), (x1, c.level)],
            style::LEVEL.stroke_width(1),
        )))?;
        for x in [c.low, c.high].into_iter().flatten() {
            draw(chart.draw_series(LineSeries::new(
                [(x, 0.0), (x, c.level)],
                style::LEVEL.stroke_width(1),
            )))?;
        }
    }
    draw(chart.draw_series(LineSeries::new(
        f.values.iter().copied().zip(f.delta.iter().copied()),
        style::OBSERVED.stroke_width(3),
    )))?
    .label("profile likelihood")
    .legend(line_legend(style::OBSERVED, 3));
    draw(
        chart.draw_series(
            f.values
                .iter()
                .zip(&f.delta)
                .map(|(&x, &y)| Circle::new((x, y), 4, style::OBSERVED.filled())),
        ),
    )?;
    for c in &f.crossings {
        let text = format!(
            "{}σ: [{}, {}]",
            c.level.sqrt(),
            c.low.map_or("—".into(), |v| format!("{v:.4}")),
            c.high.map_or("—".into(), |v| format!("{v:.4}"))
        );
        draw(chart.draw_series(std::iter::once(EmptyElement::at((x0, c.level)))))?
            .label(text)
            .legend(line_legend(style::LEVEL, 1));
    }
    legend(&mut chart, 18, SeriesLabelPosition::UpperMiddle)?;
    Ok(())
}

fn contours(root: &Area, f: &Contours) -> Result<()> {
    let colors = [style::UP, style::DOWN, style::BAND_1SIGMA, style::THEORY];
    let mut chart = draw(
        ChartBuilder::on(root)
            .caption(
                format!("Profile likelihood of {} and {}", f.x_label, f.y_label),
                (FONT, 28),
            )
            .margin(24)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .build_cartesian_2d(f.x_range[0]..f.x_range[1], f.y_range[0]..f.y_range[1]),
    )?;
    draw(
        chart
            .configure_mesh()
            .x_desc(f.x_label.as_str())
            .y_desc(f.y_label.as_str())
            .label_style((FONT, 18))
            .axis_desc_style((FONT, 22))
            .draw(),
    )?;
    for (k, level) in f.levels.iter().enumerate() {
        let color = colors[k % colors.len()];
        for line in &level.lines {
            draw(chart.draw_series(LineSeries::new(
                line.iter().map(|p| (p[0], p[1])),
                color.stroke_width(3),
            )))?;
        }
        draw(chart.draw_series(std::iter::once(EmptyElement::at((f.best[0], f.best[1])))))?
            .label(format!(
                "{:.2}% CL (Δ(2 ln L) = {:.2})",
                100.0 * level.cl,
                level.delta_twice_nll
            ))
            .legend(line_legend(color, 3));
    }
    draw(chart.draw_series(std::iter::once(Cross::new(
        (f.best[0], f.best[1]),
        8,
        style::OBSERVED.stroke_width(3),
    ))))?
    .label("lowest grid point")
    .legend(|(x, y)| Cross::new((x + 12, y), 6, style::OBSERVED.stroke_width(2)));
    legend(&mut chart, 18, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

fn yields(root: &Area, f: &Yields) -> Result<()> {
    let (title, body) = root.split_vertically(50);
    draw(title.titled(
        &format!(
            "{} yields",
            if f.stage == "prefit" {
                "Pre-fit"
            } else {
                "Post-fit"
            }
        ),
        (FONT, 28),
    ))?;
    let panels = body.split_evenly((1, f.channels.len()));
    let mut names: Vec<&String> = Vec::new();
    for (name, _) in f.channels.iter().flat_map(|c| &c.samples) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    for (panel, c) in panels.iter().zip(&f.channels) {
        let height = panel.dim_in_pixel().1;
        let (upper, lower) = panel.split_vertically(height * 7 / 10);
        let bins = c.total.len() as i32;
        let top = c
            .total
            .iter()
            .zip(&c.stdev)
            .map(|(t, s)| t + s)
            .chain(c.observed.iter().flatten().map(|&o| o + o.sqrt()))
            .fold(1e-9, f64::max)
            * 1.3;
        let mut chart = draw(
            ChartBuilder::on(&upper)
                .caption(c.channel.as_str(), (FONT, 22))
                .margin(12)
                .x_label_area_size(10)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..bins as f64, 0.0..top),
        )?;
        draw(
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .y_desc("events")
                .label_style((FONT, 15))
                .axis_desc_style((FONT, 18))
                .draw(),
        )?;
        let mut below = vec![0.0; bins as usize];
        for (name, values) in &c.samples {
            // A sample keeps its colour in every channel.
            let color = style::sample_color(names.iter().position(|n| *n == name).unwrap_or(0));
            draw(chart.draw_series(values.iter().enumerate().map(|(b, &v)| {
                let base = below[b];
                Rectangle::new(
                    [(b as f64, base), (b as f64 + 1.0, base + v)],
                    color.filled(),
                )
            })))?
            .label(name.as_str())
            .legend(box_legend(color.to_rgba()));
            for (acc, v) in below.iter_mut().zip(values) {
                *acc += v;
            }
        }
        draw(
            chart.draw_series(
                c.total
                    .iter()
                    .zip(&c.stdev)
                    .enumerate()
                    .map(|(b, (&t, &s))| {
                        Rectangle::new(
                            [(b as f64, t - s), (b as f64 + 1.0, t + s)],
                            style::UNCERTAINTY.filled(),
                        )
                    }),
            ),
        )?
        .label("uncertainty")
        .legend(box_legend(style::UNCERTAINTY));
        if let Some(observed) = &c.observed {
            draw(
                chart.draw_series(observed.iter().enumerate().map(|(b, &o)| {
                    PathElement::new(
                        vec![
                            (b as f64 + 0.5, (o - o.sqrt()).max(0.0)),
                            (b as f64 + 0.5, o + o.sqrt()),
                        ],
                        BLACK.stroke_width(2),
                    )
                })),
            )?;
            draw(
                chart.draw_series(
                    observed
                        .iter()
                        .enumerate()
                        .map(|(b, &o)| Circle::new((b as f64 + 0.5, o), 5, BLACK.filled())),
                ),
            )?
            .label("data")
            .legend(|(x, y)| Circle::new((x + 12, y), 5, BLACK.filled()));
        }
        legend(&mut chart, 15, SeriesLabelPosition::UpperRight)?;
        // The ratio panel: data over the prediction, and the relative uncertainty.
        let mut ratio = draw(
            ChartBuilder::on(&lower)
                .margin(12)
                .x_label_area_size(50)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..bins as f64, 0.5..1.5),
        )?;
        draw(
            ratio
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("bin")
                .y_desc("data / pred.")
                .label_style((FONT, 15))
                .axis_desc_style((FONT, 18))
                .draw(),
        )?;
        draw(
            ratio.draw_series(
                c.total
                    .iter()
                    .zip(&c.stdev)
                    .enumerate()
                    .map(|(b, (&t, &s))| {
                        let r = if t > 0.0 { s / t } else { 0.0 };
                        Rectangle::new(
                            [(b as f64, 1.0 - r), (b as f64 + 1.0, 1.0 + r)],
                            style::UNCERTAINTY.filled(),
                        )
                    }),
            ),
        )?;
        draw(ratio.draw_series(LineSeries::new(
            [(0.0, 1.0), (bins as f64, 1.0)],
            BLACK.stroke_width(1),
        )))?;
        if let Some(observed) = &c.observed {
            let points: Vec<(f64, f64, f64)> = observed
                .iter()
                .zip(&c.total)
                .enumerate()
                .filter(|(_, (_, t))| **t > 0.0)
                .map(|(b, (&o, &t))| (b as f64 + 0.5, o / t, o.sqrt() / t))
                .collect();
            draw(ratio.draw_series(points.iter().map(|&(x, r, e)| {
                PathElement::new(
                    vec![(x, (r - e).max(0.5)), (x, (r + e).min(1.5))],
                    BLACK.stroke_width(2),
                )
            })))?;
            draw(
                ratio.draw_series(
                    points
                        .iter()
                        .filter(|p| (0.5..=1.5).contains(&p.1))
                        .map(|&(x, r, _)| Circle::new((x, r), 5, BLACK.filled())),
                ),
            )?;
        }
    }
    Ok(())
}

fn toys(root: &Area, f: &ToyDistributions) -> Result<()> {
    // The range of the toys' densities (the asymptotic tails are cut there).
    let positive: Vec<f64> = f
        .signal_plus_background
        .iter()
        .chain(&f.background_only)
        .copied()
        .filter(|&d| d > 0.0)
        .collect();
    let (lo, hi) = positive
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &d| (l.min(d), h.max(d)));
    let (lo, hi) = if positive.is_empty() {
        (1e-3, 1.0)
    } else {
        (lo * 0.3, hi * 3.0)
    };
    let x1 = *f.edges.last().expect("bins have edges");
    let stat = match f.test_stat.as_str() {
        "qtilde" => "q̃μ",
        "q" => "qμ",
        "q0" => "q0",
        other => other,
    };
    let mut chart = draw(
        ChartBuilder::on(root)
            .caption(
                format!(
                    "Toy distributions of {stat} at μ = {} ({} + {} toys)",
                    f.mu, f.n_toys[0], f.n_toys[1]
                ),
                (FONT, 26),
            )
            .margin(24)
            .x_label_area_size(60)
            .y_label_area_size(90)
            .build_cartesian_2d(0.0..x1, (lo..hi).log_scale()),
    )?;
    draw(
        chart
            .configure_mesh()
            .x_desc(stat)
            .y_desc("density")
            .y_label_formatter(&log_label)
            .label_style((FONT, 18))
            .axis_desc_style((FONT, 22))
            .draw(),
    )?;
    let (null_name, alt_name) = if f.test_stat == "q0" {
        ("background only (μ = 0)", "signal (μ = 1)")
    } else {
        ("signal + background", "background only")
    };
    for (values, color, name) in [
        (&f.signal_plus_background, style::UP, null_name),
        (&f.background_only, style::DOWN, alt_name),
    ] {
        draw(
            chart.draw_series(values.iter().enumerate().filter(|(_, d)| **d > 0.0).map(
                |(k, &d)| {
                    Rectangle::new(
                        [(f.edges[k], lo), (f.edges[k + 1], d)],
                        color.mix(0.2).filled(),
                    )
                },
            )),
        )?
        .label(format!("toys, {name}"))
        .legend(box_legend(color.mix(0.5)));
        // The histogram's outline, steps at the bin edges.
        let steps: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .flat_map(|(k, &d)| {
                let d = d.max(lo);
                [(f.edges[k], d), (f.edges[k + 1], d)]
            })
            .collect();
        draw(chart.draw_series(LineSeries::new(steps, color.stroke_width(2))))?;
    }
    if let Some(a) = &f.asymptotic {
        for (values, color, name) in [
            (&a.signal_plus_background, style::UP, null_name),
            (&a.background_only, style::DOWN, alt_name),
        ] {
            draw(
                chart.draw_series(LineSeries::new(
                    a.q.iter()
                        .copied()
                        .zip(values.iter().copied())
                        .filter(|p| p.1 > lo),
                    color.stroke_width(3),
                )),
            )?
            .label(format!("asymptotic, {name}"))
            .legend(line_legend(color, 3));
        }
    }
    draw(chart.draw_series(LineSeries::new(
        [(f.observed, lo), (f.observed, hi)],
        BLACK.stroke_width(3),
    )))?
    .label(format!("observed {stat} = {:.3}", f.observed))
    .legend(line_legend(BLACK, 3));
    legend(&mut chart, 18, SeriesLabelPosition::UpperRight)?;
    Ok(())
}
