//! An optional record of every pipeline variant a process builds, for the translation test
//! (tests/translate.rs): which override constants the code actually picks, taken from the
//! runs that pick them (the kernel sweeps, the models), not guessed from the WGSL.
//!
//! Set `CONVOY_PIPELINE_LOG` to a directory: each process appends one JSON line per new
//! variant of a built-in shader to `pipelines-<pid>.jsonl` there. Unset, nothing is written.

use std::io::Write;
use std::sync::{LazyLock, Mutex};

use crate::kernels::{Shader, ALL_SHADERS};

/// The environment variable naming the log directory.
pub const ENV: &str = "CONVOY_PIPELINE_LOG";

static FILE: LazyLock<Option<Mutex<std::fs::File>>> = LazyLock::new(|| {
    let dir = std::env::var_os(ENV)?;
    let path = std::path::Path::new(&dir).join(format!("pipelines-{}.jsonl", std::process::id()));
    // A log that cannot be written is a test-harness problem, never the user's: skip it.
    let _ = std::fs::create_dir_all(&dir);
    std::fs::OpenOptions::new().create(true).append(true).open(path).ok().map(Mutex::new)
});

/// Records one variant of `shader` (only convoy's own: a user's shader has no file to
/// translate).
pub(crate) fn record(shader: &Shader, entry: &str, constants: &[(&str, f64)]) {
    let Some(file) = FILE.as_ref() else { return };
    if !ALL_SHADERS.iter().any(|s| std::ptr::eq(s.source, shader.source) || s.source == shader.source) {
        return;
    }
    let line = serde_json::json!({ "shader": shader.name, "entry": entry, "constants": constants });
    let _ = writeln!(file.lock().unwrap_or_else(|e| e.into_inner()), "{line}");
}
