//! Whole models on the software adapter: fit, save/load round trip, resume, determinism,
//! short last batches.

use std::path::PathBuf;
use std::sync::Arc;

use convoy::data::{synthetic_split, Dataset};
use convoy::layers::*;
use convoy::model::{zoo, CompileOptions, FitOptions, Metric, Sequential};
use convoy::optim::Optimizer;

fn devices() -> Vec<Arc<convoy::Device>> {
    convoy::device::open("software").unwrap()
}

fn data(train: usize, val: usize) -> (Arc<dyn Dataset>, Arc<dyn Dataset>) {
    let (t, v) = synthetic_split(train, val, 8, 5).unwrap();
    (Arc::new(t), Arc::new(v))
}

fn small_cnn() -> Sequential {
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(6, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(MaxPool2D::new(2));
    m.add(Dropout::new(0.1));
    m.add(Flatten::new());
    m.add(Dense::new(10));
    m
}

fn compile(m: &mut Sequential, optimizer: Optimizer) {
    m.compile(CompileOptions::new(optimizer).metrics(vec![Metric::Accuracy, Metric::TopKAccuracy(5)]).devices(devices()).seed(1))
    .unwrap();
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("convoy-models-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn quiet(epochs: usize, val: Option<Arc<dyn Dataset>>) -> FitOptions {
    FitOptions { epochs, batch_size: 32, validation_data: val, verbose: 0, ..Default::default() }
}

/// The synthetic images, each taking `ms` milliseconds to load, one at a time whatever the
/// loader's threads (one a core): a batch takes the same time on 2 cores and on 16, longer
/// than a step even while the other tests share the cores.
struct SlowToLoad(Arc<dyn Dataset>, u64);

static ONE_LOAD_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Dataset for SlowToLoad {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn image_shape(&self) -> [usize; 3] {
        self.0.image_shape()
    }
    fn num_classes(&self) -> usize {
        self.0.num_classes()
    }
    fn class_names(&self) -> Vec<String> {
        self.0.class_names()
    }
    fn source(&self) -> String {
        "slow to load".into()
    }
    fn load(&self, i: usize, out: &mut [u8]) -> convoy::Result<u32> {
        {
            let _one = ONE_LOAD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            std::thread::sleep(std::time::Duration::from_millis(self.1));
        }
        self.0.load(i, out)
    }
}

/// `input_wait` (the progress bar's "input-bound" above 0.2) is the share of the epoch the
/// devices sat idle for input: most of it when each sample takes 15 ms to load, next to none
/// from memory (the loader keeps batches ready). It used to count from a step's submission
/// to the next batch, the step running all the while, and as a share of the host's timers
/// alone, which miss the step a software adapter runs inside its submission: the mlp read
/// as 34% input-bound on lavapipe with its dense kernels at 97% of the step.
#[test]
fn input_wait_is_the_time_the_devices_sat_idle() {
    let (train, _) = synthetic_split(128 * 12, 10, 32, 5).unwrap();
    let train: Arc<dyn Dataset> = Arc::new(train);
    let mut m = zoo::mlp(&[32, 32, 3], 10);
    m.compile(CompileOptions::new(Optimizer::sgd(0.01)).devices(devices()).max_batch(128)).unwrap();
    let wait = |m: &mut Sequential, data: Arc<dyn Dataset>, steps: usize| {
        let opts = FitOptions { epochs: 1, batch_size: 128, steps_per_epoch: Some(steps), verbose: 0, ..Default::default() };
        m.fit(data, opts).unwrap().history()["input_wait"][0]
    };
    // From memory first: the first steps also build the pipelines, while the loader works.
    let fast = wait(&mut m, train.clone(), 12);
    // 15 ms a sample (1.9 s a batch): at 5 ms the share read 0.40-0.47 on a 2-core machine
    // whose other tests held the cores, the mlp's software-adapter step slowed to match.
    let slow = wait(&mut m, Arc::new(SlowToLoad(train, 15)), 3);
    assert!(slow > 0.5, "15 ms a sample: input_wait {slow}");
    assert!(fast < 0.2, "from memory: input_wait {fast}");
}

#[test]
fn fit_learns_and_history_has_keras_keys() {
    let (train, val) = data(600, 100);
    let mut m = small_cnn();
    compile(&mut m, Optimizer::adam(1e-2));
    let h = m.fit(train, quiet(3, Some(val))).unwrap();
    let hist = h.history();
    for key in ["loss", "accuracy", "top_k_accuracy", "val_loss", "val_accuracy", "images_per_sec"] {
        assert_eq!(hist.get(key).map(Vec::len), Some(3), "history lacks 3 values of {key}: {:?}", hist.keys());
    }
    // Chance is 0.1 and a loss of ln 10 = 2.30; this seed reaches 0.72 and 0.88 in three
    // epochs (loss 2.24, 1.48, 1.16), so a model that learns half as well fails.
    let loss = &hist["loss"];
    assert!(loss[0] > loss[1] && loss[1] > loss[2], "loss did not fall every epoch: {loss:?}");
    assert!(hist["val_accuracy"][2] > 0.6, "val accuracy {:?}", hist["val_accuracy"]);
    assert!(hist["val_loss"][2] < 1.2, "val loss {:?}", hist["val_loss"]);
}

#[test]
fn a_loaded_model_predicts_exactly_what_the_saved_one_did() {
    let (train, val) = data(200, 40);
    let mut m = small_cnn();
    compile(&mut m, Optimizer::sgd(0.05).momentum(0.9));
    m.fit(train, quiet(1, None)).unwrap();
    let before = m.predict(val.clone(), 16).unwrap();
    let path = tmp("roundtrip.safetensors");
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices(), 32).unwrap();
    assert_eq!(loaded.architecture(), m.architecture());
    let after = loaded.predict(val, 16).unwrap();
    assert_eq!(before, after, "predictions differ after a save/load round trip");
    let (w0, s0, o0) = m.get_weights().unwrap();
    let (w1, s1, o1) = loaded.get_weights().unwrap();
    assert_eq!((w0, s0, o0), (w1, s1, o1), "weights, statistics or optimizer state differ");
}

#[test]
fn resume_continues_exactly_where_training_stopped() {
    // Two epochs straight, against one epoch + save + load + one more epoch.
    let (train, _) = data(160, 20);
    let opts = |epochs, initial_epoch| FitOptions { epochs, initial_epoch, batch_size: 32, shuffle: true, seed: 9, verbose: 0, ..Default::default() };
    let mut straight = small_cnn();
    compile(&mut straight, Optimizer::sgd(0.05).momentum(0.9).nesterov(true));
    straight.fit(train.clone(), opts(2, 0)).unwrap();

    let mut first = small_cnn();
    compile(&mut first, Optimizer::sgd(0.05).momentum(0.9).nesterov(true));
    first.fit(train.clone(), opts(1, 0)).unwrap();
    let path = tmp("resume.safetensors");
    first.save(&path).unwrap();
    let mut resumed = Sequential::load_compiled(&path, devices(), 32).unwrap();
    assert_eq!(resumed.compiled_epoch(), 1);
    // As in Keras, the resumed run starts at the epochs trained: epochs 1..2.
    resumed.fit(train, opts(2, resumed.compiled_epoch())).unwrap();
    assert_eq!(resumed.compiled_epoch(), 2);
    let (a, b) = (straight.get_weights().unwrap().0, resumed.get_weights().unwrap().0);
    let diff = a.iter().zip(&b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 1e-5, "resumed weights differ by {diff}");
}

#[test]
fn same_seed_same_result() {
    let (train, _) = data(96, 10);
    let run = || {
        let mut m = small_cnn();
        compile(&mut m, Optimizer::adam(1e-3));
        m.fit(train.clone(), FitOptions { epochs: 1, batch_size: 32, seed: 3, verbose: 0, ..Default::default() }).unwrap();
        m.get_weights().unwrap().0
    };
    assert_eq!(run(), run());
}

#[test]
fn short_last_batches_keep_batch_norm_finite() {
    // 33 samples at batch 32 leave a last batch of one; a Dense + BatchNorm on it sees a
    // variance of zero.
    let (train, val) = data(33, 5);
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Flatten::new());
    m.add(Dense::new(8));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(Dense::new(10));
    compile(&mut m, Optimizer::sgd(0.1));
    let h = m.fit(train.clone(), quiet(2, Some(val))).unwrap();
    assert!(h.history()["loss"].iter().all(|l| l.is_finite()));
    let (w, s, _) = m.get_weights().unwrap();
    assert!(w.iter().chain(&s).all(|v| v.is_finite()), "non-finite weights or statistics");
    // drop_remainder trains on the full batch only.
    let h = m.fit(train, FitOptions { epochs: 3, batch_size: 32, drop_remainder: true, verbose: 0, ..Default::default() }).unwrap();
    assert!(h.history()["loss"].iter().all(|l| l.is_finite()));
}

#[test]
fn data_that_does_not_fit_the_model_is_refused() {
    let mut m = zoo::mlp(&[16, 16, 3], 10);
    compile(&mut m, Optimizer::sgd(0.1));
    let (train, _) = data(10, 2); // 8x8 images
    let err = m.fit(train, quiet(1, None)).unwrap_err().to_string();
    assert!(err.contains("[8, 8, 3]") && err.contains("[16, 16, 3]"), "{err}");
}

#[test]
fn summary_counts_parameters() {
    // Exactly as PyTorch counts the same networks (shared/bench/torch_reference.py):
    // BatchNorm's gamma and beta count, its moving statistics do not.
    for (name, want) in [("resnet20", 272_474), ("resnet18_cifar", 11_173_962), ("convnet7", 157_546)] {
        let m = zoo::by_name(name, &[32, 32, 3], 10).unwrap();
        let layout = convoy::model::layout::Layout::new(m.input_shape(), m.layers()).unwrap();
        assert_eq!(layout.trainable_count(), want, "{name}");
        let s = m.summary().unwrap();
        let shown = format!("{want}").as_bytes().rchunks(3).rev().map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(",");
        assert!(s.contains(&format!("Trainable params: {shown}\n")), "{name}: {s}");
    }
}

#[test]
fn profile_times_every_kernel_of_a_step() {
    let mut m = small_cnn();
    compile(&mut m, Optimizer::sgd(0.1).momentum(0.9));
    let (train, _) = data(16, 4);
    let mut images = vec![0u8; 5 * train.sample_bytes()];
    let labels: Vec<u32> = images.chunks_mut(train.sample_bytes()).enumerate().map(|(i, x)| train.load(i, x).unwrap()).collect();
    let p = m.profile(&images, &labels, 2).unwrap();
    assert_eq!(p.batch, 5);
    let families: Vec<String> = p.by_family().iter().map(|k| k.family.clone()).collect();
    for want in ["conv2d_forward", "conv2d_backward_weights", "batchnorm", "pool", "optimizer", "dense_forward", "loss"] {
        assert!(families.iter().any(|f| f == want), "{want} missing from {families:?}");
    }
    // The first layer's forward: M = 5 * 8 * 8 pixels, N = 6 filters, K = 3 * 3 * 3.
    let conv = p.kernels.iter().find(|k| k.family == "conv2d_forward").unwrap();
    assert_eq!(conv.flops, 2.0 * 320.0 * 6.0 * 27.0);
    assert_eq!(conv.layer, Some(0));
    // Its path names its gathers (the image's im2col) without repeating the entry point.
    assert!(conv.path.split(' ').any(|t| t == "a=Im2col") && !conv.path.split(' ').any(|t| t == conv.entry), "{}", conv.path);
    assert!(p.kernels.iter().all(|k| k.ms.is_finite() && k.ms >= 0.0));
    assert!(p.gpu_ms() > 0.0);
    // The input layer has no input gradient to compute.
    assert!(!families.iter().any(|f| f == "conv2d_backward_data"));
    // The summary's FLOPs are the profile's: the forward GEMMs of the step, per sample.
    let forward: f64 = p.kernels.iter().filter(|k| k.family.ends_with("_forward")).map(|k| k.flops).sum();
    assert_eq!(forward, 5.0 * m.summarize().unwrap().flops as f64);
    assert_eq!(m.summarize().unwrap().flops, 2 * (8 * 8 * 6 * 27 + 96 * 10));
    let table = p.table(None, true);
    assert!(table.contains("conv2d_forward") && table.contains("per dispatch"));
}

#[test]
fn a_weight_gradient_runs_beside_the_next_layers_first_backward_pass() {
    // Conv2D's kernel gradient is recorded after its input gradient and put off past the
    // next kernel (Graph::defer): the BatchNormalization's first backward pass, which the
    // GPU may then run beside it. The stem's, with no input gradient, still runs.
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(8, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(Conv2D::new(12, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(10));
    compile(&mut m, Optimizer::sgd(0.1));
    let (train, _) = data(16, 4);
    let mut images = vec![0u8; 4 * train.sample_bytes()];
    let labels: Vec<u32> = images.chunks_mut(train.sample_bytes()).enumerate().map(|(i, x)| train.load(i, x).unwrap()).collect();
    let p = m.profile(&images, &labels, 1).unwrap();
    let first = |keep: &dyn Fn(&convoy::model::profile::KernelTime) -> bool| p.kernels.iter().position(keep);
    let order: Vec<String> = p.kernels.iter().map(|k| format!("{:?} {} {}", k.layer, k.family, k.entry)).collect();
    let data = first(&|k| k.layer == Some(3) && k.family == "conv2d_backward_data").expect("the second convolution's input gradient");
    let sums = first(&|k| k.layer == Some(1) && k.family.starts_with("batchnorm") && k.entry.contains("backward")).expect("the first BatchNorm's backward");
    let weights = first(&|k| k.layer == Some(3) && k.family == "conv2d_backward_weights").expect("the second convolution's kernel gradient");
    assert!(data < sums && weights == sums + 1, "input gradient, the BatchNorm's first pass, then the kernel gradient: {order:#?}");
    assert!(first(&|k| k.layer == Some(0) && k.family == "conv2d_backward_weights").is_some_and(|i| i > weights), "{order:#?}");
}

#[test]
fn convolutions_hand_their_statistics_to_the_batchnorm_after_them() {
    // Every BatchNormalization of resnet20 reads a convolution without a bias, at the top
    // (the stem) and inside the residual blocks; where the product ran unsplit, the
    // convolution's epilogue wrote the statistics and the BatchNorm only merges them.
    for policy in [convoy::model::DTypePolicy::Float32, convoy::model::DTypePolicy::MixedFloat16] {
        let mut m = zoo::by_name("resnet20", &[8, 8, 3], 10).unwrap();
        m.set_dtype_policy(policy);
        compile(&mut m, Optimizer::sgd(0.1));
        let (train, _) = data(16, 4);
        let mut images = vec![0u8; 4 * train.sample_bytes()];
        let labels: Vec<u32> = images.chunks_mut(train.sample_bytes()).enumerate().map(|(i, x)| train.load(i, x).unwrap()).collect();
        let p = m.profile(&images, &labels, 1).unwrap();
        let count = |keep: &dyn Fn(&convoy::model::profile::KernelTime) -> bool| p.kernels.iter().filter(|k| keep(k)).map(|k| k.count).sum::<usize>();
        let has = |k: &convoy::model::profile::KernelTime, token: &str| k.path.split(' ').any(|t| t == token);
        let computed = count(&|k| k.family == "conv2d_forward" && has(k, "stats"));
        let given = count(&|k| k.entry.starts_with("stats_finalize") && has(k, "stats=given"));
        // A quad first pass on the tiled kernels may merge its own partials (stats_merged4).
        let merges = count(&|k| k.entry.starts_with("stats_finalize") || k.entry == "stats_merged4");
        let own = count(&|k| k.entry.starts_with("stats_partial") || k.entry == "stats_merged4");
        println!("{policy:?}: {computed} convolutions computed their BatchNorm's statistics, {own} BatchNorms their own");
        assert!(computed > 0 && computed == given, "{policy:?}: {computed} convolutions wrote statistics, {given} BatchNorms merged them");
        assert_eq!(given + own, merges, "{policy:?}: each BatchNorm's statistics come from one first pass");
    }
}

#[test]
fn a_frozen_batchnorm_asks_its_convolution_for_no_statistics() {
    // Frozen, a BatchNormalization normalises by its moving statistics (Keras 3): the
    // convolution before it writes no batch statistics, and nothing merges any.
    for frozen in [false, true] {
        let mut m = Sequential::new(&[8, 8, 3]);
        m.add(Conv2D::new(8, 3).padding(Padding::Same).use_bias(false));
        m.add(BatchNormalization::new());
        m.add(ReLU::new());
        m.add(GlobalAveragePooling2D::new());
        m.add(Dense::new(10));
        if frozen {
            m.set_trainable(1, false).unwrap();
        }
        compile(&mut m, Optimizer::sgd(0.1));
        let (train, _) = data(16, 4);
        let mut images = vec![0u8; 4 * train.sample_bytes()];
        let labels: Vec<u32> = images.chunks_mut(train.sample_bytes()).enumerate().map(|(i, x)| train.load(i, x).unwrap()).collect();
        let p = m.profile(&images, &labels, 1).unwrap();
        let computed = p.kernels.iter().any(|k| k.family == "conv2d_forward" && k.path.split(' ').any(|t| t == "stats"));
        let merged = p.kernels.iter().any(|k| k.entry.starts_with("stats_finalize"));
        assert_eq!((computed, merged), (!frozen, !frozen), "frozen {frozen}");
    }
}

#[test]
fn imagenet_resnets_count_torchvisions_parameters() {
    // torchvision.models.resnet18/34/50(num_classes=1000), summed over parameters()
    for (name, want) in [("resnet18", 11_689_512), ("resnet34", 21_797_672), ("resnet50", 25_557_032)] {
        let m = zoo::by_name(name, &[224, 224, 3], 1000).unwrap();
        let layout = convoy::model::layout::Layout::new(m.input_shape(), m.layers()).unwrap();
        assert_eq!(layout.trainable_count(), want, "{name}");
        assert_eq!(m.output_shape().unwrap(), vec![1000], "{name}");
    }
    // the stem divides the side by 4 and the stages by 8 more: 224 -> 56 -> 7
    let m = zoo::resnet50(&[224, 224, 3], 10);
    let shapes = convoy::model::layout::Layout::new(m.input_shape(), m.layers()).unwrap().shapes;
    assert_eq!(shapes[3], vec![56, 56, 64], "after the max pool: {:?}", &shapes[..6]);
    assert_eq!(shapes[shapes.len() - 3], vec![7, 7, 2048], "before the global pool");
    // any number of classes: only the dense layer changes
    let m = zoo::resnet18(&[64, 64, 3], 7);
    assert_eq!(convoy::model::layout::Layout::new(m.input_shape(), m.layers()).unwrap().trainable_count(), 11_689_512 - 993 * 513);
    assert!(zoo::cifar_form_warning("resnet18_cifar", 224).is_some_and(|w| w.contains("16x") && w.contains("49x")));
    assert!(zoo::cifar_form_warning("resnet18_cifar", 64).is_none() && zoo::cifar_form_warning("resnet18", 224).is_none());
}

#[test]
fn explicit_pool_padding_survives_the_architecture_json() {
    use convoy::kernels::pool::PoolPadding;
    let layers: Vec<Box<dyn Layer>> = vec![Box::new(MaxPool2D::new(3).strides(2).padding(PoolPadding::Explicit(1, 1))), Box::new(AveragePooling2D::new(3).strides(1).padding(PoolPadding::Explicit(1, 0)))];
    for l in layers {
        let json = serde_json::json!({ "class_name": l.class_name(), "config": l.config() });
        let back = convoy::model::config::layer_from_config(&json).unwrap();
        assert_eq!(back.config(), l.config(), "{json}");
        assert_eq!(back.output_shape(&[7, 7, 4]).unwrap(), l.output_shape(&[7, 7, 4]).unwrap(), "{json}");
    }
    // the ResNet stem's pool: 112 -> 56 at padding 1, as in PyTorch
    let stem = MaxPool2D::new(3).strides(2).padding(PoolPadding::Explicit(1, 1));
    assert_eq!(stem.output_shape(&[112, 112, 64]).unwrap(), vec![56, 56, 64]);
    // a pad above half the pool is refused when the layer meets its input, naming both
    let json = serde_json::json!({ "class_name": "MaxPool2D", "config": { "pool_size": [3, 3], "strides": [2, 2], "padding": [2, 1] } });
    let e = convoy::model::config::layer_from_config(&json).unwrap().output_shape(&[9, 9, 1]).unwrap_err().to_string();
    assert!(e.contains("[2, 1]") && e.contains("[3, 3]"), "{e}");
    let json = serde_json::json!({ "class_name": "AveragePooling2D", "config": { "pool_size": [3, 3], "strides": [2, 2], "padding": "full" } });
    let e = convoy::model::config::layer_from_config(&json).expect_err("unknown padding refused").to_string();
    assert!(e.contains("full"), "{e}");
}

#[test]
fn mobilenet_v2_counts_torchvisions_parameters_and_trains() {
    // torchvision.models.mobilenet_v2(num_classes=1000), summed over parameters()
    let m = zoo::by_name("mobilenet_v2", &[224, 224, 3], 1000).unwrap();
    let layout = m.definition().build_layout().unwrap();
    assert_eq!(layout.trainable_count(), 3_504_872);
    assert_eq!(m.output_shape().unwrap(), vec![1000]);
    // 224 -> 7 through five stride-2 steps; ten inverted residual blocks add their input back
    assert_eq!(layout.shapes[layout.shapes.len() - 3], vec![7, 7, 1280], "before the global pool");
    assert_eq!(m.layers().iter().filter(|l| l.class_name() == "Add").count(), 10);
    assert_eq!(m.layers().iter().filter(|l| l.class_name() == "DepthwiseConv2D").count(), 17);
    // Trains on the software adapter at 32 px, and a saved copy predicts what it does.
    let mut m = zoo::by_name("mobilenet_v2", &[32, 32, 3], 10).unwrap();
    let devices = convoy::device::open("software").unwrap();
    m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(devices.clone()).seed(1).max_batch(8)).unwrap();
    let images: Vec<u8> = (0..8 * 32 * 32 * 3).map(|i| (i * 37 % 251) as u8).collect();
    let labels: Vec<u32> = (0..8).map(|i| i % 10).collect();
    let first = m.train_on_batch(&images, &labels).unwrap()["loss"];
    let mut last = first;
    for _ in 0..5 {
        last = m.train_on_batch(&images, &labels).unwrap()["loss"];
    }
    assert!(last.is_finite() && last < first, "loss {first} -> {last}");
    let dir = std::env::temp_dir().join(format!("convoy-mobilenet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.safetensors");
    m.save(&path).unwrap();
    let want = m.predict_images(&images, 8).unwrap();
    let got = Sequential::load_compiled(&path, devices, 8).unwrap().predict_images(&images, 8).unwrap();
    assert_eq!(got, want, "the reloaded model predicts differently");
    std::fs::remove_dir_all(&dir).ok();
}
