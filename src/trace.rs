//! A Chrome trace (open it in Perfetto or chrome://tracing) of what the host did: one
//! track per replica thread plus the main loop, with spans for waiting on input, staging,
//! device compute, the gradient exchange and evaluation; and, where the adapter has
//! timestamp queries, a track per GPU with the passes it ran (`parallel::gpu_spans`).
//!
//! Recording is off unless `start` was called; a span then costs one clock read and a push.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::json;

struct Event {
    name: std::borrow::Cow<'static, str>,
    gpu: bool,
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

/// Whether a recording is running (set by [`start`]), so callers can skip building spans.
pub fn enabled() -> bool {
    RECORDER.lock().unwrap().is_some()
}

/// A span that ends when dropped. `track` 0 is the training loop, `1 + r` replica `r`.
pub struct Span {
    name: &'static str,
    track: usize,
    start: Option<Instant>,
}

/// Opens a span named `name` on `track`; it records nothing unless a recording is running.
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
            r.events.push(Event { name: self.name.into(), gpu: false, track: self.track, start_us, dur_us: (end - start).as_secs_f64() * 1e6 });
        }
    }
}

/// GPU spans of replica `r` go on track `GPU_TRACKS + r`, named "GPU r" in the trace.
const GPU_TRACKS: usize = 1000;

/// Microseconds since recording started, or `None` when not recording.
pub fn now_us() -> Option<f64> {
    RECORDER.lock().unwrap().as_ref().map(|r| r.origin.elapsed().as_secs_f64() * 1e6)
}

/// Records a span the GPU of replica `replica` ran, already converted to host time.
pub fn gpu_span(name: String, replica: usize, start_us: f64, dur_us: f64) {
    if let Some(r) = RECORDER.lock().unwrap().as_mut() {
        r.events.push(Event { name: name.into(), gpu: true, track: GPU_TRACKS + replica, start_us, dur_us });
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
    let mut gpus: Vec<usize> = r.events.iter().filter(|e| e.gpu).map(|e| e.track).collect();
    gpus.sort_unstable();
    gpus.dedup();
    events.extend(gpus.iter().map(|t| json!({ "name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": { "name": format!("GPU {}", t - GPU_TRACKS) } })));
    events.extend(r.events.iter().map(|e| {
        let cat = if e.gpu { "gpu" } else { "host" };
        json!({ "name": e.name, "cat": cat, "ph": "X", "pid": 1, "tid": e.track, "ts": e.start_us, "dur": e.dur_us })
    }));
    let body = json!({ "traceEvents": events, "displayTimeUnit": "ms" });
    crate::model::write_atomic(path, body.to_string().as_bytes())
}
