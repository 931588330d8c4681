//! PNG plots of the curves (plotters, bitmap backend; text drawn with a TrueType font from the
//! system, DejaVu Sans on Debian). x is logarithmic everywhere (every curve spans orders of
//! magnitude); y is logarithmic for latency, linear for rates.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;

use crate::curves::Curve;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a sans-serif font once; an error names where fonts were looked for.
fn font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = FONT_PATHS
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| {
                format!(
                    "no TrueType font found (looked for {}); install fonts-dejavu-core",
                    FONT_PATHS.join(", ")
                )
            })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "the font could not be read".to_string())
    })
    .clone()
}

/// One line: a series' metric, as (x, y) points.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    primary: bool,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

fn lines(curve: &Curve) -> Vec<Line> {
    let mut series: Vec<&str> = Vec::new();
    for r in &curve.rows {
        if !series.contains(&r.series.as_str()) {
            series.push(&r.series);
        }
    }
    let mut out = Vec::new();
    for (i, s) in series.iter().enumerate() {
        for (j, metric) in curve.plotted.iter().enumerate() {
            let points: Vec<(f64, f64)> = curve
                .rows
                .iter()
                .filter(|r| r.series == *s)
                .filter_map(|r| Some((r.x, r.metric(metric)?)))
                .filter(|(_, y)| y.is_finite() && *y > 0.0)
                .collect();
            let label = if curve.plotted.len() > 1 {
                format!("{s} ({metric})")
            } else {
                (*s).to_string()
            };
            out.push(Line {
                label,
                points,
                color: COLORS[i % COLORS.len()],
                primary: j == 0,
            });
        }
    }
    out
}

/// Draws `curve` into `path` (PNG, 960×600).
pub fn draw(curve: &Curve, path: &Path) -> Result<(), String> {
    font()?;
    let lines = lines(curve);
    let all: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|l| l.points.iter().copied())
        .collect();
    if all.is_empty() {
        return Err("nothing to plot".to_string());
    }
    let (x0, x1) = bounds(all.iter().map(|p| p.0));
    let (y0, y1) = bounds(all.iter().map(|p| p.1));
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let latency = curve.y_label.contains("ms");
    let x = (x0 / 1.3..x1 * 1.3).log_scale();
    if latency {
        chart(&root, curve, &lines, x, (y0 / 1.5..y1 * 1.5).log_scale())?;
    } else {
        chart(&root, curve, &lines, x, 0.0..y1 * 1.15)?;
    }
    root.present().map_err(|e| e.to_string())
}

fn bounds(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

fn chart<X, Y>(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    curve: &Curve,
    lines: &[Line],
    x: X,
    y: Y,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(&curve.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    let fmt = curve.x_format;
    chart
        .configure_mesh()
        .x_desc(curve.x_label)
        .y_desc(curve.y_label)
        .x_label_formatter(&|v| fmt(*v))
        .y_label_formatter(&|v| crate::curves::format_count(*v))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    for l in lines {
        let color = l.color;
        let style = if l.primary {
            color.stroke_width(2)
        } else {
            color.mix(0.55).stroke_width(1)
        };
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), style))
            .map_err(|e| e.to_string())?
            .label(&l.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
        if l.primary {
            chart
                .draw_series(l.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        } else {
            chart
                .draw_series(l.points.iter().map(|p| Cross::new(*p, 3, color.mix(0.7))))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}
