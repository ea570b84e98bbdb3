//! An optional record of every pipeline variant a process builds, for the translation test
//! (tests/translate.rs) and the driver's statistics (benches/pipeline_stats.rs): which
//! override constants the code actually picks, taken from the runs that pick them (the
//! kernel sweeps, the models), not guessed from the WGSL.
//!
//! Set `CONVOY_PIPELINE_LOG` to a directory: each process appends one JSON line per new
//! variant of a built-in shader to `pipelines-<pid>.jsonl` there. Unset, nothing is written.
//! [`read`] reads such logs back.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use crate::kernels::{Shader, ALL_SHADERS};
use crate::{Error, Result};

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

/// One logged variant: (shader, entry point, override constants as `(name, f64 bits)` sorted
/// by name, so that equal sets compare equal).
pub type Variant = (String, String, Vec<(String, u64)>);

/// The variants of every log in `paths` (a file, or a directory whose `.jsonl` files are
/// read), de-duplicated, and how many files were read. A line that is not `record`'s
/// format is an error naming the file and the line.
pub fn read(paths: &[PathBuf]) -> Result<(BTreeSet<Variant>, usize)> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
                let file = entry.map_err(|e| Error::io(path, e))?.path();
                if file.extension().is_some_and(|x| x == "jsonl") {
                    files.push(file);
                }
            }
        } else {
            files.push(path.clone());
        }
    }
    let mut out = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?;
        for line in text.lines() {
            out.insert(parse(file, line)?);
        }
    }
    Ok((out, files.len()))
}

fn parse(file: &Path, line: &str) -> Result<Variant> {
    let bad = |why: &str| Error::format(file, format!("{why}: {line}"));
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
    let (Some(shader), Some(entry), Some(list)) = (v["shader"].as_str(), v["entry"].as_str(), v["constants"].as_array()) else {
        return Err(bad("expected shader, entry and constants"));
    };
    let mut constants = Vec::with_capacity(list.len());
    for kv in list {
        let (Some(name), Some(value)) = (kv[0].as_str(), kv[1].as_f64()) else {
            return Err(bad("a constant is not [name, number]"));
        };
        constants.push((name.to_string(), value.to_bits()));
    }
    constants.sort();
    Ok((shader.to_string(), entry.to_string(), constants))
}

#[cfg(test)]
mod tests {
    use super::read;

    /// What `record` writes reads back sorted and de-duplicated; a malformed line names its
    /// file.
    #[test]
    fn logs_read_back_sorted_and_once() {
        let dir = std::env::temp_dir().join(format!("convoy-pipeline-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = r#"{"shader":"conv2d.wgsl","entry":"gemm","constants":[["TM",8.0],["A_KIND",2.0]]}"#;
        std::fs::write(dir.join("a.jsonl"), format!("{line}\n{line}\n")).unwrap();
        std::fs::write(dir.join("b.jsonl"), format!("{line}\n")).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a log").unwrap();
        let (variants, files) = read(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(files, 2);
        let want = ("conv2d.wgsl".to_string(), "gemm".to_string(), vec![("A_KIND".to_string(), 2.0f64.to_bits()), ("TM".to_string(), 8.0f64.to_bits())]);
        assert_eq!(variants.into_iter().collect::<Vec<_>>(), vec![want]);
        std::fs::write(dir.join("b.jsonl"), r#"{"shader":"conv2d.wgsl","entry":"gemm","constants":[["TM","eight"]]}"#).unwrap();
        let e = read(std::slice::from_ref(&dir)).unwrap_err().to_string();
        assert!(e.contains("b.jsonl") && e.contains("[name, number]") && e.contains("eight"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
