//! Records the commit a binary was built from, so every benchmark result names it
//! (`convoy bench --json` writes it as `commit`).

use std::process::Command;

/// What a git command printed, where it ran and succeeded. GIT_OPTIONAL_LOCKS=0: `git status`
/// then leaves the index as it is, where it would write back refreshed file times.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    // Not `git describe --dirty`: it refreshes the index and writes it back, and the index
    // written while this script runs is newer than the run, so the next cargo command ran
    // this script again and rebuilt the crate (in a fresh clone's CI, 2 minutes).
    let commit = match git(&["describe", "--always", "--abbrev=12"]) {
        Some(name) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if !changes.is_empty() => format!("{name}-dirty"),
            _ => name,
        },
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=CONVOY_COMMIT={commit}");
    // A new commit moves HEAD or the branch it names; staging a change rewrites the index
    // (which `git status` reads). Outside a git checkout none exist and the value stays.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "index", "refs/heads"] {
            let p = std::path::Path::new(&dir).join(f);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
