//! A hand-written SVG: single-start CDFs, the concurrency curve, and the
//! per-container latency CDFs under concurrency. No plotting crate needed.

use std::fmt::Write as _;

use super::figures::runs_of;
use crate::results::Results;
use crate::runtime::RuntimeKind;
use crate::stats::Summary;

const W: f64 = 1330.0;
const H: f64 = 440.0;
const PANEL_W: f64 = 360.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 70.0;
const LEFT: [f64; 3] = [70.0, 510.0, 955.0];
const KINDS: [RuntimeKind; 3] = [RuntimeKind::Rund, RuntimeKind::Runc, RuntimeKind::Noop];

fn color(k: RuntimeKind) -> &'static str {
    match k {
        RuntimeKind::Rund => "#d95f02",
        RuntimeKind::Runc => "#1b9e77",
        RuntimeKind::Noop => "#888888",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// 1-2-5 ticks covering [lo, hi].
pub fn nice_ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater)
        || !lo.is_finite()
        || !hi.is_finite()
    {
        return vec![lo];
    }
    let raw = (hi - lo) / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).floor() as i64;
    (first..)
        .map(|i| i as f64 * step)
        .take_while(|t| *t <= hi + step * 1e-9)
        .filter(|t| *t >= lo - step * 1e-9)
        .collect()
}

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

struct Panel {
    x0: f64,
    xmax: f64,
    ymax: f64,
}

impl Panel {
    fn px(&self, x: f64) -> f64 {
        self.x0 + x / self.xmax * PANEL_W
    }
    fn py(&self, y: f64) -> f64 {
        TOP + PANEL_H - y / self.ymax * PANEL_H
    }

    fn frame(&self, s: &mut String, title: &str, xlabel: &str, ylabel: &str) {
        let (x0, y1) = (self.x0, TOP + PANEL_H);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" class="title">{}</text>"#,
            x0,
            TOP - 14.0,
            esc(title)
        );
        let _ = writeln!(
            s,
            r##"<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#444"/>"##
        );
        for t in nice_ticks(0.0, self.xmax, 6) {
            let x = self.px(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{y1}" stroke="#eee"/><text x="{x:.1}" y="{}" class="tick" text-anchor="middle">{}</text>"##,
                y1 + 16.0,
                fmt_tick(t)
            );
        }
        for t in nice_ticks(0.0, self.ymax, 5) {
            let y = self.py(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" class="tick" text-anchor="end">{}</text>"##,
                x0 + PANEL_W,
                x0 - 6.0,
                y + 4.0,
                fmt_tick(t)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" class="label" text-anchor="middle">{}</text>"#,
            x0 + PANEL_W / 2.0,
            y1 + 36.0,
            esc(xlabel)
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({},{}) rotate(-90)" class="label" text-anchor="middle">{}</text>"#,
            x0 - 45.0,
            TOP + PANEL_H / 2.0,
            esc(ylabel)
        );
    }

    fn polyline(&self, s: &mut String, pts: &[(f64, f64)], color: &str, dash: &str, markers: bool) {
        if pts.is_empty() {
            return;
        }
        let p: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", self.px(*x), self.py(*y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
            p.join(" ")
        );
        if markers {
            for (x, y) in pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"#,
                    self.px(*x),
                    self.py(*y)
                );
            }
        }
    }
}

/// Empirical CDF as a step line.
fn cdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut pts = Vec::with_capacity(2 * v.len());
    for (i, x) in v.iter().enumerate() {
        pts.push((*x, i as f64 / n));
        pts.push((*x, (i + 1) as f64 / n));
    }
    pts
}

fn max_of<'a>(it: impl Iterator<Item = &'a f64>) -> f64 {
    it.copied().fold(0.0, f64::max)
}

pub fn render(r: &Results) -> String {
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">
<style>.title{{font-size:14px;font-weight:bold}} .tick{{font-size:11px;fill:#333}} .label{{font-size:12px}} .legend{{font-size:13px}}</style>
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT0}" y="24" style="font-size:16px;font-weight:bold">rund vs runc-v2 ({mode}, {cpus} CPUs)</text>
"#,
        LEFT0 = LEFT[0],
        mode = if r.meta.quick { "quick" } else { "full" },
        cpus = r.meta.cpus
    );
    for (i, k) in KINDS.iter().enumerate() {
        let x = 480.0 + i as f64 * 100.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="12" width="16" height="4" fill="{}"/><text x="{}" y="20" class="legend">{}</text>"#,
            color(*k),
            x + 22.0,
            k.label()
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="790" y="20" class="legend" fill="#555">(dashed: smaller N)</text>"##
    );

    // 1. single start CDF
    let single: Vec<(RuntimeKind, &[f64])> = KINDS
        .iter()
        .filter_map(|k| {
            r.single_start
                .get(k.label())
                .map(|set| (*k, set.samples_ms.as_slice()))
        })
        .collect();
    let xmax = max_of(single.iter().flat_map(|(_, v)| v.iter())).max(1.0) * 1.05;
    let p = Panel {
        x0: LEFT[0],
        xmax,
        ymax: 1.0,
    };
    p.frame(
        &mut s,
        "single start (ctr run --rm /bin/true)",
        "latency (ms)",
        "fraction of runs",
    );
    for (k, v) in &single {
        p.polyline(&mut s, &cdf(v), color(*k), "", false);
    }

    // 2. concurrency curve: N = 1 is the single-start median.
    let mut curves = Vec::new();
    for k in KINDS {
        let mut pts = Vec::new();
        if let Some(m) = r
            .single_start
            .get(k.label())
            .and_then(|x| x.summary.as_ref())
        {
            pts.push((1.0, m.median / 1e3));
        }
        for &n in &r.meta.concurrency {
            let walls: Vec<f64> = runs_of(r, k, n)
                .iter()
                .filter(|x| x.failures == 0)
                .map(|x| x.wall_ms / 1e3)
                .collect();
            if let Some(sm) = Summary::of(&walls) {
                pts.push((n as f64, sm.median));
            }
        }
        curves.push((k, pts));
    }
    let xmax = r.meta.concurrency.iter().copied().max().unwrap_or(1) as f64 * 1.05;
    let ymax = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(0.0, f64::max)
        .max(0.1)
        * 1.1;
    let p = Panel {
        x0: LEFT[1],
        xmax,
        ymax,
    };
    p.frame(
        &mut s,
        "concurrent start: wall until all running",
        "containers started at once (N)",
        "wall time (s)",
    );
    for (k, pts) in &curves {
        p.polyline(&mut s, pts, color(*k), "", true);
    }

    // 3. per-container latency CDFs under concurrency
    let mut ns = r.meta.concurrency.clone();
    ns.sort_unstable();
    let lat = |k: RuntimeKind, n: usize| -> Vec<f64> {
        runs_of(r, k, n)
            .iter()
            .flat_map(|x| x.latencies_ms.iter().copied())
            .collect()
    };
    let xmax = ns
        .iter()
        .flat_map(|&n| KINDS.map(|k| max_of(lat(k, n).iter())))
        .fold(0.0, f64::max)
        .max(1.0)
        / 1e3
        * 1.05;
    let p = Panel {
        x0: LEFT[2],
        xmax,
        ymax: 1.0,
    };
    p.frame(
        &mut s,
        "per-container latency under concurrency",
        "latency (s)",
        "fraction of containers",
    );
    let largest = ns.last().copied();
    for &n in &ns {
        let dash = if Some(n) == largest { "" } else { "6,4" };
        for k in KINDS {
            let v: Vec<f64> = lat(k, n).iter().map(|x| x / 1e3).collect();
            p.polyline(&mut s, &cdf(&v), color(k), dash, false);
        }
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" class="tick" fill="#555">N = {:?} (solid: largest)</text>"##,
        LEFT[2],
        TOP + PANEL_H + 52.0,
        ns
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover() {
        let t = nice_ticks(0.0, 1.0, 5);
        assert_eq!(t.len(), 6);
        assert!((t[3] - 0.6).abs() < 1e-9 && (t[5] - 1.0).abs() < 1e-9);
        let t = nice_ticks(0.0, 230.0, 6);
        assert_eq!(t.first(), Some(&0.0));
        assert!(*t.last().unwrap() <= 230.0 && *t.last().unwrap() >= 150.0);
    }

    #[test]
    fn cdf_steps_to_one() {
        let c = cdf(&[3.0, 1.0]);
        assert_eq!(c.first(), Some(&(1.0, 0.0)));
        assert_eq!(c.last(), Some(&(3.0, 1.0)));
    }

    #[test]
    fn escapes_text() {
        assert_eq!(esc("a<b&c"), "a&lt;b&amp;c");
    }
}
