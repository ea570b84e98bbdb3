//! Records the commit a binary was built from, so every benchmark result names it
//! (`convoy bench --json` writes it as `commit`).

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=CONVOY_COMMIT={commit}");
    // A new commit moves HEAD or the branch it names; staging a change rewrites the index
    // (which `--dirty` reads). Outside a git checkout none exist and the value stays.
    let git = Command::new("git").args(["rev-parse", "--git-dir"]).output().ok().filter(|o| o.status.success());
    if let Some(dir) = git.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()) {
        for f in ["HEAD", "index", "refs/heads"] {
            let p = std::path::Path::new(&dir).join(f);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
