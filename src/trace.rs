//! A Chrome trace (open it in Perfetto or chrome://tracing) of what the host did: one
//! track per replica thread plus the main loop, with spans for waiting on input, staging,
//! device compute, the gradient exchange and evaluation.
//!
//! Recording is off unless `start` was called; a span then costs one clock read and a push.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::json;

struct Event {
    name: &'static str,
    track: usize,
    start_us: f64,
    dur_us: f64,
}

struct Recorder {
    origin: Instant,
    events: Vec<Event>,
}

static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);

/// Starts recording (discarding anything recorded before).
pub fn start() {
    *RECORDER.lock().unwrap() = Some(Recorder { origin: Instant::now(), events: Vec::new() });
}

pub fn enabled() -> bool {
    RECORDER.lock().unwrap().is_some()
}

/// A span that ends when dropped. `track` 0 is the training loop, `1 + r` replica `r`.
pub struct Span {
    name: &'static str,
    track: usize,
    start: Option<Instant>,
}

pub fn span(name: &'static str, track: usize) -> Span {
    let on = RECORDER.lock().unwrap().is_some();
    Span { name, track, start: on.then(Instant::now) }
}

impl Drop for Span {
    fn drop(&mut self) {
        let Some(start) = self.start else { return };
        let end = Instant::now();
        if let Some(r) = RECORDER.lock().unwrap().as_mut() {
            let start_us = start.saturating_duration_since(r.origin).as_secs_f64() * 1e6;
            r.events.push(Event { name: self.name, track: self.track, start_us, dur_us: (end - start).as_secs_f64() * 1e6 });
        }
    }
}

/// Stops recording and writes the trace to `path` (atomically).
pub fn finish(path: &Path, track_names: &[String]) -> crate::Result<()> {
    let Some(r) = RECORDER.lock().unwrap().take() else { return Ok(()) };
    let mut events: Vec<serde_json::Value> = track_names
        .iter()
        .enumerate()
        .map(|(i, n)| json!({ "name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": { "name": n } }))
        .collect();
    events.extend(
        r.events.iter().map(|e| json!({ "name": e.name, "cat": "host", "ph": "X", "pid": 1, "tid": e.track, "ts": e.start_us, "dur": e.dur_us })),
    );
    let body = json!({ "traceEvents": events, "displayTimeUnit": "ms" });
    crate::model::write_atomic(path, body.to_string().as_bytes())
}
