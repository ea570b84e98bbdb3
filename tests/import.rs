//! Issue 21: PyTorch state dicts in and out. The fixtures (tests/fixtures/torchvision, written by
//! make_fixture.py) are small networks of torchvision's topologies and names with randomised
//! BatchNorm statistics, and their outputs in float64 (the script's `producer` metadata says
//! whether torchvision or its independent numpy forward computed them).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{convoy, fails_with, json, tmp};
use convoy::import::{self, Naming};
use convoy::model::{zoo, CompileOptions, Sequential};
use convoy::optim::Optimizer;
use safetensors::tensor::{Dtype, TensorView};

const FIXTURES: [&str; 3] = ["resnet18", "resnet50", "mobilenet_v2"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torchvision").join(name)
}

fn devices(replicas: usize) -> Vec<Arc<convoy::Device>> {
    match std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty()) {
        Some(sel) => convoy::device::open(&vec![sel; replicas].join(",")).unwrap(),
        None if replicas == 1 => convoy::device::open("software").unwrap(),
        None => convoy::device::open(&format!("software:{replicas}")).unwrap(),
    }
}

/// Every tensor of a safetensors file: name -> (dtype, shape, values as f64).
fn tensors(path: &Path) -> BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors().into_iter().map(|(k, t)| (k, (t.dtype(), t.shape().to_vec(), t.data().to_vec()))).collect()
}

/// A tensor's values as f32, widening F16 and BF16 as the import must.
fn as_f32(dtype: Dtype, data: &[u8]) -> Vec<f32> {
    match dtype {
        Dtype::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)).collect(),
        // Normal halves only in the fixtures: sign, exponent rebiased, mantissa shifted.
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| {
                let h = u16::from_le_bytes([c[0], c[1]]) as u32;
                assert!(h & 0x7c00 != 0 && h & 0x7c00 != 0x7c00, "a subnormal or special half in a fixture");
                f32::from_bits(((h & 0x8000) << 16) | ((((h >> 10) & 0x1f) + 112) << 23) | ((h & 0x3ff) << 13))
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// The fixture's u8 images and expected float64 logits.
fn expected(name: &str) -> (Vec<u8>, usize, Vec<Vec<f64>>) {
    let t = tensors(&fixture(&format!("{name}_expected.safetensors")));
    let (_, shape, images) = &t["images"];
    let (_, lshape, logits) = &t["logits"];
    let logits: Vec<f64> = logits.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
    (images.clone(), shape[1], logits.chunks(lshape[1]).map(<[f64]>::to_vec).collect())
}

/// Each fixture imports through the names of the full-size network, and convoy's class
/// probabilities on the software adapter match the float64 reference's softmax to 1e-4
/// relative: every tensor must land where it belongs, permuted right (convolutions, the
/// depthwise ones, the linear layer), with the BatchNorm statistics and epsilon of PyTorch.
#[test]
fn fixtures_import_and_match_their_float64_outputs() {
    for name in FIXTURES {
        let model = import::torchvision(fixture(&format!("{name}.safetensors")), name).unwrap();
        assert_eq!(model.input_shape(), &[224, 224, 3], "{name}");
        assert_eq!(model.normalization(), (&[0.485f32, 0.456, 0.406][..], &[0.229f32, 0.224, 0.225][..]));
        let (images, size, logits) = expected(name);
        let mut model = model.with_input_shape(&[size, size, 3]).unwrap();
        model.compile(CompileOptions::new(Optimizer::sgd(0.01)).devices(devices(1)).max_batch(4)).unwrap();
        let probs = model.predict_images(&images, 4).unwrap();
        let mut worst = 0.0f64;
        for (p, l) in probs.iter().zip(&logits) {
            let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = l.iter().map(|v| (v - m).exp()).sum();
            for (&got, v) in p.iter().zip(l) {
                let want = (v - m).exp() / z;
                let err = (got as f64 - want).abs() / (want + 1e-6);
                // NaN (a negative variance where the statistics were swapped) fails too.
                worst = if err.is_nan() || err > worst { err } else { worst };
            }
        }
        eprintln!("{name}: worst relative error of a class probability {worst:e}");
        assert!(worst < 1e-4, "{name}: {probs:?} against {logits:?}: worst relative error of a class probability {worst:e}");
        // The classes are not all alike: a wrong mapping would not pass by luck.
        assert!(logits.iter().all(|l| l.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - l.iter().cloned().fold(f64::INFINITY, f64::min) > 0.5), "{name}: {logits:?}");
    }
}

/// import -> export gives back every tensor of the file, F32 ones bit for bit and the F16 /
/// BF16 ones as their exact f32 widening, and nothing else (`num_batches_tracked` aside); the
/// export under timm's names imports back through them to the same file.
#[test]
fn import_then_export_gives_every_tensor_back_bit_for_bit() {
    let dir = tmp("roundtrip");
    for name in FIXTURES {
        let original = fixture(&format!("{name}.safetensors"));
        let model = import::torchvision(&original, name).unwrap();
        let out = dir.join(format!("{name}.safetensors"));
        assert_eq!(import::export(&model, Naming::Torchvision, &out).unwrap(), name);
        let (a, b) = (tensors(&original), tensors(&out));
        let kept: Vec<&String> = a.keys().filter(|k| !k.ends_with("num_batches_tracked")).collect();
        assert_eq!(kept, b.keys().collect::<Vec<_>>(), "{name}");
        let mut widened = 0;
        for k in kept {
            let ((dt, shape, data), (dt2, shape2, data2)) = (&a[k], &b[k]);
            assert_eq!((*dt2, shape2), (Dtype::F32, shape), "{name} {k}");
            if *dt == Dtype::F32 {
                assert!(data == data2, "{name} {k} differs");
            } else {
                widened += 1;
                assert_eq!(as_f32(*dt, data), as_f32(Dtype::F32, data2), "{name} {k}");
            }
        }
        assert!(widened > 0, "{name}: the fixture has F16 / BF16 tensors");

        let timm_name = if name == "mobilenet_v2" { "mobilenetv2_100" } else { name };
        let timm_file = dir.join(format!("{name}_timm.safetensors"));
        assert_eq!(import::export(&model, Naming::Timm, &timm_file).unwrap(), timm_name);
        let again = dir.join(format!("{name}_again.safetensors"));
        import::export(&import::timm(&timm_file, timm_name).unwrap(), Naming::Torchvision, &again).unwrap();
        assert!(std::fs::read(&again).unwrap() == std::fs::read(&out).unwrap(), "{name}: through timm's names");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// torchvision's state_dict names and shapes (tests/fixtures/torchvision/state_dicts.txt).
fn torchvision_state_dict(model: &str) -> BTreeMap<String, Vec<usize>> {
    let text = std::fs::read_to_string(fixture("state_dicts.txt")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut it = l.split(' ');
            let (m, name, shape) = (it.next()?, it.next()?, it.next().unwrap_or(""));
            (m == model).then(|| (name.to_string(), shape.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()))
        })
        .collect()
}

/// At full size: convoy's resnet18, resnet34, resnet50 and mobilenet_v2 export exactly
/// torchvision's state_dict names and shapes (less `num_batches_tracked`), with torchvision's
/// parameter counts, and import back to the same bytes; timm's names hold the same tensors.
#[test]
fn full_size_zoo_models_export_torchvisions_names_and_import_back() {
    let dir = tmp("full");
    let counts = [("resnet18", 11_689_512), ("resnet34", 21_797_672), ("resnet50", 25_557_032), ("mobilenet_v2", 3_504_872)];
    for (name, params) in counts {
        let model = zoo::by_name(name, &[224, 224, 3], 1000).unwrap();
        let out = dir.join(format!("{name}.safetensors"));
        assert_eq!(import::export(&model, Naming::Torchvision, &out).unwrap(), name);
        let got: BTreeMap<String, Vec<usize>> = tensors(&out).into_iter().map(|(k, (_, s, _))| (k, s)).collect();
        let want: BTreeMap<String, Vec<usize>> = torchvision_state_dict(name).into_iter().filter(|(k, _)| !k.ends_with("num_batches_tracked")).collect();
        assert!(!want.is_empty());
        for (k, s) in &want {
            assert_eq!(got.get(k), Some(s), "{name}: {k}");
        }
        assert_eq!(got.len(), want.len(), "{name}: extra tensors {:?}", got.keys().filter(|k| !want.contains_key(*k)).collect::<Vec<_>>());
        let trainable: usize = got.iter().filter(|(k, _)| !k.contains("running_")).map(|(_, s)| s.iter().product::<usize>()).sum();
        assert_eq!(trainable, params, "{name}");
        let back = import::torchvision(&out, name).unwrap();
        let again = dir.join(format!("{name}_again.safetensors"));
        import::export(&back, Naming::Torchvision, &again).unwrap();
        assert!(std::fs::read(&again).unwrap() == std::fs::read(&out).unwrap(), "{name}: import -> export changed bytes");

        let timm_name = if name == "mobilenet_v2" { "mobilenetv2_100" } else { name };
        let timm_file = dir.join(format!("{name}_timm.safetensors"));
        import::export(&model, Naming::Timm, &timm_file).unwrap();
        let timm: BTreeMap<String, Vec<usize>> = tensors(&timm_file).into_iter().map(|(k, (_, s, _))| (k, s)).collect();
        assert_eq!(timm.len(), want.len(), "{timm_name}");
        if name == "mobilenet_v2" {
            // timm's mobilenetv2_100 (timm/models/_efficientnet_blocks.py names).
            for (k, s) in [
                ("conv_stem.weight", &[32, 3, 3, 3][..]),
                ("bn1.running_var", &[32]),
                ("blocks.0.0.conv_dw.weight", &[32, 1, 3, 3]),
                ("blocks.0.0.conv_pw.weight", &[16, 32, 1, 1]),
                ("blocks.0.0.bn2.weight", &[16]),
                ("blocks.1.0.conv_pw.weight", &[96, 16, 1, 1]),
                ("blocks.1.1.conv_dw.weight", &[144, 1, 3, 3]),
                ("blocks.5.2.conv_pwl.weight", &[160, 960, 1, 1]),
                ("blocks.6.0.bn3.running_mean", &[320]),
                ("conv_head.weight", &[1280, 320, 1, 1]),
                ("bn2.bias", &[1280]),
                ("classifier.weight", &[1000, 1280]),
            ] {
                assert_eq!(timm.get(k).map(Vec::as_slice), Some(s), "{k}");
            }
        } else {
            assert_eq!(timm, got, "timm's ResNets name their tensors as torchvision's");
        }
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(&again);
        let _ = std::fs::remove_file(&timm_file);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The resnet18 fixture with `edit` applied, written to `dir/file`.
fn edited(dir: &Path, file: &str, edit: impl FnOnce(&mut BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>)) -> PathBuf {
    let mut t = tensors(&fixture("resnet18.safetensors"));
    edit(&mut t);
    let views: Vec<(String, TensorView)> = t.iter().map(|(k, (d, s, b))| (k.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    let path = dir.join(file);
    std::fs::write(&path, safetensors::tensor::serialize(views, None::<HashMap<String, String>>).unwrap()).unwrap();
    path
}

/// A missing, extra, misshapen or non-float tensor, a truncated file, an unknown model or
/// source: one error line naming the tensor (or the file), exit 1, nothing at --out.
#[test]
fn bad_state_dicts_are_one_line_errors_and_write_nothing() {
    let dir = tmp("bad");
    let out = dir.join("out.safetensors");
    let import_cli = |file: &Path, model: &str| convoy(&["import", "--from", "torchvision", "--model", model, file.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let cases: Vec<(PathBuf, &str, Vec<&str>)> = vec![
        (edited(&dir, "missing.safetensors", |t| drop(t.remove("layer2.0.downsample.1.running_var"))), "resnet18", vec!["missing tensor layer2.0.downsample.1.running_var", "missing.safetensors"]),
        (
            edited(&dir, "extra.safetensors", |t| drop(t.insert("layer5.0.conv1.weight".into(), (Dtype::F32, vec![1], vec![0; 4])))),
            "resnet18",
            vec!["unexpected tensor layer5.0.conv1.weight", "extra.safetensors"],
        ),
        (edited(&dir, "shape.safetensors", |t| drop(t.insert("fc.bias".into(), (Dtype::F32, vec![6], vec![0; 24])))), "resnet18", vec!["tensor fc.bias has shape [6], expected [5]"]),
        (
            edited(&dir, "rank.safetensors", |t| drop(t.insert("conv1.weight".into(), (Dtype::F32, vec![4, 3, 49], vec![0; 4 * 3 * 49 * 4])))),
            "resnet18",
            vec!["tensor conv1.weight has shape [4, 3, 49], expected 4"],
        ),
        (
            edited(&dir, "dtype.safetensors", |t| {
                let (_, s, b) = t["layer1.0.conv1.weight"].clone();
                t.insert("layer1.0.conv1.weight".into(), (Dtype::I64, s, [b.clone(), b].concat()));
            }),
            "resnet18",
            vec!["tensor layer1.0.conv1.weight is I64, expected floats"],
        ),
        // A resnet18's file read as a resnet50 lacks the bottlenecks' third convolution.
        (fixture("resnet18.safetensors"), "resnet50", vec!["missing tensor layer1.0.conv3.weight"]),
        (fixture("resnet18.safetensors"), "vgg16", vec!["unknown torchvision model `vgg16`"]),
    ];
    let truncated = dir.join("truncated.safetensors");
    let bytes = std::fs::read(fixture("resnet18.safetensors")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    for (file, model, needles) in cases.iter().map(|(f, m, n)| (f.clone(), *m, n.clone())).chain([(truncated.clone(), "resnet18", vec!["truncated.safetensors", "not a complete safetensors file"])]) {
        fails_with(&import_cli(&file, model), &needles);
        assert!(!out.exists(), "{} wrote {}", file.display(), out.display());
    }
    fails_with(&convoy(&["import", "--from", "keras", "--model", "resnet18", "x", "--out", out.to_str().unwrap()]), &["unknown source `keras`"]);
    // Export: a model with no torchvision counterpart.
    let mlp = dir.join("mlp.safetensors");
    zoo::mlp(&[8, 8, 3], 3).save_initial(&mlp);
    fails_with(&convoy(&["export", "--load", mlp.to_str().unwrap(), "--to", "torchvision", "--out", out.to_str().unwrap()]), &["none of the torchvision models"]);
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Saves a model's initial weights (compiled on the software adapter).
trait SaveInitial {
    fn save_initial(self, path: &Path);
}

impl SaveInitial for Sequential {
    fn save_initial(mut self, path: &Path) {
        self.compile(CompileOptions::new(Optimizer::sgd(0.01)).devices(devices(1)).max_batch(2)).unwrap();
        self.save(path).unwrap();
    }
}

/// The command line end to end on the resnet18 fixture: import, export, and `train --init`
/// on data of another class count: a fresh head, and with --freeze-epochs the base frozen (its
/// weights and BatchNorm statistics unchanged: inference mode) on two replicas; after the
/// frozen epochs every layer trains.
#[test]
fn cli_imports_exports_and_fine_tunes_with_a_new_head() {
    let dir = tmp("cli");
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let out = convoy(&["import", "--from", "torchvision", "--model", "resnet18", fixture("resnet18.safetensors").to_str().unwrap(), "--out", &p("init.safetensors"), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((json(&out)["model"].as_str(), json(&out)["classes"].as_u64(), json(&out)["image_size"].as_u64()), (Some("resnet18"), Some(5), Some(224)));
    let out = convoy(&["export", "--load", &p("init.safetensors"), "--to", "torchvision", "--out", &p("back.safetensors")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let train = |epochs: &str, save: &str| {
        let args = ["train", "--init", &p("init.safetensors"), "--data", "synthetic:40,20", "--image-size", "32", "--epochs", epochs, "--freeze-epochs", "1", "--batch-size", "20"];
        let out = convoy(&[&args[..], &["--devices", "software:2", "--lr", "0.05", "--save", &p(save), "--json"]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Sequential::load(p(save)).unwrap().0
    };
    let (init, _) = Sequential::load(p("init.safetensors")).unwrap();
    let weights = |m: &Sequential| {
        let (params, states, _) = m.get_weights().unwrap();
        let layout = m.definition().build_layout().unwrap();
        let named = |es: &[convoy::model::layout::Entry], v: &[f32]| es.iter().map(|e| (e.name.clone(), v[e.range()].to_vec())).collect::<Vec<_>>();
        [named(&layout.params, &params), named(&layout.states, &states)].concat()
    };
    let frozen = train("1", "frozen.safetensors");
    assert_eq!(frozen.output_shape().unwrap(), vec![10], "synthetic has 10 classes: a new head");
    assert_eq!(frozen.input_shape(), &[32, 32, 3]);
    let (before, after) = (weights(&init), weights(&frozen));
    assert_eq!(before.len(), after.len());
    for ((name, a), (name2, b)) in before.iter().zip(&after) {
        assert_eq!(name, name2);
        if name.starts_with("dense") {
            assert_ne!(a.len(), b.len(), "{name}: the head is new");
        } else {
            assert!(a == b, "{name} changed while frozen");
        }
    }
    let thawed = train("2", "thawed.safetensors");
    let changed = weights(&init).iter().zip(weights(&thawed)).filter(|((n, a), (_, b))| !n.starts_with("dense") && *a != *b).count();
    assert!(changed > 10, "after the frozen epoch the base trains ({changed} tensors changed)");
    assert!((0..thawed.layers().len()).all(|i| thawed.is_trainable(i)));

    fails_with(&convoy(&["train", "--freeze-epochs", "1", "--epochs", "1"]), &["--init"]);
    fails_with(&convoy(&["train", "--init", &p("init.safetensors"), "--epochs", "1", "--freeze-epochs", "2"]), &["--freeze-epochs 2"]);
    fails_with(&convoy(&["train", "--init", &p("init.safetensors"), "--data", "synthetic:40,20", "--classes", "3", "--devices", "software"]), &["--classes 3"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The synthetic shapes of classes `from..from + 5` among `n` drawn with `seed`, relabelled 0..5.
fn five_shapes(n: usize, from: u32, seed: u64) -> Arc<convoy::data::InMemory> {
    let all = convoy::data::synthetic(n, 32, seed).unwrap();
    let keep: Vec<usize> = (0..all.labels().len()).filter(|&i| (from..from + 5).contains(&all.labels()[i])).collect();
    let images = keep.iter().flat_map(|&i| all.image(i).to_vec()).collect();
    let labels = keep.iter().map(|&i| all.labels()[i] - from).collect();
    let names = convoy::data::SYNTHETIC_CLASSES[from as usize..from as usize + 5].iter().map(|s| s.to_string()).collect();
    Arc::new(convoy::data::InMemory::new(images, labels, [32, 32, 3], names, "five shapes").unwrap())
}

/// Fine-tuning pays, without downloads: a narrow resnet18 trained on five synthetic shapes,
/// exported to torchvision's names and imported back (a new head), then fine-tuned on the five
/// other shapes from 100 images beats the same network from random init after as many epochs.
#[test]
fn fine_tuning_an_exported_and_imported_model_beats_random_init() {
    use convoy::model::zoo::ResNetWidths;
    use convoy::model::FitOptions;
    let widths = ResNetWidths { stem: 8, inner: [8, 16, 16, 32], out: [8, 16, 16, 32] };
    let net = || {
        let mut m = zoo::resnet_with(&[32, 32, 3], [2, 2, 2, 2], false, &widths, 5);
        m.set_normalization(import::IMAGENET_MEAN.to_vec(), import::IMAGENET_STD.to_vec()).unwrap();
        m
    };
    let compile = |m: &mut Sequential| m.compile(CompileOptions::new(Optimizer::sgd(0.05).momentum(0.9)).devices(devices(1)).max_batch(25)).unwrap();
    let fit = |m: &mut Sequential, train, val, epochs| {
        let h = m.fit(train, FitOptions { epochs, batch_size: 25, validation_data: Some(val), verbose: 0, ..Default::default() }).unwrap();
        h.get("val_accuracy").unwrap().to_vec()
    };
    let (task_a, task_a_val) = (five_shapes(1000, 0, 1), five_shapes(200, 0, 2));
    let mut first = net();
    compile(&mut first);
    let a = fit(&mut first, task_a, task_a_val, 3);
    let dir = tmp("finetune");
    let file = dir.join("task_a_tv.safetensors");
    import::export(&first, Naming::Torchvision, &file).unwrap();

    let (task_b, task_b_val) = (five_shapes(200, 5, 3), five_shapes(400, 5, 4));
    let epochs = 4;
    let mut tuned = import::torchvision(&file, "resnet18").unwrap().with_input_shape(&[32, 32, 3]).unwrap().with_new_head(5, 7).unwrap();
    compile(&mut tuned);
    let from_init = fit(&mut tuned, task_b.clone(), task_b_val.clone(), epochs);
    let mut fresh = net();
    compile(&mut fresh);
    let from_random = fit(&mut fresh, task_b, task_b_val, epochs);
    eprintln!("task A val_accuracy {a:?}\ntask B from the imported model {from_init:?}\ntask B from random init      {from_random:?}");
    assert!(from_init.last() > from_random.last(), "fine-tuning {from_init:?} against random init {from_random:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
