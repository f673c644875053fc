//! Create's phase timing, kept out of the production types: Create marks
//! its steps with `tracing` events and spans under target [`TARGET`], and
//! this layer turns them into one JSON line per Create in `[trace]
//! phases_file` (what `make bench` reads). Off, nothing is recorded and
//! a callsite costs a filter check.
//!
//! - `create_span!(id)`: the root of one Create's timeline.
//! - `phase!("name")`: ends the step `name`, which ran since the last mark.
//! - a span with `measure = "wall"` or `"cpu"` under the root: its wall
//!   time, or the CPU time of the threads that entered it, as an extra
//!   figure beside the sequence.
//! - `phase_extra!("name", duration)`: an extra figure measured outside
//!   the Create (work begun before it, a head start's), carried in.
//! - `record = path`: appends the line to `path`.

use std::fmt::Debug;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

pub const TARGET: &str = "rund::phase";

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Timing is recorded only while a `[trace] phases_file` is configured.
pub fn set_active(on: bool) {
    ACTIVE.store(on, Ordering::Relaxed);
}

/// The root span of one Create's phases.
#[macro_export]
macro_rules! create_span {
    ($id:expr) => {
        tracing::trace_span!(target: "rund::phase", "create", id = %$id)
    };
}

/// Ends the Create phase `$name`.
#[macro_export]
macro_rules! phase {
    ($name:literal) => {
        tracing::trace!(target: "rund::phase", mark = $name)
    };
}

/// Adds the extra figure `$name` (a `Duration`) to the current Create.
#[macro_export]
macro_rules! phase_extra {
    ($name:literal, $d:expr) => {
        tracing::trace!(target: "rund::phase", extra = $name, ms = $d.as_secs_f64() * 1e3)
    };
}

/// The layer with its filter: it sees only [`TARGET`], and only when active.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    PhaseLayer.with_filter(OnlyPhases)
}

struct OnlyPhases;

impl<S> Filter<S> for OnlyPhases {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        meta.target() == TARGET && ACTIVE.load(Ordering::Relaxed)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        if meta.target() == TARGET {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }
}

struct PhaseLayer;

/// One Create: its sequence of steps and the extra figures.
struct Timeline {
    id: String,
    first: Instant,
    last: Instant,
    done: Vec<(String, Duration)>,
    extra: Vec<(String, Duration)>,
}

/// A span measured as an extra figure.
struct Clock {
    cpu: bool,
    start: Instant,
    spent: Duration,
    entered: Option<Duration>,
}

#[derive(Default)]
struct Fields {
    id: Option<String>,
    mark: Option<String>,
    record: Option<String>,
    measure: Option<String>,
    extra: Option<String>,
    ms: Option<f64>,
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "ms" {
            self.ms = Some(value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.set(field, format!("{value:?}"));
    }
}

impl Fields {
    fn set(&mut self, field: &Field, v: String) {
        match field.name() {
            "id" => self.id = Some(v),
            "mark" => self.mark = Some(v),
            "record" => self.record = Some(v),
            "measure" => self.measure = Some(v),
            "extra" => self.extra = Some(v),
            _ => {}
        }
    }
}

impl<S> Layer<S> for PhaseLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut f = Fields::default();
        attrs.record(&mut f);
        let now = Instant::now();
        let mut ext = span.extensions_mut();
        if attrs.metadata().name() == "create" {
            ext.insert(Timeline {
                id: f.id.unwrap_or_default(),
                first: now,
                last: now,
                done: Vec::new(),
                extra: Vec::new(),
            });
        } else if let Some(m) = f.measure {
            ext.insert(Clock {
                cpu: m == "cpu",
                start: now,
                spent: Duration::ZERO,
                entered: None,
            });
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(c) = ext.get_mut::<Clock>().filter(|c| c.cpu) {
            c.entered = Some(thread_cpu());
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(c) = ext.get_mut::<Clock>() {
            if let Some(t0) = c.entered.take() {
                c.spent += thread_cpu().saturating_sub(t0);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(c) = span.extensions_mut().remove::<Clock>() else {
            return;
        };
        let figure = if c.cpu { c.spent } else { c.start.elapsed() };
        let name = span.name().to_string();
        // Parents stay open while a child is open, so the root is found.
        for parent in span.scope().skip(1) {
            if let Some(t) = parent.extensions_mut().get_mut::<Timeline>() {
                t.extra.push((name, figure));
                return;
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        let mut line = None;
        for span in scope {
            let mut ext = span.extensions_mut();
            let Some(t) = ext.get_mut::<Timeline>() else {
                continue;
            };
            if let Some(name) = f.mark.take() {
                let now = Instant::now();
                t.done.push((name, now - t.last));
                t.last = now;
            }
            if let (Some(name), Some(ms)) = (f.extra.take(), f.ms) {
                let d = Duration::from_secs_f64(ms.max(0.0) / 1e3);
                t.extra.push((name, d));
            }
            line = f.record.take().map(|path| (path, t.json_line()));
            break;
        }
        // Written with no span lock held: a warning here is itself an event.
        if let Some((path, line)) = line {
            append(std::path::Path::new(&path), &line);
        }
    }
}

impl Timeline {
    /// `{"id":…,"phases":{"sandbox":ms,…},"extra":{…},"total":ms}`.
    fn json_line(&self) -> String {
        let map = |v: &[(String, Duration)]| -> serde_json::Map<String, serde_json::Value> {
            v.iter().map(|(n, d)| (n.clone(), ms(*d).into())).collect()
        };
        let mut line = serde_json::json!({
            "id": self.id,
            "phases": map(&self.done),
            "extra": map(&self.extra),
            "total": ms(self.last - self.first),
        })
        .to_string();
        line.push('\n');
        line
    }
}

/// One `write` with O_APPEND keeps lines from concurrent shims whole.
fn append(path: &std::path::Path, line: &str) {
    let res = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = res {
        tracing::warn!(path = %path.display(), "cannot append create phases: {e}");
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// CPU time of the calling thread so far.
pub fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
