//! The spend plot, drawn on the server as SVG: one stacked bar per day, one colour per route, a
//! legend, and a `<title>` on each bar piece for its exact figure (a tooltip without script).
//! Nothing is fetched from anywhere; the page works without JavaScript.

use std::collections::BTreeMap;
use std::fmt::Write;

use store::DaySpend;

/// Colours for routes, in order of first appearance (distinguishable, and dark enough on white).
const PALETTE: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 50.0;

/// A "nice" step for `ticks` ticks up to `max`: 1, 2 or 5 times a power of ten.
pub fn nice_step(max: i64, ticks: i64) -> i64 {
    let raw = (max.max(1) as f64 / ticks.max(1) as f64).max(1.0);
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * power);
    step.round() as i64
}

/// The plot of `rows` over `days` (each `YYYY-MM-DD`, oldest first).
pub fn spend_svg(rows: &[DaySpend], days: &[String]) -> String {
    let mut routes: Vec<&str> = Vec::new();
    let mut by_day: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    for r in rows {
        if !routes.contains(&r.route.as_str()) {
            routes.push(&r.route);
        }
        by_day
            .entry(&r.day)
            .or_default()
            .push((&r.route, r.credits));
    }
    let colour = |route: &str| {
        let i = routes.iter().position(|r| *r == route).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    };
    let total = |day: &str| {
        by_day
            .get(day)
            .map_or(0, |v| v.iter().map(|(_, c)| c).sum())
    };
    let max = days.iter().map(|d| total(d)).max().unwrap_or(0);
    let step = nice_step(max, 5);
    let top = if max == 0 {
        step
    } else {
        (max + step - 1) / step * step
    };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y = |v: i64| TOP + plot_h - plot_h * v as f64 / top as f64;
    let slot = plot_w / days.len().max(1) as f64;
    let bar = (slot * 0.7).max(1.0);

    let mut svg = String::new();
    let label = format!(
        "Credits spent per route per day, {} to {}",
        days.first().map_or("", String::as_str),
        days.last().map_or("", String::as_str)
    );
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{}" class="plot">"#,
        escape(&label)
    );
    // Axes and ticks.
    let mut v = 0;
    while v <= top {
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11">{v}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y(v) + 4.0,
            y = y(v),
        );
        v += step;
    }
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{}" stroke="#333"/>"##,
        TOP + plot_h
    );
    for (i, day) in days.iter().enumerate() {
        let x = LEFT + slot * i as f64 + (slot - bar) / 2.0;
        let mut base = 0;
        for (route, credits) in by_day.get(day.as_str()).into_iter().flatten() {
            let (y0, y1) = (y(base), y(base + credits));
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{y1:.1}" width="{bar:.1}" height="{:.1}" fill="{}" data-route="{}" data-day="{}" data-credits="{credits}"><title>{}: {} credits on {}</title></rect>"#,
                (y0 - y1).max(0.0),
                colour(route),
                escape(route),
                escape(day),
                escape(route),
                credits,
                escape(day),
            );
            base += credits;
        }
        // A date every few bars, so that labels never overlap.
        let every = (days.len() / 10).max(1);
        if i % every == 0 {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="11">{}</text>"#,
                x + bar / 2.0,
                TOP + plot_h + 16.0,
                escape(day.get(5..).unwrap_or(day))
            );
        }
    }
    if max == 0 {
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="middle" font-size="14" fill="#666">no spend in these days</text>"##,
            LEFT + plot_w / 2.0,
            TOP + plot_h / 2.0
        );
    }
    // Legend.
    for (i, route) in routes.iter().enumerate() {
        let ly = TOP + 18.0 * i as f64;
        let _ = write!(
            svg,
            r#"<rect x="{}" y="{ly}" width="12" height="12" fill="{}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
            WIDTH - RIGHT + 16.0,
            colour(route),
            WIDTH - RIGHT + 34.0,
            ly + 11.0,
            escape(route)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Escapes text for SVG (XML) content and attributes.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(route: &str, day: &str, credits: i64) -> DaySpend {
        DaySpend {
            route: route.to_string(),
            day: day.to_string(),
            credits,
        }
    }

    fn days() -> Vec<String> {
        vec![
            "2026-11-24".into(),
            "2026-11-25".into(),
            "2026-11-26".into(),
        ]
    }

    #[test]
    fn ticks_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(0, 5), 1);
        assert_eq!(nice_step(7, 5), 2);
        assert_eq!(nice_step(23, 5), 5);
        assert_eq!(nice_step(100, 5), 20);
        assert_eq!(nice_step(4_000, 5), 1_000);
    }

    #[test]
    fn bars_stack_per_day_in_proportion_and_say_their_figures() {
        let svg = spend_svg(
            &[
                spend("a", "2026-11-24", 10),
                spend("b", "2026-11-24", 30),
                spend("a", "2026-11-26", 20),
            ],
            &days(),
        );
        let heights: Vec<f64> = svg
            .split("<rect ")
            .filter(|r| r.contains("data-route"))
            .map(|r| {
                let h = r.split("height=\"").nth(1).unwrap();
                h[..h.find('"').unwrap()].parse().unwrap()
            })
            .collect();
        assert_eq!(heights.len(), 3);
        // 10 and 30 stack to 40 on the first day; 20 is half of that on the third.
        assert!((heights[1] - 3.0 * heights[0]).abs() < 0.2, "{heights:?}");
        assert!((heights[2] - 2.0 * heights[0]).abs() < 0.2, "{heights:?}");
        assert!(svg.contains("<title>b: 30 credits on 2026-11-24</title>"));
        assert!(svg.contains(r#"data-route="a" data-day="2026-11-26" data-credits="20""#));
        assert!(!svg.contains("no spend"));
    }

    #[test]
    fn no_spend_draws_the_axes_and_says_so_and_names_are_escaped() {
        let svg = spend_svg(&[], &days());
        assert!(svg.contains("no spend in these days"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        let svg = spend_svg(&[spend("<x>", "2026-11-25", 1)], &days());
        assert!(svg.contains("&lt;x&gt;") && !svg.contains("<x>"));
    }
}
