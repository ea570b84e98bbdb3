//! The training loop as a Keras 3 user relies on it (issue 14, B1-B10): each test says what
//! Keras does and holds convoy to it, or to a documented difference. Software adapter.

use std::sync::{Arc, Mutex};

use convoy::callbacks::{Callback, Context, EarlyStopping, LearningRateScheduler, Logs, Mode};
use convoy::data::{synthetic_split, Dataset};
use convoy::layers::*;
use convoy::model::{CompileOptions, FitOptions, Loss, Metric, Sequential};
use convoy::optim::{Optimizer, Schedule};

fn devices(selection: &str) -> Vec<Arc<convoy::Device>> {
    convoy::device::open(selection).unwrap()
}

/// Synthetic 8x8 images of 10 classes.
fn data(train: usize, val: usize) -> (Arc<dyn Dataset>, Arc<dyn Dataset>) {
    let (t, v) = synthetic_split(train, val, 8, 5).unwrap();
    (Arc::new(t), Arc::new(v))
}

fn model() -> Sequential {
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(6, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(MaxPool2D::new(2));
    m.add(Flatten::new());
    m.add(Dense::new(10));
    m
}

fn compile_on(m: &mut Sequential, optimizer: Optimizer, selection: &str) {
    m.compile(CompileOptions::new(optimizer).devices(devices(selection)).seed(1))
    .unwrap();
}

/// The first `n` samples of `data`: images back to back, and labels.
fn batch(data: &dyn Dataset, n: usize) -> (Vec<u8>, Vec<u32>) {
    let sample = data.sample_bytes();
    let mut images = vec![0u8; n * sample];
    let labels = images.chunks_mut(sample).enumerate().map(|(i, x)| data.load(i, x).unwrap()).collect();
    (images, labels)
}

fn compiled(optimizer: Optimizer) -> Sequential {
    let mut m = model();
    compile_on(&mut m, optimizer, "software");
    m
}

fn quiet(epochs: usize) -> FitOptions {
    FitOptions { epochs, batch_size: 32, verbose: 0, ..Default::default() }
}

#[test]
fn b1_a_second_compile_keeps_the_weights() {
    let (train, val) = data(128, 32);
    let mut m = compiled(Optimizer::sgd(0.1).momentum(0.9));
    m.fit(train, quiet(1)).unwrap();
    let before = m.evaluate(val.clone(), 32).unwrap();
    let (params, states, _) = m.get_weights().unwrap();
    // Keras: compiling a built model again keeps its weights; only the optimizer, loss and
    // metrics change (the new optimizer starts from zero state).
    compile_on(&mut m, Optimizer::adam(1e-4), "software");
    let (p, s, opt) = m.get_weights().unwrap();
    assert!(p == params && s == states, "a second compile re-initialised the weights");
    assert_eq!(opt.len(), 2);
    assert!(opt.iter().flatten().all(|&v| v == 0.0), "the new optimizer's state is not zero");
    assert_eq!(m.evaluate(val, 32).unwrap()["loss"], before["loss"]);
    assert_eq!(m.compiled_epoch(), 1, "the epochs trained are kept");
}

#[test]
fn b2_a_second_fit_trains_again() {
    let (train, _) = data(96, 8);
    let mut once = compiled(Optimizer::sgd(0.05).momentum(0.9));
    once.fit(train.clone(), quiet(2)).unwrap();
    // Keras trains epochs initial_epoch..epochs, and initial_epoch defaults to 0: a second
    // fit(epochs: 1) trains one more epoch.
    let mut twice = compiled(Optimizer::sgd(0.05).momentum(0.9));
    twice.fit(train.clone(), quiet(1)).unwrap();
    let h = twice.fit(train.clone(), quiet(1)).unwrap();
    assert_eq!(h.epochs(), &[0], "the second fit trained nothing: {:?}", h.history());
    assert_eq!(twice.compiled_epoch(), 2);
    // The data order follows the epochs trained, so two fits of one epoch are one of two.
    assert_eq!(twice.get_weights().unwrap().0, once.get_weights().unwrap().0);
    // initial_epoch numbers the epochs on; at or past `epochs` nothing is left to train.
    let h = twice.fit(train.clone(), FitOptions { initial_epoch: 4, ..quiet(5) }).unwrap();
    assert_eq!((h.epochs(), twice.compiled_epoch()), (&[4][..], 3));
    let e = twice.fit(train, FitOptions { initial_epoch: 2, ..quiet(2) }).unwrap_err().to_string();
    assert!(e.contains("initial_epoch 2") && e.contains("epochs 2"), "{e}");
}

#[test]
fn b3_explicit_normalization_survives_fit() {
    let (train, _) = data(64, 8);
    let mut m = model();
    m.set_normalization(vec![0.4; 3], vec![0.2; 3]).unwrap();
    compile_on(&mut m, Optimizer::sgd(0.05), "software");
    m.fit(train, quiet(1)).unwrap();
    assert_eq!(m.normalization(), (&[0.4f32; 3][..], &[0.2f32; 3][..]), "fit replaced the normalisation the user set");
}

#[test]
fn b3_a_plan_built_before_a_normalization_change_sees_it() {
    let (_, val) = data(8, 32);
    let mut a = compiled(Optimizer::sgd(0.05));
    let first = a.evaluate(val.clone(), 16).unwrap()["loss"];
    a.set_normalization(vec![0.1, 0.5, 0.9], vec![0.3, 0.2, 0.1]).unwrap();
    let changed = a.evaluate(val.clone(), 16).unwrap()["loss"];
    let mut b = model();
    b.set_normalization(vec![0.1, 0.5, 0.9], vec![0.3, 0.2, 0.1]).unwrap();
    compile_on(&mut b, Optimizer::sgd(0.05), "software");
    let fresh = b.evaluate(val, 16).unwrap()["loss"];
    assert_ne!(first, fresh);
    assert_eq!(changed, fresh, "evaluate kept the normalisation of the plan it built first");
}

#[test]
fn b3_statistics_from_the_first_fit_reach_plans_built_before_it() {
    let (train, val) = data(64, 16);
    let mut m = compiled(Optimizer::sgd(0.05));
    m.predict(val.clone(), 16).unwrap();
    m.fit(train, quiet(1)).unwrap();
    let after = m.predict(val.clone(), 16).unwrap();
    let path = std::env::temp_dir().join(format!("convoy-keras-b3-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices("software"), 32).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(after, loaded.predict(val, 16).unwrap(), "predict used the normalisation from before fit");
}

/// Records the learning rate of every step as `fit` hands it over (placed after the
/// scheduler, it sees the rate the step runs at).
struct Rates(Arc<Mutex<Vec<f32>>>);

impl Callback for Rates {
    fn on_batch_begin(&mut self, _batch: usize, ctx: &mut Context) -> convoy::Result<()> {
        self.0.lock().unwrap().push(ctx.learning_rate);
        Ok(())
    }
}

#[test]
fn b4_warm_up_ramps_linearly_per_step() {
    let (train, _) = data(128, 8);
    let mut m = compiled(Optimizer::sgd(0.1));
    let rates = Arc::new(Mutex::new(Vec::new()));
    let schedule = Schedule::Warmup { warmup_epochs: 1.0, then: Box::new(Schedule::Constant) };
    let callbacks: Vec<Box<dyn Callback>> =
        vec![Box::new(LearningRateScheduler::from_schedule(0.1, schedule)), Box::new(Rates(rates.clone()))];
    m.fit(train, FitOptions { callbacks, ..quiet(2) }).unwrap();
    // Four steps an epoch: 0.025, 0.05, 0.075, 0.1, then 0.1.
    let want = [0.025, 0.05, 0.075, 0.1, 0.1, 0.1, 0.1, 0.1];
    let got = rates.lock().unwrap().clone();
    assert!(got.len() == 8 && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "rates per step {got:?}, want {want:?}");
    // The rate reaches the optimizer: a step at rate 0 leaves the weights as they were.
    let mut m = compiled(Optimizer::sgd(0.1));
    let before = m.get_weights().unwrap().0;
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(LearningRateScheduler::from_schedule(0.1, Schedule::Step { step_size: 1, gamma: 0.0 }))];
    m.fit(data(32, 8).0, FitOptions { callbacks, initial_epoch: 1, ..quiet(2) }).unwrap();
    assert_eq!(m.get_weights().unwrap().0, before);
}

/// Records the weights at the end of every epoch, through the model's callback access.
struct EpochWeights(Arc<Mutex<Vec<Vec<f32>>>>);

impl Callback for EpochWeights {
    fn on_epoch_end(&mut self, _epoch: usize, _logs: &Logs, ctx: &mut Context) -> convoy::Result<()> {
        self.0.lock().unwrap().push(ctx.saver.get_weights()?.0);
        Ok(())
    }
}

#[test]
fn b5_early_stopping_is_readable_after_fit_and_restores_the_best_weights() {
    let (train, _) = data(96, 8);
    let mut m = compiled(Optimizer::sgd(0.05).momentum(0.9));
    // The loss falls every epoch, so with a larger loss counted as better the first epoch
    // is the best one and the second stops training.
    let stop = Arc::new(Mutex::new(EarlyStopping::new("loss").mode(Mode::Max).patience(1).restore_best_weights(true)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(EpochWeights(seen.clone())), Box::new(stop.clone())];
    let h = m.fit(train, FitOptions { callbacks, ..quiet(5) }).unwrap();
    assert_eq!(h.epochs(), &[0, 1]);
    let stop = stop.lock().unwrap();
    assert_eq!((stop.stopped_epoch(), stop.best_epoch()), (Some(1), Some(0)));
    assert_eq!(stop.best(), Some(h.history()["loss"][0]));
    let seen = seen.lock().unwrap();
    assert_ne!(seen[0], seen[1]);
    assert_eq!(m.get_weights().unwrap().0, seen[0], "the weights of the best epoch were not restored");
}

/// Records every batch's logs.
struct BatchLogs(Arc<Mutex<Vec<(usize, Logs)>>>);

impl Callback for BatchLogs {
    fn on_batch_end(&mut self, batch: usize, logs: &Logs, _ctx: &mut Context) -> convoy::Result<()> {
        self.0.lock().unwrap().push((batch, logs.clone()));
        Ok(())
    }
}

#[test]
fn b6_batch_logs_include_their_batch() {
    let (train, _) = data(100, 8);
    let mut m = compiled(Optimizer::sgd(0.05));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let h = m.fit(train.clone(), FitOptions { callbacks: vec![Box::new(BatchLogs(seen.clone()))], shuffle: false, ..quiet(1) }).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1, 2, 3]);
    // Batch 0's loss is that of the untrained model on the first 32 samples.
    let (images, labels) = batch(train.as_ref(), 32);
    let mut twin = model();
    let (mean, std) = m.normalization();
    twin.set_normalization(mean.to_vec(), std.to_vec()).unwrap();
    compile_on(&mut twin, Optimizer::sgd(0.05), "software");
    let (want, _) = twin.compute_gradients(&images, &labels).unwrap();
    let first = seen[0].1["loss"];
    assert!((first - want).abs() < 1e-6, "batch 0 reports loss {first}, the model's loss on it is {want}");
    assert_eq!(seen[3].1["batch_size"], 4.0, "the last batch holds 100 - 3 x 32 samples");
    // The running mean after the last batch is the epoch's loss.
    assert!((seen[3].1["loss"] - h.history()["loss"][0]).abs() < 1e-9, "{:?} vs {:?}", seen[3].1, h.history());
}

#[test]
fn b7_a_batch_above_max_batch_is_named() {
    let (train, val) = data(128, 70);
    let mut m = compiled(Optimizer::sgd(0.05));
    let e = m.fit(train, FitOptions { batch_size: 64, ..quiet(1) }).unwrap_err().to_string();
    assert!(e.contains("batch_size 64") && e.contains("max_batch 32"), "{e}");
    let e = m.train_on_batch(&vec![0u8; 40 * 192], &[0; 40]).unwrap_err().to_string();
    assert!(e.contains("batch of 40") && e.contains("max_batch 32"), "{e}");
    // Inference runs any batch size in pieces the staging buffers hold.
    assert_eq!(m.evaluate(val.clone(), 64).unwrap()["samples"], 70.0);
    assert_eq!(m.predict(val, 64).unwrap().len(), 70);
}

#[test]
fn b8_weight_decay_is_decoupled_and_l2_is_in_the_gradient() {
    // Keras 3 applies every optimizer's weight_decay to the weights, p -= lr * wd * p, before
    // the update: Adam's is AdamW's. PyTorch's L2 form is `l2`.
    assert_eq!(Optimizer::adam(1e-3).weight_decay(0.1), Optimizer::adamw(1e-3).weight_decay(0.1));
    assert!(matches!(Optimizer::adamw(1e-3).l2(0.1), Optimizer::Adam { weight_decay: 0.1, .. }));
    // One Adam step from the same weights on the same batch, with and without decay: the
    // decoupled decay moves every kernel weight by exactly -lr * wd * p and nothing else,
    // whatever the gradient; in the gradient (L2) it changes Adam's normalised step instead.
    let (train, _) = data(16, 8);
    let (images, labels) = batch(train.as_ref(), 16);
    let step = |optimizer: Optimizer| {
        let mut m = compiled(optimizer);
        m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
        let before = m.get_weights().unwrap().0;
        m.train_on_batch(&images, &labels).unwrap();
        m.collect(0).unwrap();
        (before, m.get_weights().unwrap().0)
    };
    let (lr, wd) = (1e-2f32, 0.5f32);
    let (p0, plain) = step(Optimizer::adam(lr));
    let (_, decoupled) = step(Optimizer::adam(lr).weight_decay(wd));
    let (_, l2) = step(Optimizer::adam(lr).l2(wd));
    let m = model();
    let layout = convoy::model::layout::Layout::new(m.input_shape(), m.layers()).unwrap();
    // How far each decayed step is from the undecayed one plus -lr * wd * p (kernels only):
    // the decoupled step's largest miss and the L2 step's.
    let misses = |plain: &[f32], decoupled: &[f32], l2: &[f32]| {
        let (mut worst, mut l2_moved) = (0.0f32, 0.0f32);
        for e in &layout.params {
            for i in e.range() {
                let shift = if e.spec.decay { -lr * wd * p0[i] } else { 0.0 };
                worst = worst.max((decoupled[i] - plain[i] - shift).abs());
                l2_moved = l2_moved.max((l2[i] - plain[i] - shift).abs());
            }
        }
        (worst, l2_moved)
    };
    let (worst, l2_moved) = misses(&plain, &decoupled, &l2);
    assert!(worst < 1e-6, "decoupled decay is off by {worst}");
    assert!(l2_moved > 1e-3, "L2 decay acted like the decoupled one ({l2_moved})");
    // SGD (Nesterov momentum) likewise: decoupled, exactly -lr * wd * p more than the plain
    // step; as L2 the decay also passes through the momentum (1 + momentum times, step 1).
    let sgd = || Optimizer::sgd(lr).momentum(0.9).nesterov(true);
    let (_, plain) = step(sgd());
    let (_, decoupled) = step(sgd().weight_decay(wd));
    let (_, l2) = step(sgd().l2(wd));
    let (worst, l2_moved) = misses(&plain, &decoupled, &l2);
    assert!(worst < 1e-6, "SGD's decoupled decay is off by {worst}");
    assert!(l2_moved > 1e-4, "SGD's L2 decay acted like the decoupled one ({l2_moved})");
    assert_ne!(Optimizer::sgd(0.1).weight_decay(5e-4), Optimizer::sgd(0.1).l2(5e-4));
    assert_eq!(Optimizer::from_name("sgd", 0.05).unwrap(), Optimizer::sgd(0.05).momentum(0.9).nesterov(true).l2(5e-4));
}

#[test]
fn b9_predict_takes_raw_images_and_unlabelled_folders() {
    let (train, val) = data(64, 6);
    let mut m = compiled(Optimizer::sgd(0.05));
    m.fit(train, quiet(1)).unwrap();
    // Raw u8 images at the model's input shape, as Keras' predict takes an array.
    let (images, _) = batch(val.as_ref(), 6);
    let from_data = m.predict(val.clone(), 4).unwrap();
    assert_eq!(m.predict_images(&images, 4).unwrap(), from_data);
    let e = m.predict_images(&images[..100], 4).unwrap_err().to_string();
    assert!(e.contains("100 bytes") && e.contains("192"), "{e}");
    // The same images as PNG files of the model's size in a flat folder, in name order.
    let dir = std::env::temp_dir().join(format!("convoy-keras-b9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (i, img) in images.chunks(192).enumerate() {
        image::RgbImage::from_raw(8, 8, img.to_vec()).unwrap().save(dir.join(format!("photo{i}.png"))).unwrap();
    }
    let folder = convoy::model::UnlabelledFolder::open(&dir, 8).unwrap();
    assert_eq!((folder.len(), folder.file(2)), (6, dir.join("photo2.png")));
    assert_eq!(m.predict(Arc::new(folder), 4).unwrap(), from_data);
    // A photo that must be resized and cropped decodes as an image folder's validation image.
    let class = dir.join("val").join("a");
    std::fs::create_dir_all(&class).unwrap();
    let photo = image::RgbImage::from_fn(20, 12, |x, y| image::Rgb([(x * 12) as u8, (y * 20) as u8, ((x * y) % 251) as u8]));
    photo.save(class.join("wide.png")).unwrap();
    let (mut flat, mut split) = (vec![0u8; 192], vec![0u8; 192]);
    convoy::model::UnlabelledFolder::open(&class, 8).unwrap().load(0, &mut flat).unwrap();
    convoy::data::ImageFolder::open(&dir, "val", 8).unwrap().load(0, &mut split).unwrap();
    assert_eq!(flat, split);
    assert!(flat.iter().any(|&v| v != flat[0]), "the crop kept the photo's gradient");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn b10_train_on_batch_in_a_loop_on_one_two_and_three_replicas() {
    let (train, _) = data(16, 8);
    let (images, labels) = batch(train.as_ref(), 16);
    for selection in ["software", "software:2", "software:3"] {
        // Keras' train_on_batch: synchronous, returning the batch's loss and metrics.
        let mut m = model();
        compile_on(&mut m, Optimizer::sgd(0.05).momentum(0.9), selection);
        let mut losses = Vec::new();
        let mut weights = m.get_weights().unwrap().0;
        for i in 0..10 {
            let logs = m.train_on_batch(&images, &labels).unwrap_or_else(|e| panic!("{selection}: call {i}: {e}"));
            assert!((0.0..=1.0).contains(&logs["accuracy"]), "{selection}: {logs:?}");
            losses.push(logs["loss"]);
            // Every call has updated the weights every replica holds when it returns.
            let now = m.get_weights().unwrap().0;
            assert_ne!(now, weights, "{selection}: call {i} left the weights as they were");
            weights = now;
        }
        assert!(losses[9] < losses[0], "{selection}: ten steps on one batch did not lower its loss: {losses:?}");
        // Its per-sample outputs wait for one collect, and do not pile up.
        let (outs, _) = m.collect(0).unwrap();
        assert_eq!(outs.iter().map(|o| o.loss.len()).sum::<usize>(), 16, "{selection}");
        assert!(m.collect(0).unwrap().0.is_empty());
        // The asynchronous variant, never collected in between, neither fails nor hangs.
        for i in 0..10 {
            m.train_on_batch_async(&images, &labels).unwrap_or_else(|e| panic!("{selection}: async call {i}: {e}"));
        }
        let (outs, _) = m.collect(0).unwrap();
        assert_eq!(outs.iter().map(|o| o.loss.len()).sum::<usize>(), 160, "{selection}");
        // Nor do the calls that run steps of their own in between.
        m.train_on_batch_async(&images, &labels).unwrap();
        m.train_on_batch_async(&images, &labels).unwrap();
        let (loss, _) = m.compute_gradients(&images, &labels).unwrap();
        assert!(loss.is_finite(), "{selection}");
        assert_eq!(m.evaluate(train.clone(), 16).unwrap()["samples"], 16.0, "{selection}");
        assert_eq!(m.collect(0).unwrap().0.iter().map(|o| o.loss.len()).sum::<usize>(), 32, "{selection}");
    }
}

#[test]
fn b9_a_saved_model_names_its_classes_after_its_training_data() {
    let (train, _) = data(32, 8);
    let mut m = compiled(Optimizer::sgd(0.05));
    m.fit(train.clone(), quiet(1)).unwrap();
    assert_eq!(m.class_names(), train.class_names());
    let path = std::env::temp_dir().join(format!("convoy-keras-names-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let (loaded, _) = Sequential::load(&path).unwrap();
    assert_eq!(loaded.class_names(), train.class_names());
    // A file whose names do not match its classes is refused, naming the file.
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header["__metadata__"]["class_names"] = serde_json::json!(r#"["cat","dog"]"#);
    let header = header.to_string();
    let mut edited = (header.len() as u64).to_le_bytes().to_vec();
    edited.extend(header.as_bytes());
    edited.extend(&bytes[8 + n..]);
    std::fs::write(&path, edited).unwrap();
    let e = Sequential::load(&path).err().expect("two names for ten classes").to_string();
    let _ = std::fs::remove_file(&path);
    assert!(e.contains(&path.display().to_string()) && e.contains("2 class names") && e.contains("10 classes"), "{e}");
}

#[test]
fn save_and_load_take_any_path_like_value() {
    // Keras' model.save("file") and load_model("file"): a &str, a String or a PathBuf.
    let m = compiled(Optimizer::sgd(0.05));
    let path: String = std::env::temp_dir().join(format!("convoy-keras-paths-{}.safetensors", std::process::id())).to_string_lossy().into_owned();
    m.save(path.as_str()).unwrap();
    let (loaded, _) = Sequential::load(&path).unwrap();
    assert_eq!(loaded.get_weights().unwrap().0, m.get_weights().unwrap().0);
    let again = Sequential::load_compiled(std::path::PathBuf::from(&path), devices("software"), 8).unwrap();
    assert_eq!(again.get_weights().unwrap().0, m.get_weights().unwrap().0);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn compile_options_need_only_the_optimizer() {
    // Keras: model.compile(optimizer=...) defaults the loss, and metrics=["accuracy"] is the
    // usual companion; `fit`'s batch_size defaults to 32, so the staging buffers hold 32.
    let o = CompileOptions::new(Optimizer::sgd(0.1));
    assert_eq!(o.loss, Loss::SparseCategoricalCrossentropy);
    assert_eq!(o.metrics, vec![Metric::Accuracy]);
    assert_eq!((o.seed, o.max_batch, o.label_smoothing, o.devices.len()), (0, 32, 0.0, 0));
    // No devices named: every adapter that helps (here the software one).
    let (train, _) = data(32, 8);
    let mut m = model();
    m.compile(CompileOptions::new(Optimizer::sgd(0.1))).unwrap();
    assert!(!m.devices().is_empty());
    let h = m.fit(train, quiet(1)).unwrap();
    assert!(h.history().contains_key("accuracy"), "{:?}", h.history().keys());
    for bad in [-0.1f32, 1.5, f32::NAN] {
        let e = m.compile(CompileOptions::new(Optimizer::sgd(0.1)).label_smoothing(bad).devices(devices("software"))).unwrap_err().to_string();
        assert!(e.contains("label_smoothing") && e.contains(&bad.to_string()), "{e}");
    }
}

#[test]
fn label_smoothing_reaches_the_loss_and_survives_save_and_load() {
    // keras.losses.CategoricalCrossentropy(label_smoothing=a) on one-hot labels: the targets
    // are (1 - a) * onehot + a / classes, so the loss is -Σ_j t_j log p_j over the softmax p.
    // A model without BatchNorm, so predict's forward is the training step's.
    let (train, _) = data(16, 8);
    let (images, labels) = batch(train.as_ref(), 16);
    let a = 0.2f32;
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Flatten::new()).add(Dense::new(10));
    m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).label_smoothing(a).devices(devices("software")).seed(4)).unwrap();
    let probs = m.predict_images(&images, 16).unwrap();
    let want = probs
        .iter()
        .zip(&labels)
        .map(|(p, &l)| -p.iter().enumerate().map(|(j, &pj)| ((1.0 - a as f64) * (j == l as usize) as u8 as f64 + a as f64 / 10.0) * (pj as f64).ln()).sum::<f64>())
        .sum::<f64>()
        / 16.0;
    let (got, grads) = m.compute_gradients(&images, &labels).unwrap();
    assert!((got - want).abs() < 1e-5, "smoothed loss {got}, want {want}");
    // Without smoothing the same weights give the plain cross-entropy, a different number.
    let plain = -probs.iter().zip(&labels).map(|(p, &l)| (p[l as usize] as f64).ln()).sum::<f64>() / 16.0;
    assert!((got - plain).abs() > 1e-3, "smoothing changed nothing: {got} vs {plain}");
    let path = std::env::temp_dir().join(format!("convoy-keras-smoothing-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut again = Sequential::load_compiled(&path, devices("software"), 16).unwrap();
    let _ = std::fs::remove_file(&path);
    let (loaded, loaded_grads) = again.compute_gradients(&images, &labels).unwrap();
    assert_eq!((loaded, loaded_grads), (got, grads), "the loaded model lost its label smoothing");
}

#[test]
fn the_optimizer_owns_its_schedule_across_fits_and_save_and_load() {
    // Keras: SGD(learning_rate=PiecewiseConstantDecay([2, 5], [0.1, 0.05, 0.01])) evaluates the
    // schedule at optimizer.iterations before every step; a second fit and a loaded model
    // continue from the iterations reached (Keras saves them with the optimizer).
    let schedule = Schedule::piecewise_constant(vec![2, 5], vec![0.1, 0.05, 0.01]);
    let rate = |step: usize| schedule.rate(0.1, step, 4);
    let (train, _) = data(128, 8);
    let mut m = compiled(Optimizer::sgd(0.1).schedule(schedule.clone()));
    let rates = Arc::new(Mutex::new(Vec::new()));
    let fit = |m: &mut Sequential, epochs| m.fit(train.clone(), FitOptions { callbacks: vec![Box::new(Rates(rates.clone()))], ..quiet(epochs) }).unwrap();
    fit(&mut m, 1);
    fit(&mut m, 1);
    let path = std::env::temp_dir().join(format!("convoy-keras-schedule-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices("software"), 32).unwrap();
    let _ = std::fs::remove_file(&path);
    let h = fit(&mut loaded, 1);
    let want: Vec<f32> = (0..12).map(rate).collect();
    assert_eq!(*rates.lock().unwrap(), want, "four steps an epoch: steps 0-3, 4-7 and, after the load, 8-11");
    assert_eq!(h.history()["learning_rate"], [0.01f32 as f64], "the epoch logs the last step's rate");
    // A callback may not set a scheduled rate (Keras: "not settable").
    let e = loaded
        .fit(train.clone(), FitOptions { callbacks: vec![Box::new(LearningRateScheduler::new(|_, _| 0.5))], ..quiet(1) })
        .unwrap_err()
        .to_string();
    assert!(e.contains("learning rate to 0.5") && e.contains("own schedule"), "{e}");
    // A schedule that gives no rate is refused at compile, naming it.
    let mut bad = model();
    let e = bad.compile(CompileOptions::new(Optimizer::sgd(0.1).schedule(Schedule::exponential_decay(0, 0.5))).devices(devices("software"))).unwrap_err().to_string();
    assert!(e.contains("decay_steps must be positive"), "{e}");
}

#[test]
fn each_step_runs_at_its_scheduled_rate() {
    // SGD without momentum moves the weights by exactly -rate * gradient: the rate a step
    // used is read back from the weights, against the schedule at the step's index (here
    // CosineDecay with warm-up, which moves at every step).
    let schedule = Schedule::CosineDecay { decay_steps: 4, alpha: 0.2, warmup_target: Some(0.2), warmup_steps: 2 };
    let (train, _) = data(16, 8);
    let (images, labels) = batch(train.as_ref(), 16);
    let mut m = compiled(Optimizer::sgd(0.05).schedule(schedule.clone()));
    m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
    for k in 0..7 {
        let (_, g) = m.compute_gradients(&images, &labels).unwrap();
        let before = m.get_weights().unwrap().0;
        m.train_on_batch(&images, &labels).unwrap();
        m.collect(0).unwrap();
        let after = m.get_weights().unwrap().0;
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for ((b, a), g) in before.iter().zip(&after).zip(&g) {
            num += (b - a) as f64 * *g as f64;
            den += *g as f64 * *g as f64;
        }
        let (used, want) = (num / den, schedule.rate(0.05, k, 1) as f64);
        assert!((used - want).abs() < 1e-4 * want, "step {k} ran at {used}, the schedule says {want}");
    }
}

#[test]
fn global_clipnorm_moves_the_weights_by_lr_times_clip_on_one_and_two_replicas() {
    // Keras' SGD(learning_rate=lr, global_clipnorm=c) without momentum: a gradient whose
    // global norm is above c is scaled to norm c, so the step moves the weights by exactly
    // lr * c in norm, along the gradient. With two replicas the norm is the summed gradient's,
    // after the exchange, so both take the same step.
    let (train, _) = data(16, 8);
    let (images, labels) = batch(train.as_ref(), 16);
    let (lr, clip) = (0.5f32, 0.01f32);
    for selection in ["software", "software:2"] {
        let mut m = model();
        m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
        compile_on(&mut m, Optimizer::sgd(lr).global_clipnorm(clip), selection);
        let before = m.get_weights().unwrap().0;
        m.train_on_batch(&images, &labels).unwrap();
        m.collect(0).unwrap();
        let after = m.get_weights().unwrap().0;
        let moved = before.iter().zip(&after).map(|(b, a)| (*b as f64 - *a as f64).powi(2)).sum::<f64>().sqrt();
        let want = (lr * clip) as f64;
        assert!((moved - want).abs() < 1e-3 * want, "{selection}: the weights moved {moved} in norm, want lr * clip = {want}");
        let replicas = m.replica_weights().unwrap();
        assert!(replicas.iter().all(|(p, _)| *p == replicas[0].0), "{selection}: the replicas took different steps");
        // The clip was tiny: unclipped, the step would have been far longer.
        let mut twin = model();
        twin.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
        compile_on(&mut twin, Optimizer::sgd(lr), selection);
        twin.train_on_batch(&images, &labels).unwrap();
        twin.collect(0).unwrap();
        let free = before.iter().zip(&twin.get_weights().unwrap().0).map(|(b, a)| (*b as f64 - *a as f64).powi(2)).sum::<f64>().sqrt();
        assert!(free > 10.0 * want, "{selection}: the unclipped step moved only {free}");
    }
    let mut m = model();
    for bad in [0.0f32, -1.0, f32::NAN] {
        let e = m.compile(CompileOptions::new(Optimizer::sgd(0.1).global_clipnorm(bad)).devices(devices("software"))).unwrap_err().to_string();
        assert!(e.contains("global_clipnorm") && e.contains(&bad.to_string()), "{e}");
    }
    // Above the gradient's norm the clip changes nothing: the same weights as without it.
    let mut a = compiled(Optimizer::sgd(lr));
    let mut b = compiled(Optimizer::sgd(lr).global_clipnorm(1e6));
    for m in [&mut a, &mut b] {
        m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
        m.train_on_batch(&images, &labels).unwrap();
        m.collect(0).unwrap();
    }
    assert_eq!(a.get_weights().unwrap().0, b.get_weights().unwrap().0);
}

#[test]
fn validation_split_sets_the_last_samples_aside_before_shuffling() {
    // Keras: split_at = floor(n * (1 - validation_split)); x[:split_at] trains (shuffled),
    // x[split_at:] is the validation data. 100 samples at 0.25: 75 train, the last 25 validate.
    let (train, _) = data(100, 8);
    let mut m = compiled(Optimizer::sgd(0.05));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let h = m.fit(train.clone(), FitOptions { validation_split: 0.25, callbacks: vec![Box::new(BatchLogs(seen.clone()))], ..quiet(1) }).unwrap();
    let sizes: Vec<f64> = seen.lock().unwrap().iter().map(|(_, l)| l["batch_size"]).collect();
    assert_eq!(sizes, [32.0, 32.0, 11.0], "75 samples trained on, in batches of 32");
    let last = m.evaluate(Arc::new(convoy::data::Subset::new(train.clone(), 75..100).unwrap()), 32).unwrap();
    assert_eq!(h.history()["val_loss"], [last["loss"]], "val_loss is the last 25 samples' loss");
    for bad in [1.0f32, -0.1, f32::NAN] {
        let e = m.fit(train.clone(), FitOptions { validation_split: bad, ..quiet(1) }).unwrap_err().to_string();
        assert!(e.contains("validation_split") && e.contains(&bad.to_string()), "{e}");
    }
    let e = m.fit(train.clone(), FitOptions { validation_split: 0.995, ..quiet(1) }).unwrap_err().to_string();
    assert!(e.contains("leaves 0 to train on and 100 to validate on"), "{e}");
    let e = m.fit(train.clone(), FitOptions { validation_split: 0.5, validation_data: Some(train.clone()), ..quiet(1) }).unwrap_err().to_string();
    assert!(e.contains("validation_data"), "{e}");
}

#[test]
fn steps_per_epoch_makes_an_epoch_that_many_batches() {
    // Keras' steps_per_epoch: 128 samples in batches of 32 are four batches; an epoch of two
    // takes the first two of the epoch's order, and the optimizer counts two steps an epoch.
    let (train, _) = data(128, 8);
    let mut m = compiled(Optimizer::sgd(0.05).schedule(Schedule::piecewise_constant(vec![3], vec![0.05, 0.01])));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rates = Arc::new(Mutex::new(Vec::new()));
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(BatchLogs(seen.clone())), Box::new(Rates(rates.clone()))];
    let h = m.fit(train.clone(), FitOptions { steps_per_epoch: Some(2), callbacks, ..quiet(3) }).unwrap();
    assert_eq!(seen.lock().unwrap().iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1, 0, 1, 0, 1]);
    assert_eq!(*rates.lock().unwrap(), [0.05, 0.05, 0.05, 0.05, 0.01, 0.01], "six steps in all");
    assert_eq!(h.epochs(), &[0, 1, 2]);
    for bad in [0, 5] {
        let e = m.fit(train.clone(), FitOptions { steps_per_epoch: Some(bad), ..quiet(1) }).unwrap_err().to_string();
        assert!(e.contains(&format!("steps_per_epoch {bad}")) && e.contains("1..=4"), "{e}");
    }
}

#[test]
fn class_weight_multiplies_each_samples_loss_and_gradient() {
    // Keras' class_weight: sample i's loss and gradient times w[label_i], the batch's loss
    // Σ w_i l_i / N. A model without BatchNorm, so each sample's gradient is its own
    // (compute_gradients on it alone) and one SGD step moves the weights by
    // -lr / N Σ w_i g_i.
    let (train, _) = data(8, 8);
    let (images, labels) = batch(train.as_ref(), 8);
    let lr = 0.1f32;
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Flatten::new()).add(Dense::new(10));
    m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
    m.compile(CompileOptions::new(Optimizer::sgd(lr)).devices(devices("software")).seed(2)).unwrap();
    let weights: std::collections::BTreeMap<u32, f32> = (0..10).map(|c| (c, [0.5, 2.0, 0.0, 1.5, 3.0][c as usize % 5])).collect();
    let before = m.get_weights().unwrap().0;
    let (mut want, mut want_loss) = (before.iter().map(|&v| v as f64).collect::<Vec<_>>(), 0.0);
    for (i, &l) in labels.iter().enumerate() {
        let (loss, g) = m.compute_gradients(&images[i * 192..(i + 1) * 192], &[l]).unwrap();
        let w = weights[&l] as f64;
        want_loss += w * loss / 8.0;
        want.iter_mut().zip(&g).for_each(|(p, g)| *p -= lr as f64 * w * *g as f64 / 8.0);
    }
    let h = m.fit(train.clone(), FitOptions { batch_size: 8, shuffle: false, class_weight: Some(weights.clone()), ..quiet(1) }).unwrap();
    let got = m.get_weights().unwrap().0;
    let miss = got.iter().zip(&want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
    assert!(miss < 1e-6, "the weighted step is off by {miss}");
    assert!((h.history()["loss"][0] - want_loss).abs() < 1e-5 * want_loss, "weighted loss {:?}, want {want_loss}", h.history()["loss"]);
    // The weights were that fit's: a step after it is unweighted again.
    let (after, _) = m.compute_gradients(&images, &labels).unwrap();
    let mean = labels.iter().enumerate().map(|(i, &l)| m.compute_gradients(&images[i * 192..(i + 1) * 192], &[l]).unwrap().0).sum::<f64>() / 8.0;
    assert!((after - mean).abs() < 1e-5 * mean, "{after} vs the unweighted {mean}");
    for (bad, want) in [((10, 1.0), "names class 10, but the model has 10 classes"), ((3, -1.0), "class 3 must be finite and >= 0, got -1")] {
        let cw = std::collections::BTreeMap::from([bad]);
        let e = m.fit(train.clone(), FitOptions { batch_size: 8, class_weight: Some(cw), ..quiet(1) }).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn class_weight_weighs_mean_squared_error_by_each_samples_label() {
    // Keras: class_weight becomes sample_weight[i] = class_weight[class of y_i], the class of
    // a one-hot target being its argmax. convoy's MSE targets are the one-hot labels, so a
    // sample weighs its label's weight, and one SGD step moves by -lr / N Σ w_i g_i.
    let (train, _) = data(8, 8);
    let (images, labels) = batch(train.as_ref(), 8);
    let lr = 0.1f32;
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Flatten::new()).add(Dense::new(10));
    m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
    m.compile(CompileOptions::new(Optimizer::sgd(lr)).loss(Loss::MeanSquaredError).devices(devices("software")).seed(2)).unwrap();
    let weights: std::collections::BTreeMap<u32, f32> = (0..10).map(|c| (c, [0.5, 2.0, 0.0, 1.5, 3.0][c as usize % 5])).collect();
    let before = m.get_weights().unwrap().0;
    let (mut want, mut want_loss) = (before.iter().map(|&v| v as f64).collect::<Vec<_>>(), 0.0);
    for (i, &l) in labels.iter().enumerate() {
        let (loss, g) = m.compute_gradients(&images[i * 192..(i + 1) * 192], &[l]).unwrap();
        let w = weights[&l] as f64;
        want_loss += w * loss / 8.0;
        want.iter_mut().zip(&g).for_each(|(p, g)| *p -= lr as f64 * w * *g as f64 / 8.0);
    }
    let h = m.fit(train.clone(), FitOptions { batch_size: 8, shuffle: false, class_weight: Some(weights), ..quiet(1) }).unwrap();
    let got = m.get_weights().unwrap().0;
    let miss = got.iter().zip(&want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
    assert!(miss < 1e-6, "the weighted step is off by {miss}");
    assert!((h.history()["loss"][0] - want_loss).abs() < 1e-5 * want_loss, "weighted loss {:?}, want {want_loss}", h.history()["loss"]);
}

#[test]
fn a_frozen_layer_gets_no_update_and_counts_as_non_trainable() {
    // Keras: layer.trainable = False, then compile: the layer's weights take no update (and no
    // weight decay) and count as non-trainable in the summary; trainable again after the next
    // compile.
    let (train, _) = data(64, 8);
    let layout = {
        let m = model();
        convoy::model::layout::Layout::new(m.input_shape(), m.layers()).unwrap()
    };
    let conv: Vec<std::ops::Range<usize>> = {
        let (p0, np, _, _) = layout.per_layer[0];
        layout.params[p0..p0 + np].iter().map(|e| e.range()).collect()
    };
    let moved = |a: &[f32], b: &[f32], ranges: &[std::ops::Range<usize>]| ranges.iter().any(|r| a[r.clone()] != b[r.clone()]);
    for selection in ["software", "software:2"] {
        let mut m = model();
        let all = m.summarize().unwrap();
        m.set_trainable(0, false).unwrap();
        assert!(!m.is_trainable(0) && m.is_trainable(5));
        let s = m.summarize().unwrap();
        let conv_params = all.layers[0].trainable_params;
        assert!(conv_params > 0);
        assert_eq!((s.layers[0].trainable_params, s.params), (0, all.params));
        assert_eq!((s.trainable_params, s.non_trainable_params), (all.trainable_params - conv_params, all.non_trainable_params + conv_params));
        compile_on(&mut m, Optimizer::sgd(0.05).momentum(0.9).weight_decay(0.1), selection);
        let before = m.get_weights().unwrap().0;
        m.fit(train.clone(), quiet(1)).unwrap();
        let after = m.get_weights().unwrap().0;
        assert!(!moved(&before, &after, &conv), "{selection}: the frozen convolution moved");
        let rest: Vec<std::ops::Range<usize>> = layout.params.iter().map(|e| e.range()).filter(|r| !conv.contains(r)).collect();
        assert!(moved(&before, &after, &rest), "{selection}: nothing else trained");
        m.set_trainable(0, true).unwrap();
        compile_on(&mut m, Optimizer::sgd(0.05), selection);
        m.fit(train.clone(), quiet(1)).unwrap();
        assert!(moved(&after, &m.get_weights().unwrap().0, &conv), "{selection}: unfrozen and compiled again, the convolution still did not train");
    }
    let mut m = model();
    let e = m.set_trainable(6, false).unwrap_err().to_string();
    assert!(e.contains("no layer 6") && e.contains("6 layers"), "{e}");
}

#[test]
fn global_clipnorm_with_a_frozen_layer_measures_the_trainable_gradients_only() {
    // Keras computes no gradient for a frozen layer, so global_clipnorm scales the trainable
    // ones to norm c: one SGD step moves the trainable weights by exactly lr * c in norm and
    // the frozen ones not at all. (With the frozen convolution's gradient in the norm, the
    // step would be shorter.)
    let (train, _) = data(16, 8);
    let (images, labels) = batch(train.as_ref(), 16);
    let (lr, clip) = (0.5f32, 0.01f32);
    let layout = convoy::model::layout::Layout::new(model().input_shape(), model().layers()).unwrap();
    let (p0, np, _, _) = layout.per_layer[0];
    let conv: Vec<std::ops::Range<usize>> = layout.params[p0..p0 + np].iter().map(|e| e.range()).collect();
    for selection in ["software", "software:2"] {
        let mut m = model();
        m.set_normalization(vec![0.5; 3], vec![0.25; 3]).unwrap();
        m.set_trainable(0, false).unwrap();
        compile_on(&mut m, Optimizer::sgd(lr).global_clipnorm(clip), selection);
        let (_, g) = m.compute_gradients(&images, &labels).unwrap();
        let frozen_norm = conv.iter().flat_map(|r| &g[r.clone()]).map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
        assert!(frozen_norm > clip as f64, "{selection}: the frozen layer's gradient ({frozen_norm}) would not have shortened the step");
        let before = m.get_weights().unwrap().0;
        m.train_on_batch(&images, &labels).unwrap();
        m.collect(0).unwrap();
        let after = m.get_weights().unwrap().0;
        assert!(conv.iter().all(|r| before[r.clone()] == after[r.clone()]), "{selection}: the frozen convolution moved");
        let moved = before.iter().zip(&after).map(|(b, a)| (*b as f64 - *a as f64).powi(2)).sum::<f64>().sqrt();
        let want = (lr * clip) as f64;
        assert!((moved - want).abs() < 1e-3 * want, "{selection}: the weights moved {moved} in norm, want lr * clip = {want}");
    }
}

#[test]
fn a_frozen_batch_norm_runs_in_inference_mode_in_training_too() {
    // Keras 3: bn.trainable = False makes a BatchNormalization use (and keep) its moving
    // statistics in training, so each sample's loss no longer depends on the rest of its
    // batch, and gamma and beta get no gradient. Trained unfrozen first, so the statistics
    // are the data's, not the initial zeros and ones.
    let (train, _) = data(64, 8);
    let (images, labels) = batch(train.as_ref(), 8);
    let layout = convoy::model::layout::Layout::new(model().input_shape(), model().layers()).unwrap();
    let (p0, np, s0, ns) = layout.per_layer[1];
    let bn_params: Vec<std::ops::Range<usize>> = layout.params[p0..p0 + np].iter().map(|e| e.range()).collect();
    let bn_states: Vec<std::ops::Range<usize>> = layout.states[s0..s0 + ns].iter().map(|e| e.range()).collect();
    for selection in ["software", "software:2"] {
        let mut m = model();
        compile_on(&mut m, Optimizer::sgd(0.05).momentum(0.9), selection);
        m.fit(train.clone(), quiet(1)).unwrap();
        m.set_trainable(1, false).unwrap();
        compile_on(&mut m, Optimizer::sgd(0.05).momentum(0.9), selection);
        let (params, states, _) = m.get_weights().unwrap();
        let (loss, grads) = m.compute_gradients(&images, &labels).unwrap();
        let alone = (0..8).map(|i| m.compute_gradients(&images[i * 192..(i + 1) * 192], &labels[i..i + 1]).unwrap().0).sum::<f64>() / 8.0;
        assert!((loss - alone).abs() < 1e-5 * loss, "{selection}: the batch's loss {loss} is not the mean of its samples' {alone}");
        assert!(bn_params.iter().all(|r| grads[r.clone()].iter().all(|&g| g == 0.0)), "{selection}: gamma and beta got a gradient");
        m.fit(train.clone(), quiet(1)).unwrap();
        let (p1, s1, _) = m.get_weights().unwrap();
        assert!(bn_states.iter().all(|r| s1[r.clone()] == states[r.clone()]), "{selection}: the moving statistics moved");
        assert!(bn_params.iter().all(|r| p1[r.clone()] == params[r.clone()]), "{selection}: gamma or beta moved");
        assert_ne!(p1, params, "{selection}: nothing trained");
    }
    // Unfrozen, the same batch's loss depends on its composition again (batch statistics).
    let mut m = model();
    compile_on(&mut m, Optimizer::sgd(0.05), "software");
    let (loss, _) = m.compute_gradients(&images, &labels).unwrap();
    let alone = (0..8).map(|i| m.compute_gradients(&images[i * 192..(i + 1) * 192], &labels[i..i + 1]).unwrap().0).sum::<f64>() / 8.0;
    assert!((loss - alone).abs() > 1e-3 * loss, "batch statistics: {loss} against {alone}");
}

#[test]
fn frozen_flags_are_saved_and_old_files_load_as_trainable() {
    // Keras writes "trainable": false in a frozen layer's config; load restores it, so a
    // frozen stem stays frozen (and its BatchNorm in inference mode) when training resumes.
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(4, 3).padding(Padding::Same)).add(BatchNormalization::new()).add(ReLU::new());
    let main: Vec<Box<dyn Layer>> = vec![Box::new(Conv2D::new(4, 3).padding(Padding::Same)), Box::new(BatchNormalization::new())];
    m.add(Residual::new(main, vec![]));
    m.add(Flatten::new()).add(Dense::new(10));
    for i in [0, 1, 3] {
        m.set_trainable(i, false).unwrap();
    }
    compile_on(&mut m, Optimizer::sgd(0.1), "software");
    let arch = m.architecture();
    let flags: Vec<Option<bool>> = (0..6).map(|i| arch["layers"][i]["config"].get("trainable").map(|v| v.as_bool().unwrap())).collect();
    assert_eq!(flags, [Some(false), Some(false), None, Some(false), None, None]);
    let path = std::env::temp_dir().join(format!("convoy-keras-frozen-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let (loaded, _) = Sequential::load(&path).unwrap();
    assert_eq!((0..6).map(|i| loaded.is_trainable(i)).collect::<Vec<_>>(), [false, false, true, false, true, true]);
    let mut resumed = Sequential::load_compiled(&path, devices("software"), 32).unwrap();
    assert_eq!(resumed.summarize().unwrap().trainable_params, m.summarize().unwrap().trainable_params);
    let (train, _) = data(32, 8);
    let before = resumed.get_weights().unwrap();
    resumed.fit(train, quiet(1)).unwrap();
    let after = resumed.get_weights().unwrap();
    assert_eq!(before.1, after.1, "the frozen BatchNorms' moving statistics moved after loading");
    std::fs::remove_file(&path).unwrap();
    // A file written before the flag was saved has no key: every layer trains.
    let mut old = arch.clone();
    for l in old["layers"].as_array_mut().unwrap() {
        l["config"].as_object_mut().unwrap().remove("trainable");
    }
    let o = Sequential::from_architecture(&old).unwrap();
    assert!((0..6).all(|i| o.is_trainable(i)));
    let mut bad = arch.clone();
    bad["layers"][1]["config"]["trainable"] = "no".into();
    let e = Sequential::from_architecture(&bad).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("layer 1") && e.contains("trainable") && e.contains("\"no\""), "{e}");
    // Only a model's own layers are frozen: a flag on a block's sub-layer is refused, not dropped.
    let mut inner = arch.clone();
    inner["layers"][3]["config"]["main"][1]["config"]["trainable"] = false.into();
    let e = Sequential::from_architecture(&inner).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("BatchNormalization") && e.contains("whole residual block"), "{e}");
}

#[test]
fn checkpoint_names_name_the_sub_layers_and_old_names_still_load() {
    // Issue 14, item 6: a residual block's tensors are named by sub-layer, as Keras names
    // layers (`residual/batch_normalization_1/moving_mean`), not by their position in the
    // block's list (`residual/4_moving_mean`, what files written before hold).
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(4, 3).padding(Padding::Same));
    let main: Vec<Box<dyn Layer>> = vec![Box::new(Conv2D::new(4, 3).padding(Padding::Same)), Box::new(BatchNormalization::new()), Box::new(ReLU::new()), Box::new(Conv2D::new(4, 3).padding(Padding::Same)), Box::new(BatchNormalization::new())];
    m.add(Residual::new(main, vec![Box::new(Conv2D::new(4, 1)), Box::new(BatchNormalization::new())]));
    m.add(Flatten::new()).add(Dense::new(10));
    compile_on(&mut m, Optimizer::sgd(0.1), "software");
    let layout = m.definition().build_layout().unwrap();
    let names: Vec<&str> = layout.params.iter().chain(&layout.states).map(|e| e.name.as_str()).collect();
    for want in ["conv2d/kernel", "residual/conv2d/kernel", "residual/conv2d_1/bias", "residual/batch_normalization/gamma", "residual/conv2d_2/kernel", "residual/batch_normalization_2/beta", "residual/batch_normalization_1/moving_mean", "dense/kernel"] {
        assert!(names.contains(&want), "{want} not among {names:?}");
    }
    let path = std::env::temp_dir().join(format!("convoy-names-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let (loaded, _) = Sequential::load(&path).unwrap();
    let (want, got) = (m.get_weights().unwrap(), loaded.get_weights().unwrap());
    assert_eq!((&got.0, &got.1), (&want.0, &want.1));
    // The same file with the old names loads to the same weights.
    let bytes = std::fs::read(&path).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let legacy: std::collections::HashMap<&str, &str> = layout.params.iter().chain(&layout.states).map(|e| (e.name.as_str(), e.legacy_name.as_str())).collect();
    assert_eq!(legacy["residual/batch_normalization_1/moving_mean"], "residual/2_moving_mean");
    let renamed: Vec<(String, safetensors::tensor::TensorView)> = st.tensors().into_iter().map(|(n, t)| (legacy.get(n.as_str()).map_or(n.clone(), |l| l.to_string()), t)).collect();
    let old = safetensors::tensor::serialize(renamed, header.metadata().clone()).unwrap();
    std::fs::write(&path, old).unwrap();
    let got = Sequential::load(&path).unwrap().0.get_weights().unwrap();
    assert_eq!((&got.0, &got.1), (&want.0, &want.1));
    let _ = std::fs::remove_file(&path);
}
