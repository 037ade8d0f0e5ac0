//! A [`Distribution`] drawn as an SVG picture: a row per phase in the order
//! a VM goes through them, on one axis of seconds, so the long phases stand
//! out as long; each row a whisker from min to max, a box from the median
//! to p90 and a bold tick at the median, with the figures beside it (a
//! short phase stays readable as a number). The totals come last, apart.
//! Phases no VM has are left out and named below. A pure function: no
//! fonts, scripts or links, so any browser or `rsvg-convert` shows it.

use super::{Distribution, Phase, PhaseStats};
use std::fmt::Write as _;

const WIDTH: f64 = 1040.0;
const LABEL_RIGHT: f64 = 250.0;
const PLOT_LEFT: f64 = 266.0;
const PLOT_RIGHT: f64 = 706.0;
/// Right edges of the figures' columns: min, median, p90, max, n.
const COLUMNS: [f64; 5] = [775.0, 845.0, 910.0, 975.0, 1016.0];
const TOP: f64 = 96.0;
const ROW: f64 = 30.0;
/// The space between the phases and the totals.
const GAP: f64 = 14.0;

/// The picture of `d`; `answers` is how many answers it was made from (the
/// subtitle says how many carried no timeline).
pub fn svg(d: &Distribution, answers: usize) -> String {
    let rows: Vec<&PhaseStats> = d.phases.iter().filter(|s| s.count > 0).collect();
    let missing: Vec<&str> = d
        .phases
        .iter()
        .filter(|s| s.count == 0)
        .map(|s| s.phase.label())
        .collect();
    let top = rows
        .iter()
        .filter_map(|s| s.max_secs)
        .fold(0.0_f64, f64::max);
    let (step, end) = axis(top);
    let x = |secs: f64| PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) * (secs / end);
    let totals_from = rows.iter().position(|s| s.phase.is_total());
    let y_of = |i: usize| {
        let gap = if totals_from.is_some_and(|t| i >= t) {
            GAP
        } else {
            0.0
        };
        TOP + i as f64 * ROW + gap
    };
    let bottom = y_of(rows.len().max(1)) + 4.0;
    let height = bottom + 96.0;

    let mut s = String::with_capacity(16 * 1024);
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="24" y="34" font-size="20" font-weight="bold" fill="#1f2430">Preparation time per phase</text>
<text x="24" y="58" fill="#5c6370">{} VM{} ({} answer{}, {} without a timeline) · seconds · whisker: min to max · box: median to p90</text>
"##,
        d.timelines,
        plural(d.timelines),
        answers,
        plural(answers),
        answers.saturating_sub(d.timelines),
    );
    // The figures' header.
    for (label, right) in ["min", "median", "p90", "max", "n"].iter().zip(COLUMNS) {
        let _ = writeln!(
            s,
            r##"<text x="{right}" y="{}" text-anchor="end" font-weight="bold" fill="#5c6370">{label}</text>"##,
            TOP - 14.0
        );
    }
    // Stripes behind every other row, then the grid over them.
    for i in (0..rows.len()).step_by(2) {
        let _ = writeln!(
            s,
            r##"<rect x="16" y="{}" width="{}" height="{ROW}" fill="#f4f6f9"/>"##,
            y_of(i),
            WIDTH - 32.0
        );
    }
    let ticks = (end / step).round() as usize;
    for tick in (0..=ticks).map(|i| i as f64 * step) {
        let tx = x(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{tx:.1}" y1="{}" x2="{tx:.1}" y2="{bottom}" stroke="#dfe3ea"/>
<text x="{tx:.1}" y="{}" text-anchor="middle" fill="#5c6370">{}</text>"##,
            TOP - 6.0,
            bottom + 18.0,
            number(tick)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#5c6370">seconds</text>"##,
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        bottom + 38.0
    );
    if let Some(t) = totals_from {
        let ly = y_of(t) - GAP / 2.0;
        let _ = writeln!(
            s,
            r##"<line x1="16" y1="{ly}" x2="{}" y2="{ly}" stroke="#9aa3b2" stroke-dasharray="4 3"/>"##,
            WIDTH - 16.0
        );
    }

    for (i, st) in rows.iter().enumerate() {
        let mid = y_of(i) + ROW / 2.0;
        let color = color(st.phase);
        let (min, med, p90, max) = (
            st.min_secs.unwrap_or(0.0),
            st.median_secs.unwrap_or(0.0),
            st.p90_secs.unwrap_or(0.0),
            st.max_secs.unwrap_or(0.0),
        );
        let weight = if st.phase.is_total() {
            "bold"
        } else {
            "normal"
        };
        let _ = write!(
            s,
            r##"<g><title>{label}: {n} VM{pl}, min {a} s, median {b} s, p90 {c} s, max {d} s</title>
<text x="{LABEL_RIGHT}" y="{ty}" text-anchor="end" font-weight="{weight}" fill="#1f2430">{label}</text>
<line x1="{x0:.1}" y1="{mid}" x2="{x3:.1}" y2="{mid}" stroke="{color}" stroke-width="2"/>
<line x1="{x0:.1}" y1="{c0}" x2="{x0:.1}" y2="{c1}" stroke="{color}" stroke-width="2"/>
<line x1="{x3:.1}" y1="{c0}" x2="{x3:.1}" y2="{c1}" stroke="{color}" stroke-width="2"/>
<rect x="{x1:.1}" y="{b0}" width="{bw:.1}" height="14" rx="2" fill="{color}" fill-opacity="0.35" stroke="{color}"/>
<line x1="{x1:.1}" y1="{m0}" x2="{x1:.1}" y2="{m1}" stroke="#1f2430" stroke-width="3"/>
"##,
            label = escape(st.phase.label()),
            n = st.count,
            pl = plural(st.count),
            a = number(min),
            b = number(med),
            c = number(p90),
            d = number(max),
            ty = mid + 4.5,
            x0 = x(min),
            x1 = x(med),
            x3 = x(max),
            c0 = mid - 5.0,
            c1 = mid + 5.0,
            b0 = mid - 7.0,
            bw = (x(p90) - x(med)).max(1.5),
            m0 = mid - 10.0,
            m1 = mid + 10.0,
        );
        let figures = [
            number(min),
            number(med),
            number(p90),
            number(max),
            st.count.to_string(),
        ];
        for (value, right) in figures.iter().zip(COLUMNS) {
            let _ = writeln!(
                s,
                r##"<text x="{right}" y="{}" text-anchor="end" font-weight="{weight}" fill="#1f2430">{value}</text>"##,
                mid + 4.5
            );
        }
        s.push_str("</g>\n");
    }
    if rows.is_empty() {
        let _ = writeln!(
            s,
            r##"<text x="{PLOT_LEFT}" y="{}" fill="#5c6370">no timeline to draw</text>"##,
            TOP + ROW / 2.0
        );
    }
    legend(&mut s, bottom + 64.0, &missing);
    s.push_str("</svg>\n");
    s
}

/// The colours' key, and the phases left out.
fn legend(s: &mut String, y: f64, missing: &[&str]) {
    let mut lx = 24.0;
    for (name, phase) in [
        ("backend (Kubernetes)", Phase::Scheduled),
        ("boot", Phase::AgentStart),
        ("cloud-init", Phase::Init),
        ("setup", Phase::Setup),
        ("totals", Phase::Ready),
    ] {
        let _ = writeln!(
            s,
            r##"<rect x="{lx}" y="{}" width="12" height="12" rx="2" fill="{}" fill-opacity="0.6"/><text x="{}" y="{y}" fill="#5c6370">{name}</text>"##,
            y - 10.0,
            color(phase),
            lx + 17.0
        );
        lx += 27.0 + 7.5 * name.len() as f64;
    }
    if !missing.is_empty() {
        let _ = writeln!(
            s,
            r##"<text x="24" y="{}" fill="#8a919e">not measured in these answers: {}</text>"##,
            y + 20.0,
            escape(&missing.join(", "))
        );
    }
}

fn color(phase: Phase) -> &'static str {
    match phase {
        _ if phase.is_total() => "#c0392b",
        Phase::Scheduled | Phase::Running | Phase::KernelBoot => "#6c5ce7",
        Phase::AgentStart => "#2e86c1",
        Phase::Setup => "#e67e22",
        _ => "#27ae60",
    }
}

/// A step of 1, 2 or 5 × 10ⁿ giving at most 8 ticks up to `top`, and the
/// axis' end (a whole number of steps, at least `top`).
fn axis(top: f64) -> (f64, f64) {
    if !(top.is_finite() && top > 0.0) {
        return (1.0, 1.0);
    }
    let rough = top / 6.0;
    let pow = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|&st| top / st <= 8.0)
        .unwrap_or(10.0 * pow);
    // Less a hair: 0.35 / 0.05 is 7.000000000000001 in floats.
    (step, (top / step - 1e-9).ceil().max(1.0) * step)
}

/// Seconds as a person reads them: 3 significant figures or whole.
fn number(secs: f64) -> String {
    if secs >= 100.0 || secs == secs.trunc() {
        format!("{secs:.0}")
    } else if secs >= 10.0 {
        format!("{secs:.1}")
    } else {
        format!("{secs:.2}")
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_end_on_a_round_step() {
        assert_eq!(axis(71.6), (10.0, 80.0));
        assert_eq!(axis(300.0), (50.0, 300.0));
        let (step, end) = axis(0.35);
        assert!(
            (step - 0.05).abs() < 1e-12 && (end - 0.35).abs() < 1e-12,
            "{step} {end}"
        );
        assert_eq!(axis(0.0), (1.0, 1.0));
        assert_eq!(axis(f64::NAN), (1.0, 1.0));
    }

    #[test]
    fn numbers_keep_three_figures() {
        assert_eq!(number(150.0), "150");
        assert_eq!(number(287.6), "288");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(0.5), "0.50");
        assert_eq!(number(3.0), "3");
    }
}
