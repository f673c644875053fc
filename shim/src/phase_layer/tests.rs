use std::sync::Mutex;

use tracing_subscriber::layer::SubscriberExt;

use super::*;

/// ACTIVE is process-wide: tests that set it take turns.
static TURN: Mutex<()> = Mutex::new(());

fn with_layer<R>(active: bool, f: impl FnOnce() -> R) -> R {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    set_active(active);
    let sub = tracing_subscriber::registry().with(layer());
    let r = tracing::subscriber::with_default(sub, f);
    set_active(false);
    r
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_create_becomes_one_line_with_its_steps_and_extras() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("phases.jsonl");
    with_layer(true, || {
        let root = crate::create_span!("c1");
        let _g = root.enter();
        std::thread::sleep(Duration::from_millis(2));
        crate::phase!("sandbox");
        let made = tracing::trace_span!(target: "rund::phase", "cgroup_made", measure = "wall");
        let parent = made.clone();
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                let _cpu = tracing::trace_span!(target: "rund::phase", parent: &parent, "cgroup_cpu", measure = "cpu")
                    .entered();
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_millis(3) {
                    std::hint::black_box(0u64);
                }
            })
        })
        .join()
        .unwrap();
        drop(made);
        crate::phase!("cgroup");
        tracing::trace!(target: "rund::phase", record = %path.display());
    });
    let v = lines(&path);
    assert_eq!(v.len(), 1, "{v:?}");
    let v = &v[0];
    assert_eq!(v["id"], "c1");
    let sandbox = v["phases"]["sandbox"].as_f64().unwrap();
    assert!(sandbox >= 2.0, "{v}");
    let sum = sandbox + v["phases"]["cgroup"].as_f64().unwrap();
    assert!((v["total"].as_f64().unwrap() - sum).abs() < 1e-6, "{v}");
    // The busy loop ran on another thread that entered the cpu span.
    assert!(v["extra"]["cgroup_cpu"].as_f64().unwrap() >= 1.0, "{v}");
    assert!(v["extra"]["cgroup_made"].as_f64().unwrap() >= 1.0, "{v}");
}

#[test]
fn a_figure_measured_before_the_create_is_carried_in_as_an_extra() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("phases.jsonl");
    with_layer(true, || {
        // Outside any Create: lands nowhere.
        crate::phase_extra!("cgroup_lead", Duration::from_millis(9));
        let root = crate::create_span!("c1");
        let _g = root.enter();
        crate::phase_extra!("cgroup_lead", Duration::from_micros(2500));
        crate::phase!("cgroup");
        tracing::trace!(target: "rund::phase", record = %path.display());
    });
    let v = lines(&path);
    assert_eq!(v.len(), 1, "{v:?}");
    let lead = v[0]["extra"]["cgroup_lead"].as_f64().unwrap();
    assert!((lead - 2.5).abs() < 1e-9, "{}", v[0]);
    // An extra is no step of the sequence.
    assert_eq!(v[0]["phases"].as_object().unwrap().len(), 1, "{}", v[0]);
}

#[test]
fn inactive_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("phases.jsonl");
    with_layer(false, || {
        let root = crate::create_span!("c1");
        let _g = root.enter();
        crate::phase!("sandbox");
        tracing::trace!(target: "rund::phase", record = %path.display());
    });
    assert!(!path.exists());
}

#[test]
fn concurrent_creates_append_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("phases.jsonl");
    with_layer(true, || {
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (path, dispatch) = (path.clone(), dispatch.clone());
                std::thread::spawn(move || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        for i in 0..50 {
                            let root = crate::create_span!(format!("t{t}-{i}"));
                            let _g = root.enter();
                            crate::phase!("cgroup");
                            tracing::trace!(target: "rund::phase", record = %path.display());
                        }
                    })
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    });
    let v = lines(&path);
    assert_eq!(v.len(), 400);
    assert!(v.iter().all(|l| l["phases"]["cgroup"].is_number()));
}
