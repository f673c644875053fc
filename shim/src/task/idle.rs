//! The shim gives back its start-up pages once idle (`[idle] trim_after_ms`,
//! `rund_sys::trim`): each Start and Delete takes a ticket, and the trim
//! runs when the last one has been quiet for that long.

use std::time::Duration;

use super::Service;

pub(crate) fn after_activity(svc: &Service) {
    let ms = svc.config().idle.trim_after_ms;
    if ms == 0 {
        return;
    }
    let quiet = svc.quiet.clone();
    let ticket = quiet.activity();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        // Inline: a blocking-pool thread would cost more than it saves.
        match quiet.trim_if_still(ticket) {
            Some(Ok(kb)) => tracing::debug!("idle: unmapped {kb} kB of clean file pages"),
            Some(Err(e)) => tracing::debug!("idle trim: {e}"),
            None => {}
        }
    });
}
