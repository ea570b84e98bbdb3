//! Faults during saving: a save killed half-way leaves the previous file whole, its temporary
//! file is removed by the next save in that directory, and `convoy train --checkpoint-dir`
//! killed with SIGKILL at random moments always leaves a checkpoint that loads and resumes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use convoy::model::write_atomic;

mod common;
use common::{convoy, convoy_exe, tmp};

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.contains(".tmp-")).collect()
}

/// The epoch a checkpoint's training state records.
fn saved_epoch(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let training: serde_json::Value = serde_json::from_str(header["__metadata__"]["training"].as_str().unwrap()).unwrap();
    training["epoch"].as_u64().unwrap()
}

#[test]
fn the_next_save_removes_the_temporary_files_of_killed_saves() {
    let dir = tmp("stale");
    // A process that has exited stands for a killed save; a running one for a save in
    // progress, whose file must stay.
    let mut done = Command::new("true").spawn().unwrap();
    let dead = done.id();
    done.wait().unwrap();
    let mut running = Command::new("sleep").arg("30").spawn().unwrap();
    let stale = [format!(".m.safetensors.tmp-{dead}"), format!(".checkpoint.safetensors.tmp-{dead}")];
    let live = format!(".other.safetensors.tmp-{}", running.id());
    for f in stale.iter().chain([&live]) {
        std::fs::write(dir.join(f), b"half a model").unwrap();
    }
    // Not ours: a name without a process id, and a file of the user's.
    for f in [".notes.tmp-draft", "m.safetensors.tmp-1"] {
        std::fs::write(dir.join(f), b"keep").unwrap();
    }
    write_atomic(&dir.join("m.safetensors"), b"whole").unwrap();
    let _ = running.kill();
    let _ = running.wait();
    let mut left = temporaries(&dir);
    left.sort();
    assert_eq!(left, [".notes.tmp-draft", live.as_str(), "m.safetensors.tmp-1"]);
    assert_eq!(std::fs::read(dir.join("m.safetensors")).unwrap(), b"whole");
}

/// SplitMix64, for the kill moments.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn sigkill_during_checkpointed_training_leaves_a_checkpoint_that_loads_and_resumes() {
    let dir = tmp("kill");
    let ck = dir.join("checkpoint.safetensors");
    let dir_arg = dir.to_str().unwrap();
    // Tiny epochs, so that saves are frequent and a kill often lands in or near one.
    let data = ["--data", "synthetic:64,16", "--image-size", "6", "--model", "mlp", "--batch-size", "32", "--devices", "software", "--json"];
    let mut seed = 19;
    let mut last_epoch = 0;
    // Round 0 is killed while starting (loading, compiling); the others a random moment
    // after their run's first save, when saves come every few hundred milliseconds.
    for round in 0..4 {
        let mut args = vec!["train", "--epochs", "100000", "--checkpoint-dir", dir_arg, "--resume"];
        args.extend_from_slice(&data);
        let spawned = std::time::SystemTime::now();
        let mut child = Command::new(convoy_exe()).args(&args).env("XDG_RUNTIME_DIR", std::env::temp_dir()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let saved_since_spawn = || std::fs::metadata(&ck).and_then(|m| m.modified()).is_ok_and(|t| t > spawned);
        let start = Instant::now();
        if round > 0 {
            while !saved_since_spawn() {
                assert!(start.elapsed() < Duration::from_secs(120), "round {round}: no checkpoint after 120 s");
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("round {round}: training ended by itself: {status}");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        std::thread::sleep(Duration::from_millis(next(&mut seed) % if round == 0 { 1000 } else { 800 }));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if !ck.exists() {
            assert_eq!(round, 0, "round {round}: the checkpoint is gone");
            continue;
        }
        let epoch = saved_epoch(&ck);
        assert!(epoch >= last_epoch.max(1), "round {round}: the checkpoint went from epoch {last_epoch} to {epoch}");
        last_epoch = epoch;
        let out = convoy(&["evaluate", "--load", ck.to_str().unwrap(), "--data", "synthetic:64,16", "--devices", "software", "--json"]);
        assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Resuming trains exactly one more epoch, and its saves leave no temporary file behind.
    let target = (last_epoch + 1).to_string();
    let mut args = vec!["train", "--epochs", target.as_str(), "--checkpoint-dir", dir_arg, "--resume"];
    args.extend_from_slice(&data);
    let out = convoy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(v["epochs"], last_epoch + 1, "{v}");
    assert_eq!(v["devices"][0]["samples"], 64, "the resumed run trains one more epoch only: {v}");
    assert_eq!(saved_epoch(&ck), last_epoch + 1);
    assert!(temporaries(&dir).is_empty(), "{:?}", temporaries(&dir));
}
