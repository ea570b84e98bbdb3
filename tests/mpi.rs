//! Training across processes (`--features mpi`): `mpirun --oversubscribe -np 2` of the
//! `convoy` binary, one software replica per rank, against one process with two software
//! replicas (the same global batch split the same way), and the failure paths: a rank that
//! errs, is killed or hangs ends every rank within seconds. Needs OpenMPI's `mpirun`
//! (.ci/run installs it).
#![cfg(feature = "mpi")]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{convoy, convoy_exe, json, tmp};

/// Two ranks on two cores: the tests run one at a time, or their timings mean nothing.
static SERIAL: Mutex<()> = Mutex::new(());

/// `mpirun --oversubscribe` with `app` (`-np 2 ARGS` or MPMD `-np 1 A : -np 1 B`), allowed
/// to run as root (CI containers), killed past `limit`.
fn mpirun(app: &[&str], env: &[(&str, &str)], limit: Duration) -> (Output, Duration) {
    let mut cmd = Command::new("mpirun");
    cmd.arg("--oversubscribe").args(app);
    cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir()).env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mpirun (OpenMPI: apt-get install openmpi-bin libopenmpi-dev)");
    let out = wait_limited(child, limit);
    (out, t0.elapsed())
}

/// Waits for `child`, killing it and failing the test past `limit`: a hang is the failure
/// these tests look for, and must not hang CI.
fn wait_limited(mut child: std::process::Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?} (a hang); stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Every tensor of a safetensors file, as f32.
fn tensors(path: &Path) -> BTreeMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors().into_iter().map(|(name, t)| (name, bytemuck::pod_collect_to_vec(t.data()))).collect()
}

/// The largest difference between two models' tensors, relative to the larger magnitude of
/// each tensor, and its tensor.
fn max_difference(a: &Path, b: &Path) -> (f32, String) {
    let (a, b) = (tensors(a), tensors(b));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let mut worst = (0.0f32, String::new());
    for (name, x) in &a {
        let y = &b[name];
        let scale = x.iter().chain(y).fold(1e-6f32, |m, v| m.max(v.abs()));
        let d = x.iter().zip(y).fold(0.0f32, |m, (p, q)| m.max((p - q).abs())) / scale;
        if d > worst.0 {
            worst = (d, name.clone());
        }
    }
    worst
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn two_ranks_train_the_weights_of_one_process_with_two_replicas() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tmp("mlp");
    let (one, two) = (dir.join("one.safetensors"), dir.join("two.safetensors"));
    // 257 samples in batches of 32: the last batch has one sample, so rank 1's share of it is
    // empty and it still takes part in the exchange.
    let args = ["train", "--model", "mlp", "--data", "synthetic:257,64", "--epochs", "2", "--batch-size", "32", "--json"];
    let alone = convoy(&[&args[..], &["--devices", "software:2", "--save", one.to_str().unwrap()]].concat());
    assert!(alone.status.success(), "{}", stderr(&alone));
    let exe = convoy_exe();
    let app: Vec<&str> = [&["-np", "2", exe.to_str().unwrap()][..], &args, &["--devices", "software", "--save", two.to_str().unwrap()]].concat();
    let (ranks, _) = mpirun(&app, &[], Duration::from_secs(240));
    assert!(ranks.status.success(), "{}", stderr(&ranks));
    // Only rank 0 prints: one JSON document, which counts both ranks.
    let stdout = String::from_utf8_lossy(&ranks.stdout);
    assert_eq!(stdout.lines().filter(|l| l.starts_with('{')).count(), 1, "{stdout}");
    let (a, b) = (json(&alone), json(&ranks));
    assert_eq!((a["ranks"].as_u64(), b["ranks"].as_u64()), (Some(1), Some(2)));
    // The epoch's figures are the whole data's on rank 0, as on one process.
    for k in ["train_loss", "val_loss", "val_accuracy"] {
        let (x, y) = (a[k].as_f64().unwrap(), b[k].as_f64().unwrap());
        assert!((x - y).abs() <= 1e-4 * x.abs().max(1.0), "{k}: one process {x}, two ranks {y}");
    }
    let (d, name) = max_difference(&one, &two);
    eprintln!("mlp, 2 epochs, 2 ranks against 2 replicas: max relative weight difference {d:.2e} ({name})");
    assert!(d <= 1e-4, "{name} differs by {d:.2e} of its largest weight");
}

#[test]
fn with_batchnorm_two_ranks_match_two_replicas_given_the_same_shares() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tmp("bn");
    let (one, two) = (dir.join("one.safetensors"), dir.join("two.safetensors"));
    // Four steps of 8 in one epoch: both runs split each batch 4 + 4 (equal replicas of one
    // adapter; equal ranks until the first epoch's speeds are measured), so each replica's
    // batch statistics are the same, and the moving statistics are averaged alike.
    let args = ["train", "--model", "resnet20", "--image-size", "8", "--data", "synthetic:32,16", "--epochs", "1", "--batch-size", "8", "--json"];
    let alone = convoy(&[&args[..], &["--devices", "software:2", "--save", one.to_str().unwrap()]].concat());
    assert!(alone.status.success(), "{}", stderr(&alone));
    let exe = convoy_exe();
    let app: Vec<&str> = [&["-np", "2", exe.to_str().unwrap()][..], &args, &["--devices", "software", "--save", two.to_str().unwrap()]].concat();
    let (ranks, _) = mpirun(&app, &[], Duration::from_secs(240));
    assert!(ranks.status.success(), "{}", stderr(&ranks));
    let (d, name) = max_difference(&one, &two);
    eprintln!("resnet20 (BatchNorm), 2 ranks against 2 replicas: max relative difference {d:.2e} ({name})");
    assert!(d <= 1e-4, "{name} differs by {d:.2e} of its largest value");
}

#[test]
fn a_rank_given_a_missing_file_ends_every_rank_with_its_error() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = convoy_exe();
    let exe = exe.to_str().unwrap();
    let args = ["train", "--model", "mlp", "--devices", "software", "--epochs", "20", "--batch-size", "32"];
    // MPMD: rank 0 has good data and would wait for rank 1 at the first broadcast forever.
    let app: Vec<&str> = [&["-np", "1", exe][..], &args, &["--data", "synthetic:256,64", ":", "-np", "1", exe], &args, &["--data", "cifar10:/no/such/dir"]].concat();
    let (out, took) = mpirun(&app, &[], Duration::from_secs(120));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.lines().any(|l| l.starts_with("error: rank 1 of 2: /no/such/dir")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    eprintln!("a rank's error ended the job in {took:.1?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
}

/// The pid of `rank`'s process among `mpirun`'s children (OpenMPI starts local ranks itself).
fn rank_pid(mpirun: u32, rank: usize) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid ...
        let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let mine = environ.split(|&b| b == 0).any(|v| v == format!("OMPI_COMM_WORLD_RANK={rank}").as_bytes());
        if ppid == Some(mpirun) && mine {
            return Some(pid);
        }
    }
    None
}

/// Starts two ranks training with checkpoints, waits for the first checkpoint, then does
/// `hurt` to rank 1; returns the job's output, how long it ran on after, and the directory.
fn hurt_rank_1(name: &str, signal: &str, env: &[(&str, &str)]) -> (Output, Duration, std::path::PathBuf) {
    let dir = tmp(name);
    let exe = convoy_exe();
    let app = [
        "--oversubscribe", "-np", "2", exe.to_str().unwrap(), "train", "--model", "mlp", "--devices", "software", "--data", "synthetic:256,64", "--epochs", "200",
        "--batch-size", "32", "--checkpoint-dir", dir.to_str().unwrap(),
    ];
    let mut cmd = Command::new("mpirun");
    cmd.args(app).env("XDG_RUNTIME_DIR", std::env::temp_dir()).env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mpirun");
    let checkpoint = dir.join("checkpoint.safetensors");
    let t0 = Instant::now();
    while !checkpoint.exists() {
        assert!(t0.elapsed() < Duration::from_secs(120), "no checkpoint after 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = rank_pid(child.id(), 1).expect("rank 1 is a child of mpirun");
    let hurt = Instant::now();
    assert!(Command::new("kill").args([signal, &pid.to_string()]).status().unwrap().success());
    let out = wait_limited(child, Duration::from_secs(60));
    (out, hurt.elapsed(), dir)
}

#[test]
fn a_killed_rank_ends_the_job_within_seconds_and_leaves_a_whole_checkpoint() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, took, dir) = hurt_rank_1("killed", "-KILL", &[]);
    assert!(!out.status.success(), "{}", stderr(&out));
    eprintln!("a killed rank ended the job in {took:.1?}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    // Written by rename: whichever epoch it holds, it reads whole.
    assert!(!tensors(&dir.join("checkpoint.safetensors")).is_empty());
}

#[test]
fn a_hung_rank_ends_the_job_through_the_watchdog() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A stopped process is alive to mpirun: only the others' watchdog can end the job.
    let (out, took, _) = hurt_rank_1("stopped", "-STOP", &[("CONVOY_MPI_TIMEOUT", "3")]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("error: rank 0: the ") && err.contains("has not completed after 3 s (CONVOY_MPI_TIMEOUT)"), "{err}");
    eprintln!("a stopped rank ended the job in {took:.1?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn a_run_resumes_on_another_number_of_ranks() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tmp("resume");
    let (straight, resumed) = (dir.join("straight.safetensors"), dir.join("resumed.safetensors"));
    let ckpt = dir.join("ckpt");
    let args = ["train", "--model", "mlp", "--data", "synthetic:256,64", "--batch-size", "32", "--json"];
    let alone = convoy(&[&args[..], &["--devices", "software:2", "--epochs", "2", "--save", straight.to_str().unwrap()]].concat());
    assert!(alone.status.success(), "{}", stderr(&alone));
    // Epoch 1 on two ranks, epoch 2 on one process.
    let exe = convoy_exe();
    let app: Vec<&str> = [&["-np", "2", exe.to_str().unwrap()][..], &args, &["--devices", "software", "--epochs", "1", "--checkpoint-dir", ckpt.to_str().unwrap()]].concat();
    let (first, _) = mpirun(&app, &[], Duration::from_secs(240));
    assert!(first.status.success(), "{}", stderr(&first));
    let rest = convoy(&[&args[..], &["--devices", "software:2", "--epochs", "2", "--checkpoint-dir", ckpt.to_str().unwrap(), "--resume", "--save", resumed.to_str().unwrap()]].concat());
    assert!(rest.status.success(), "{}", stderr(&rest));
    let (d, name) = max_difference(&straight, &resumed);
    assert!(d <= 1e-4, "{name} differs by {d:.2e}");
}
