//! The cluster benchmark's chart: an SVG with the exit-latency distributions per path and command
//! and the apiserver's CPU seconds per scenario and path.

use std::fmt::Write as _;

use super::paths::Path;
use super::results::Results;

/// Two shades per path (one per command), indexed by the path's discriminant.
const COLORS: [&str; 6] = [
    "#1b7837", "#5aae61", "#c51b7d", "#e9a3c9", "#2166ac", "#92c5de",
];

/// An SVG with two panels: exit-latency distributions (CDF, log time axis) per path and command,
/// and apiserver CPU seconds per scenario and path.
pub fn svg(r: &Results) -> String {
    let (w, h) = (900.0, 420.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    cdf_panel(r, &mut s);
    cpu_panel(r, &mut s);
    s.push_str("</svg>\n");
    s
}

/// Panel 1: the CDFs on a log axis from 0.1 ms to 10 s.
fn cdf_panel(r: &Results, s: &mut String) {
    let (x0, y0, pw, ph) = (50.0, 40.0, 380.0, 320.0);
    let _ = writeln!(
        s,
        "<text x=\"{x0}\" y=\"25\" font-weight=\"bold\">Request to exit status (CDF)</text>"
    );
    let _ = writeln!(
        s,
        "<rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#999\"/>"
    );
    let lx = |us: f64| x0 + pw * ((us.max(100.0).log10() - 2.0) / 5.0).clamp(0.0, 1.0);
    for (i, label) in ["0.1 ms", "1 ms", "10 ms", "100 ms", "1 s", "10 s"]
        .iter()
        .enumerate()
    {
        let x = x0 + pw * i as f64 / 5.0;
        let _ = writeln!(
            s,
            "<line x1=\"{x}\" y1=\"{y0}\" x2=\"{x}\" y2=\"{}\" stroke=\"#eee\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            y0 + ph,
            y0 + ph + 15.0
        );
    }
    for (i, l) in r.latency.iter().enumerate() {
        let n = l.exit.samples.len().max(1) as f64;
        let pts: Vec<String> = l
            .exit
            .samples
            .iter()
            .enumerate()
            .map(|(k, us)| {
                format!(
                    "{:.1},{:.1}",
                    lx(*us as f64),
                    y0 + ph - ph * (k as f64 + 1.0) / n
                )
            })
            .collect();
        let color = COLORS[(l.path as usize) * 2 + (i / Path::ALL.len()) % 2];
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            pts.join(" ")
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{:?}: {}</text>",
            x0 + 5.0,
            y0 + 15.0 + 15.0 * i as f64,
            l.path,
            xml(&l.command)
        );
    }
}

/// Panel 2: apiserver CPU per scenario and path, as bars.
fn cpu_panel(r: &Results, s: &mut String) {
    let (bx, by, bw, bh) = (500.0, 40.0, 370.0, 320.0);
    let _ = writeln!(
        s,
        "<text x=\"{bx}\" y=\"25\" font-weight=\"bold\">kube-apiserver CPU seconds during each scenario</text>"
    );
    let mut bars: Vec<(String, Path, f64)> = Vec::new();
    bars.push(("idle".into(), Path::Shim, r.idle.cpu_secs));
    for c in &r.concurrency {
        bars.push((
            format!("{} procs", c.processes),
            c.path,
            c.apiserver.cpu_secs,
        ));
    }
    for t in &r.throughput {
        bars.push((
            format!(
                "{} MiB {}",
                t.bytes >> 20,
                if t.writer.contains("head") {
                    "head"
                } else {
                    "dd"
                }
            ),
            t.path,
            t.apiserver.cpu_secs,
        ));
    }
    let max = bars.iter().map(|b| b.2).fold(0.1, f64::max);
    let slot = bh / bars.len().max(1) as f64;
    for (i, (label, path, v)) in bars.iter().enumerate() {
        let y = by + slot * i as f64;
        let len = (bw - 120.0) * v / max;
        let color = if label == "idle" {
            "#999"
        } else {
            COLORS[(*path as usize) * 2]
        };
        let tag = if label == "idle" {
            String::new()
        } else {
            format!(" {path:?}")
        };
        let _ = writeln!(
            s,
            "<text x=\"{bx}\" y=\"{:.1}\">{label}{tag}</text><rect x=\"{}\" y=\"{:.1}\" width=\"{len:.1}\" height=\"{:.1}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{v:.2}</text>",
            y + slot * 0.6,
            bx + 110.0,
            y + slot * 0.15,
            slot * 0.7,
            bx + 114.0 + len,
            y + slot * 0.6
        );
    }
}

fn xml(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
}
