//! The undo stack of a Create or Exec pipeline. Each step that changes the
//! host registers how to undo itself; on failure the undos run in reverse
//! order before the error is answered, and if the request is dropped
//! half-way (containerd's deadline cancels it) they run in a task.

use std::future::Future;
use std::pin::Pin;

type Step = (&'static str, Pin<Box<dyn Future<Output = ()> + Send>>);

pub struct Undo {
    what: String,
    steps: Vec<Step>,
}

impl Undo {
    pub fn new(what: impl Into<String>) -> Self {
        Undo {
            what: what.into(),
            steps: Vec::new(),
        }
    }

    /// Registers the undo of the step just done.
    pub fn push(&mut self, step: &'static str, undo: impl Future<Output = ()> + Send + 'static) {
        self.steps.push((step, Box::pin(undo)));
    }

    /// The pipeline finished: nothing is undone.
    pub fn commit(mut self) {
        self.steps.clear();
    }

    /// Undoes every step, last first.
    pub async fn rollback(mut self) {
        let steps = std::mem::take(&mut self.steps);
        run(&self.what, steps).await;
    }
}

async fn run(what: &str, steps: Vec<Step>) {
    for (name, undo) in steps.into_iter().rev() {
        tracing::debug!("{what}: undo {name}");
        undo.await;
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if self.steps.is_empty() {
            return;
        }
        let steps = std::mem::take(&mut self.steps);
        let what = std::mem::take(&mut self.what);
        tracing::warn!(
            "{what}: request dropped half-way; undoing {} steps",
            steps.len()
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { run(&what, steps).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn log_step(
        log: &Arc<Mutex<Vec<&'static str>>>,
        name: &'static str,
    ) -> impl Future<Output = ()> {
        let log = log.clone();
        async move { log.lock().unwrap().push(name) }
    }

    #[tokio::test]
    async fn rollback_runs_last_first_and_commit_runs_nothing() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut u = Undo::new("t");
        u.push("a", log_step(&log, "a"));
        u.push("b", log_step(&log, "b"));
        u.rollback().await;
        assert_eq!(*log.lock().unwrap(), ["b", "a"]);
        let mut u = Undo::new("t");
        u.push("c", log_step(&log, "c"));
        u.commit();
        assert_eq!(log.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_dropped_pipeline_still_undoes() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut u = Undo::new("t");
            u.push("a", log_step(&log, "a"));
            u.push("done", async move {
                let _ = tx.send(());
            });
        }
        rx.await.unwrap();
        assert_eq!(*log.lock().unwrap(), ["a"]);
    }
}
