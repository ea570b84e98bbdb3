//! What the tests that run the `convoy` command line share: the binary, a scratch
//! directory, the JSON line and the shape of a clean failure. Each test binary uses a part.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `convoy` binary; `CONVOY_BIN` names another build of it (where several checkouts
/// share one target directory, `CARGO_BIN_EXE_convoy` is whichever was linked last).
pub fn convoy_exe() -> PathBuf {
    std::env::var_os("CONVOY_BIN").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_BIN_EXE_convoy").into())
}

/// Runs `convoy args` to completion.
pub fn convoy(args: &[&str]) -> Output {
    Command::new(convoy_exe()).args(args).env("XDG_RUNTIME_DIR", std::env::temp_dir()).output().unwrap()
}

/// An empty scratch directory, unique to this test binary, process and `name`.
pub fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("convoy-{}-{}-{name}", env!("CARGO_CRATE_NAME"), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The last line of standard output, parsed as JSON.
pub fn json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no output; stderr: {}", String::from_utf8_lossy(&out.stderr)));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

/// Asserts a clean failure: exit 1, no panic or abort, and one `error:` line naming each
/// of `needles`.
#[track_caller]
pub fn fails_with(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("memory allocation of"), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    for n in needles {
        assert!(errors[0].contains(n), "`{}` does not mention `{n}`", errors[0]);
    }
}
