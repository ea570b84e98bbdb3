//! The `convoy` command line: its JSON contract and its handling of bad input (one line
//! naming the cause and the file, a non-zero exit, no panic, nothing half-written).

use std::path::Path;

mod common;
use common::{convoy, fails_with, json, tmp};

const TINY: &[&str] = &["--data", "synthetic:300,60", "--image-size", "8", "--model", "mlp", "--batch-size", "32"];

#[test]
fn devices_json_lists_the_software_adapter() {
    let out = convoy(&["devices", "--json"]);
    assert!(out.status.success());
    let v = json(&out);
    let list = v["devices"].as_array().unwrap();
    assert!(list.iter().any(|d| d["type"] == "Cpu" && d["default"] == true), "{v}");
}

/// The training state a model file's metadata holds (the `training` JSON string).
fn training_state(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    serde_json::from_str(header["__metadata__"]["training"].as_str().unwrap()).unwrap()
}

#[test]
fn train_takes_label_smoothing_and_clipnorm() {
    // Keras' label_smoothing and global_clipnorm from the command line: they reach compile
    // (and so the file the run saves), and bad values are one line each, before any data.
    let dir = tmp("smoothing");
    let model = dir.join("m.safetensors");
    let mut args = vec!["train", "--epochs", "1", "--json", "--save", model.to_str().unwrap(), "--devices", "software", "--label-smoothing", "0.2", "--clipnorm", "1.5"];
    args.extend_from_slice(TINY);
    let out = convoy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(json(&out)["train_loss"].is_number());
    let t = training_state(&model);
    assert_eq!(t["label_smoothing"].as_f64(), Some(0.2f32 as f64), "{t}");
    assert_eq!((t["optimizer"]["name"].as_str(), t["optimizer"]["global_clipnorm"].as_f64()), (Some("sgd"), Some(1.5)), "{t}");
    for (flag, value) in [("--label-smoothing", "1"), ("--label-smoothing", "-0.1"), ("--label-smoothing", "nan"), ("--clipnorm", "0"), ("--clipnorm", "-2"), ("--clipnorm", "inf")] {
        let out = convoy(&["train", "--devices", "software", flag, value, "--data", "synthetic:64,8", "--image-size", "8"]);
        let want = if flag == "--clipnorm" { "a finite number > 0" } else { "[0, 1)" };
        fails_with(&out, &[flag, want]);
    }
    let help = String::from_utf8_lossy(&convoy(&["train", "--help"]).stdout).to_string();
    assert!(help.contains("--label-smoothing <F>") && help.contains("--clipnorm <F>") && help.contains("global_clipnorm"), "{help}");
}

#[test]
fn train_json_save_evaluate_and_predict() {
    let dir = tmp("train");
    let model = dir.join("m.safetensors");
    let mut args = vec!["train", "--epochs", "2", "--json", "--save", model.to_str().unwrap(), "--devices", "software"];
    args.extend_from_slice(TINY);
    let out = convoy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    for key in ["epochs", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "images_per_sec", "seconds"] {
        assert!(v[key].is_number(), "train JSON lacks {key}: {v}");
    }
    assert_eq!(v["epochs"], 2);
    // The step-time shares of the last epoch, as fractions that sum to one.
    let shares: Vec<f64> = ["input_wait", "compute", "exchange"].iter().map(|k| v[k].as_f64().unwrap_or_else(|| panic!("train JSON lacks {k}: {v}"))).collect();
    assert!(shares.iter().all(|s| (0.0..=1.0).contains(s)) && (shares.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{v}");
    let d = &v["devices"][0];
    assert!(d["name"].is_string() && d["backend"].is_string() && d["samples"] == 600, "{v}");
    // Raw results carry what produced them.
    assert!(v["commit"].as_str().is_some_and(|c| !c.is_empty()) && v["command"].as_str().is_some_and(|c| c.contains("train")), "{v}");

    let out = convoy(&["evaluate", "--load", model.to_str().unwrap(), "--data", "synthetic:300,60", "--json", "--devices", "software"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e = json(&out);
    assert_eq!(e["samples"], 60);
    assert!((e["accuracy"].as_f64().unwrap() - v["val_accuracy"].as_f64().unwrap()).abs() < 1e-9, "{e} vs {v}");

    let out = convoy(&["predict", "--load", model.to_str().unwrap(), "--data", "synthetic:300,60", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["predictions"].as_array().unwrap().len(), 60);
}

#[test]
fn two_software_replicas_train_like_one() {
    let run = |devices: &str| {
        let mut args = vec!["train", "--epochs", "2", "--json", "--devices", devices];
        args.extend_from_slice(TINY);
        let out = convoy(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json(&out)
    };
    let (one, two) = (run("software"), run("software:2"));
    assert_eq!(two["devices"].as_array().unwrap().len(), 2);
    let samples: u64 = two["devices"].as_array().unwrap().iter().map(|d| d["samples"].as_u64().unwrap()).sum();
    assert_eq!(samples, 600);
    let (a, b) = (one["val_accuracy"].as_f64().unwrap(), two["val_accuracy"].as_f64().unwrap());
    assert!((a - b).abs() <= 0.05, "one device {a}, two {b}");
}

#[test]
fn checkpoints_and_resume() {
    let dir = tmp("resume");
    let ck = dir.to_str().unwrap();
    // Train on two replicas, resume on one.
    let mut args = vec!["train", "--epochs", "1", "--json", "--checkpoint-dir", ck, "--devices", "software:2"];
    args.extend_from_slice(TINY);
    assert!(convoy(&args).status.success());
    assert!(dir.join("checkpoint.safetensors").exists());
    let mut args = vec!["train", "--epochs", "2", "--json", "--checkpoint-dir", ck, "--resume", "--devices", "software"];
    args.extend_from_slice(TINY);
    let out = convoy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["epochs"], 2);
    assert_eq!(v["devices"][0]["samples"], 300, "the resumed run trains one more epoch only: {v}");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".tmp")).collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn bad_input_fails_cleanly() {
    let dir = tmp("bad");
    // A missing directory.
    let missing = dir.join("nope");
    fails_with(&convoy(&["train", "--data", &format!("cifar10:{}", missing.display())]), &["nope"]);
    fails_with(&convoy(&["train", "--data", &format!("folder:{}", missing.display())]), &["nope"]);
    // A truncated CIFAR file.
    let cifar = dir.join("cifar");
    for f in ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"] {
        write(&cifar.join(f), &vec![1u8; 3073 * 2]);
    }
    write(&cifar.join("data_batch_3.bin"), &vec![1u8; 3073 + 100]);
    fails_with(&convoy(&["train", "--data", &format!("cifar10:{}", cifar.display())]), &["data_batch_3.bin"]);
    // A label out of range.
    let mut bad = vec![1u8; 3073 * 2];
    bad[3073] = 12;
    write(&cifar.join("data_batch_3.bin"), &bad);
    fails_with(&convoy(&["train", "--data", &format!("cifar10:{}", cifar.display())]), &["data_batch_3.bin", "12"]);
    // A corrupt image in a folder.
    let folder = dir.join("folder");
    for split in ["train", "val"] {
        for class in ["a", "b"] {
            let img = image::RgbImage::from_pixel(9, 7, image::Rgb([10, 200, 30]));
            std::fs::create_dir_all(folder.join(split).join(class)).unwrap();
            img.save(folder.join(split).join(class).join("x.png")).unwrap();
        }
    }
    write(&folder.join("train/b/broken.png"), b"\x89PNG\r\n\x1a\nnot really");
    fails_with(&convoy(&["train", "--data", &format!("folder:{}", folder.display()), "--image-size", "8", "--model", "mlp"]), &["broken.png"]);
    // An unwritable output path: nothing is trained, nothing written.
    let out = dir.join("no-such-dir").join("m.safetensors");
    fails_with(&convoy(&["train", "--save", out.to_str().unwrap(), "--data", "synthetic:64,8", "--image-size", "8"]), &["no-such-dir"]);
    // A model file that is not one.
    let fake = dir.join("fake.safetensors");
    write(&fake, b"hello");
    fails_with(&convoy(&["evaluate", "--load", fake.to_str().unwrap()]), &["fake.safetensors"]);
    fails_with(&convoy(&["evaluate", "--load", dir.join("absent.safetensors").to_str().unwrap()]), &["absent.safetensors"]);
    // Bad arguments.
    fails_with(&convoy(&["train", "--model", "vgg99", "--data", "synthetic:64,8"]), &["vgg99"]);
    fails_with(&convoy(&["train", "--devices", "99"]), &["99"]);
    fails_with(&convoy(&["train", "--data", "imagenet:/x"]), &["imagenet"]);
}

#[test]
fn pack_then_train_and_evaluate_from_the_packed_file() {
    let dir = tmp("pack");
    let folder = dir.join("folder");
    for (split, count) in [("train", 12), ("val", 4)] {
        for (class, rgb) in [("dark", [30u8, 30, 40]), ("light", [220, 210, 200])] {
            for k in 0..count {
                // Sizes and formats vary: the packer resizes each to a short side of 12.
                let img = image::RgbImage::from_fn(14 + k, 12 + 2 * k, |x, y| image::Rgb(rgb.map(|v| v.wrapping_add((x * y % 7) as u8))));
                let ext = if k % 2 == 0 { "png" } else { "jpg" };
                std::fs::create_dir_all(folder.join(split).join(class)).unwrap();
                img.save(folder.join(split).join(class).join(format!("{k}.{ext}"))).unwrap();
            }
        }
    }
    let file = dir.join("data.pack");
    let spec = format!("folder:{}", folder.display());
    let out = convoy(&["pack", "--data", &spec, "--image-size", "12", "--out", file.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = json(&out);
    assert_eq!((p["train"].as_u64(), p["val"].as_u64(), p["classes"].as_u64()), (Some(24), Some(8), Some(2)), "{p}");
    assert_eq!(p["bytes"].as_u64(), Some(std::fs::metadata(&file).unwrap().len()));

    let packed = format!("packed:{}", file.display());
    let model = dir.join("m.safetensors");
    let args = ["train", "--data", &packed, "--epochs", "1", "--model", "mlp", "--devices", "software", "--batch-size", "8"];
    let out = convoy(&[&args[..], &["--json", "--save", model.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!((v["epochs"].as_u64(), v["devices"][0]["samples"].as_u64()), (Some(1), Some(24)), "{v}");
    let out = convoy(&["evaluate", "--load", model.to_str().unwrap(), "--data", &packed, "--devices", "software", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["samples"], 8);

    // Bad input: not a folder, a truncated packed file, an output directory that does not exist.
    fails_with(&convoy(&["pack", "--data", "synthetic", "--image-size", "12", "--out", file.to_str().unwrap()]), &["folder:DIR"]);
    let cut = dir.join("cut.pack");
    std::fs::write(&cut, &std::fs::read(&file).unwrap()[..100]).unwrap();
    fails_with(&convoy(&["train", "--data", &format!("packed:{}", cut.display()), "--model", "mlp"]), &["cut.pack", "truncated"]);
    let nowhere = dir.join("no-such-dir").join("x.pack");
    fails_with(&convoy(&["pack", "--data", &spec, "--image-size", "12", "--out", nowhere.to_str().unwrap()]), &["no-such-dir"]);
    // A folder with a corrupt image leaves no packed file behind, nor a temporary one.
    write(&folder.join("val/dark/broken.jpg"), b"\xFF\xD8\xFF\xE0 not a jpeg");
    let partial = dir.join("partial.pack");
    fails_with(&convoy(&["pack", "--data", &spec, "--image-size", "12", "--out", partial.to_str().unwrap()]), &["broken.jpg"]);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.contains("partial")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_model_that_does_not_fit_the_data_is_refused() {
    let dir = tmp("mismatch");
    let model = dir.join("m.safetensors");
    let mut args = vec!["train", "--epochs", "1", "--save", model.to_str().unwrap(), "--devices", "software"];
    args.extend_from_slice(TINY);
    assert!(convoy(&args).status.success());
    // The model takes 8x8 images; these are 12x12.
    fails_with(&convoy(&["evaluate", "--load", model.to_str().unwrap(), "--data", "synthetic:20,20", "--image-size", "12"]), &["[12, 12, 3]", "[8, 8, 3]"]);
}

#[test]
fn bench_reports_scaling_and_a_kernel_profile() {
    let out = convoy(&["bench", "--model", "mlp", "--devices", "software:2", "--batch-size", "8", "--image-size", "8", "--classes", "20", "--steps", "2", "--profile", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j = json(&out);
    let scaling = j["scaling"].as_array().unwrap();
    assert_eq!(scaling.iter().map(|s| s["devices"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2]);
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing from {v}"));
    let one = f(&scaling[0], "images_per_sec");
    for s in scaling {
        // images/s is the global batch over the step time, and efficiency its ratio to
        // the one-device rate times the devices.
        let devices = f(s, "devices");
        let (ips, step) = (f(s, "images_per_sec"), f(s, "step_ms"));
        assert!(ips > 0.0 && step > 0.0, "{s}");
        assert!((ips * step / 1e3 - 8.0 * devices).abs() < 1e-6 * ips * step, "{s}");
        assert!((f(s, "efficiency") - ips / (one * devices)).abs() < 1e-9, "{s}");
    }
    assert_eq!(j["global_batch"], 16);
    // Every result names what produced it.
    assert_eq!(j["steps"], 2);
    assert!(j["command"].as_str().unwrap().ends_with("bench --model mlp --devices software:2 --batch-size 8 --image-size 8 --classes 20 --steps 2 --profile --json"), "{}", j["command"]);
    assert!(j["commit"].as_str().is_some_and(|c| !c.is_empty()), "{}", j["commit"]);
    assert_eq!(f(&j, "images_per_sec"), f(&scaling[1], "images_per_sec"));
    let devices = j["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for d in devices {
        assert_eq!(d["samples"], 2 * 8);
        let shares = f(d, "input_wait") + f(d, "compute") + f(d, "exchange");
        assert!((0.0..=1.5).contains(&shares), "time shares of {d}");
    }
    let kernels = j["profile"]["by_kernel"].as_array().unwrap();
    let dense = kernels.iter().find(|k| k["kernel"] == "dense_forward").expect("dense_forward timed");
    assert!(f(dense, "ms") > 0.0 && f(dense, "tflops") > 0.0, "{dense}");
    // The MLP's forward with --classes 20: 8 x (192 -> 256 -> 128 -> 20) multiply-adds, two flops each.
    let per_sample = 2.0 * (192.0 * 256.0 + 256.0 * 128.0 + 128.0 * 20.0);
    assert_eq!(f(dense, "flops"), 8.0 * per_sample, "{dense}");
    assert!(kernels.iter().any(|k| k["kernel"] == "optimizer"));
    // The sums by kernel span several paths and name none (--dispatches lists each one's).
    assert!(kernels.iter().all(|k| k["path"] == ""), "{kernels:?}");
    assert_eq!(j["profile"]["batch"], 8);
}

#[test]
fn trace_has_host_and_gpu_spans_per_replica() {
    let dir = tmp("trace");
    let path = dir.join("run.json");
    let mut args = vec!["train", "--epochs", "1", "--json", "--devices", "software:2", "--trace", path.to_str().unwrap()];
    args.extend_from_slice(TINY);
    let out = convoy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let tracks: Vec<&str> = events.iter().filter(|e| e["ph"] == "M").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    for want in ["training loop", "GPU 0", "GPU 1"] {
        assert!(tracks.contains(&want), "{want} missing from {tracks:?}");
    }
    let spans = |cat: &str, name: &str| events.iter().filter(|e| e["cat"] == cat && e["name"] == name).count();
    assert!(spans("host", "host all-reduce") > 0);
    // 300 samples in batches of 32: 10 steps, each with a first bucket and optimizer
    // passes per GPU; the last steps' spans may still be unread when training ends.
    assert!(spans("gpu", "forward + backward, bucket 0") >= 2 * 8, "{}", spans("gpu", "forward + backward, bucket 0"));
    let updates = events.iter().filter(|e| e["cat"] == "gpu" && e["name"].as_str().unwrap().starts_with("optimizer, bucket ")).count();
    assert!(updates >= 2 * 8, "{updates}");
    assert!(events.iter().filter(|e| e["cat"] == "gpu").all(|e| e["dur"].as_f64().unwrap() >= 0.0));
}

#[test]
fn check_holds_a_model_against_the_f64_reference_on_two_replicas() {
    let out = convoy(&["check", "--model", "convnet7", "--devices", "software:2", "--batch-size", "6", "--image-size", "9", "--steps", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j = json(&out);
    assert_eq!(j["ok"], true, "{j}");
    assert!(j["max_grad_error"].as_f64().unwrap() < 1e-4, "{j}");
    assert!(j["worst_tensor"].as_str().unwrap().starts_with("convnet7: step "), "{j}");
    assert!(j["ties"].as_u64().is_some() && j["commit"].as_str().is_some() && j["steps"] == 2, "{j}");
    let m = &j["models"][0];
    assert_eq!(m["shares"], serde_json::json!([3, 3]));
    assert_eq!(m["wrong_decisions"], 0);
    // A BatchNorm over too few rows cannot be checked in f32: one line names it.
    let out = convoy(&["check", "--model", "resnet20", "--devices", "software", "--batch-size", "1", "--image-size", "8"]);
    fails_with(&out, &["only 4 rows", "residual_6"]);
}

#[test]
fn a_batch_past_the_binding_limit_names_the_largest_that_fits() {
    // ResNet-20's first stage at 32 px holds 32 * 32 * 16 floats a sample (64 KiB); the
    // software adapter's bindings stop at 128 MiB: 2,048 samples fit, 2,049 do not.
    let out = convoy(&["bench", "--model", "resnet20", "--devices", "software", "--batch-size", "2049", "--steps", "1", "--no-scaling"]);
    fails_with(&out, &["largest per-device batch that fits is 2048", "[2049, 32, 32, 16]"]);
}

#[test]
fn summary_json_counts_torchvisions_parameters_and_flops() {
    let summary = |args: &[&str]| {
        let out = convoy(&[&["summary", "--json"], args].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json(&out)
    };
    // torchvision.models.resnetN(num_classes=1000): sum(p.numel() for p in parameters()),
    // and the running_mean + running_var buffers (num_batches_tracked aside).
    for (model, trainable, buffers) in [("resnet18", 11_689_512, 9_600), ("resnet34", 21_797_672, 17_024), ("resnet50", 25_557_032, 53_120)] {
        let v = summary(&["--model", model, "--classes", "1000"]);
        assert_eq!(v["trainable_params"], trainable, "{model}");
        assert_eq!(v["non_trainable_params"], buffers, "{model}");
        assert_eq!(v["params"], trainable + buffers, "{model}");
        let rows: u64 = v["layers"].as_array().unwrap().iter().map(|l| l["params"].as_u64().unwrap()).sum();
        assert_eq!(rows, trainable + buffers, "{model}: the rows do not add up to the total");
    }
    // torchvision's documented multiply-adds at 224 px ("GFLOPS" 1.81 and 4.09), to their 3 digits.
    for (model, gmacs) in [("resnet18", 1.81), ("resnet50", 4.09)] {
        let flops = summary(&["--model", model]).get("flops").and_then(|f| f.as_f64()).unwrap();
        assert!((flops / 2e9 - gmacs).abs() < 0.005, "{model}: {flops} FLOPs");
    }
    // By hand, 2 per multiply-add, convnet7 at 32 px: conv 3->32 and 32->32 at 32x32, pool,
    // 32->64 and 64->64 at 16x16, pool, 64->128 at 8x8 (3x3 each), dense 128->128 and 128->10.
    let macs = 32 * 32 * 32 * 27 + 32 * 32 * 32 * 288 + 16 * 16 * 64 * 288 + 16 * 16 * 64 * 576 + 8 * 8 * 128 * 576 + 128 * 128 + 128 * 10;
    let v = summary(&["--model", "convnet7", "--classes", "10", "--image-size", "32"]);
    assert_eq!(v["flops"], 2 * macs);
    assert_eq!(v["layers"][0]["flops"], 2 * 32 * 32 * 32 * 27, "{}", v["layers"][0]);
    assert_eq!(v["layers"][0]["output_shape"], serde_json::json!([32, 32, 32]));
    // The MLP at 8 px: 192 -> 256 -> 128 -> 10; Flatten has no FLOPs.
    let v = summary(&["--model", "mlp", "--image-size", "8"]);
    assert_eq!(v["flops"], 2 * (192 * 256 + 256 * 128 + 128 * 10));
    assert_eq!((v["layers"][0]["class_name"].as_str(), &v["layers"][0]["flops"]), (Some("Flatten"), &serde_json::json!(0)));
    assert_eq!(v["trainable_params"], 193 * 256 + 257 * 128 + 129 * 10);

    let out = convoy(&["summary", "--model", "resnet18"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("Trainable params: 11,689,512") && table.contains("conv2d (Conv2D)"), "{table}");
    fails_with(&convoy(&["summary", "--model", "resnet51"]), &["resnet51", "resnet50"]);
    fails_with(&convoy(&["summary", "--model", "resnet50", "--image-size", "0"]), &["--image-size", "0"]);
}

#[test]
fn resuming_a_finished_run_says_so() {
    let dir = tmp("finished");
    let ck = dir.to_str().unwrap();
    let mut args = vec!["train", "--epochs", "1", "--json", "--checkpoint-dir", ck, "--resume", "--devices", "software"];
    args.extend_from_slice(TINY);
    assert!(convoy(&args).status.success());
    // --epochs is where the run ends (Keras' epochs with initial_epoch at the epochs trained).
    fails_with(&convoy(&args), &["--resume", "checkpoint.safetensors", "trained 1 epochs", "--epochs 1"]);
}

#[test]
fn predict_names_each_file_of_an_unlabelled_folder() {
    let dir = tmp("images");
    let model = dir.join("m.safetensors");
    let mut args = vec!["train", "--epochs", "1", "--json", "--save", model.to_str().unwrap(), "--devices", "software"];
    args.extend_from_slice(TINY);
    assert!(convoy(&args).status.success());
    // A flat folder of new photos, sizes other than the model's; other files are left out.
    let photos = dir.join("photos");
    std::fs::create_dir_all(photos.join("sub")).unwrap();
    for (name, w, h) in [("b.png", 12, 9), ("a.jpg", 8, 8), ("c.PNG", 9, 16)] {
        image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 20) as u8, (y * 15) as u8, 90])).save(photos.join(name)).unwrap();
    }
    for other in [".hidden.png", "notes.txt", "sub/d.png"] {
        std::fs::write(photos.join(other), b"not an image").unwrap();
    }
    let spec = format!("images:{}", photos.display());
    let out = convoy(&["predict", "--load", model.to_str().unwrap(), "--data", &spec, "--json", "--devices", "software"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    let preds = v["predictions"].as_array().unwrap();
    let files: Vec<&str> = preds.iter().map(|p| p["file"].as_str().unwrap()).collect();
    let want: Vec<String> = ["a.jpg", "b.png", "c.PNG"].iter().map(|f| photos.join(f).display().to_string()).collect();
    assert_eq!(files, want);
    for p in preds {
        assert!(p["class"].as_u64().unwrap() < 10 && (0.1..=1.0).contains(&p["probability"].as_f64().unwrap()), "{p}");
        // The model names its classes after the data it was trained on.
        assert_eq!(p["label"], convoy::data::SYNTHETIC_CLASSES[p["class"].as_u64().unwrap() as usize], "{p}");
    }
    let out = convoy(&["predict", "--load", model.to_str().unwrap(), "--data", &spec, "--devices", "software"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[1].starts_with(&format!("{}\t", want[1])) && lines[1].split('\t').count() == 3, "{text}");
    // A corrupt photo is named, as it is in the folder.
    std::fs::write(photos.join("e.jpg"), b"\xff\xd8 truncated").unwrap();
    fails_with(&convoy(&["predict", "--load", model.to_str().unwrap(), "--data", &spec, "--devices", "software"]), &[&photos.join("e.jpg").display().to_string()]);
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    fails_with(&convoy(&["predict", "--load", model.to_str().unwrap(), "--data", &format!("images:{}", empty.display())]), &["empty", "no .jpg"]);
    fails_with(&convoy(&["evaluate", "--load", model.to_str().unwrap(), "--data", &spec]), &["no labels"]);
}

#[test]
fn precision_mixed_trains_checks_and_names_a_bad_policy() {
    // The software adapter has no tensor cores: one notice, then the f16 products on its f32
    // units, with the loss scale in the JSON.
    let out = convoy(&["bench", "--model", "mlp", "--devices", "software", "--batch-size", "16", "--steps", "2", "--no-scaling", "--precision", "mixed", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["precision"], "mixed_float16");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("has no cooperative matrices").count(), 1, "{stderr}");
    let out = convoy(&["check", "--model", "convnet7", "--devices", "software", "--batch-size", "4", "--image-size", "8", "--steps", "2", "--precision", "mixed", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j = json(&out);
    assert_eq!((j["ok"].clone(), j["precision"].clone()), (serde_json::json!(true), serde_json::json!("mixed_float16")), "{j}");
    // f16 operands leave more than f32 rounding, under the plain-mixed bound.
    assert!(j["max_grad_error"].as_f64().unwrap() > 1e-4 && j["grad_bound"].as_f64().unwrap() > 1e-3, "{j}");
    for cmd in ["train", "bench", "check"] {
        let out = convoy(&[cmd, "--devices", "software", "--precision", "bfloat16"]);
        fails_with(&out, &["unknown precision policy \"bfloat16\"", "mixed_float16"]);
    }
}

#[test]
fn a_cosine_schedule_ends_near_zero_and_a_bad_one_is_named() {
    let run = |schedule: &str| {
        let mut args = vec!["train", "--epochs", "2", "--json", "--devices", "software", "--schedule", schedule];
        args.extend_from_slice(TINY);
        let out = convoy(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json(&out)
    };
    let constant = run("constant");
    assert_eq!((constant["learning_rate"].as_f64(), constant["schedule"].as_str()), (Some(0.05f32 as f64), Some("constant")), "{constant}");
    // 300 samples in batches of 32 are 10 steps an epoch: the last of 20 runs at
    // 0.05 * (1 + cos(pi * 19 / 20)) / 2.
    let cosine = run("cosine");
    let want = 0.05 * (1.0 + (std::f64::consts::PI * 19.0 / 20.0).cos()) / 2.0;
    let got = cosine["learning_rate"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-6, "{got} vs {want}: {cosine}");
    fails_with(&convoy(&["train", "--devices", "software", "--schedule", "linear"]), &["--schedule linear", "constant or cosine"]);
}

#[test]
fn bad_log_and_limits_settings_are_named() {
    // CONVOY_LOG and CONVOY_LIMITS are read before anything runs; an unknown value is one
    // error line naming the variable and the value, never a silent default.
    let with = |var: &str, value: &str, args: &[&str]| {
        std::process::Command::new(common::convoy_exe()).args(args).env("XDG_RUNTIME_DIR", std::env::temp_dir()).env(var, value).output().unwrap()
    };
    fails_with(&with("CONVOY_LOG", "loud", &["devices"]), &["CONVOY_LOG", "loud"]);
    let train: Vec<&str> = ["train", "--epochs", "1"].iter().chain(TINY).copied().collect();
    fails_with(&with("CONVOY_LIMITS", "huge", &train), &["CONVOY_LIMITS", "huge"]);
}
