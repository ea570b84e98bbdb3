//! The check itself: train a compiled model a few steps on its devices and hold every step
//! against the f64 reference, which takes its ReLU masks and max-pool choices from each
//! replica's own forward pass.
//!
//! Each step starts from convoy's weights (not the reference's), so errors never compound
//! and a step's error is that step's: the gradient of the mean loss over the global batch
//! (each replica's share with its own BatchNorm statistics, as convoy trains), the per-sample
//! losses, the moving statistics after the step (per replica, then averaged as convoy does
//! before any read), and the optimizer's update of every parameter and state tensor given
//! convoy's gradient.

use crate::check::{optimizer as ref_optimizer, train_step_pair_for, Act, Decision, Net, Node};
use crate::model::DTypePolicy;
use crate::model::layout::Layout;
use crate::model::plan::Record;
use crate::model::Sequential;
use crate::{bail, Device, Result};

/// The bound every compared tensor is held to: max-norm relative error, as the kernel tests.
/// Gradients, losses and forward drift are held to [`ROUNDING_SLACK`] times what plain f32
/// arithmetic gets where that is larger (see [`Report::grad_bound`]).
pub const BOUND: f64 = 1e-4;

/// How much further from f64 than a plain f32 implementation of the same step convoy may be.
/// The plain one sums in order; convoy's kernels sum in tiles and trees, which round less, so
/// on the zoo they land at 0.3-1x of it; 4x leaves room for an adapter's own exp, sqrt and
/// division, and still fails a step that is wrong by more than rounding.
pub const ROUNDING_SLACK: f64 = 4.0;

/// The smallest scale a gradient tensor's error is measured against, as a fraction of the
/// largest gradient of its layer: a tensor smaller than that everywhere is held to an
/// absolute error of `BOUND * GRAD_FLOOR` of that largest gradient.
pub const GRAD_FLOOR: f64 = 1e-2;

/// The worst error of one kind of tensor over the run, and where it was.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Worst {
    /// The largest error seen, on the scale its kind is measured on (NaN: one could not be
    /// measured).
    pub error: f64,
    /// `step 2: conv2d_3/kernel`
    pub at: String,
}

impl Worst {
    fn take(&mut self, error: f64, at: impl FnOnce() -> String) {
        // NaN wins and stays: an error the comparison could not measure is the worst one.
        if !self.error.is_nan() && (error.is_nan() || error > self.error || self.at.is_empty()) {
            self.error = error;
            self.at = at();
        }
    }
}

/// What a check found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every error under its bound and no device decision against a clear f64 margin.
    pub ok: bool,
    /// Gradients of every parameter tensor, summed over the replicas.
    pub grad: Worst,
    /// What the gradients are held to: [`BOUND`], or [`ROUNDING_SLACK`] times the error of
    /// the same step in plain f32 arithmetic (`f32_grad`) where that is larger. Deep models
    /// at small batches are ill-conditioned: a BatchNorm over few rows turns a rounding
    /// error into a large one, and any correct f32 implementation shows it (PyTorch fp32,
    /// cuDNN, TF32 off, against f64 with its decisions replayed, `benches/torch_f64_check.py`
    /// on an H100: ResNet-50 gradients 1.0-1.8e-4 at batch 16-32, 1.6-2.5e-3 at batch 8 and
    /// 12 px; ResNet-18 1.5e-5).
    pub grad_bound: f64,
    /// The per-sample losses' bound, likewise from `f32_loss`.
    pub loss_bound: f64,
    /// The drift's bound, likewise from `f32_drift`: the drift widens the tie band, so it
    /// must itself be explained by rounding.
    pub drift_bound: f64,
    /// The same steps with every operation rounded to f32 in order (a plain f32
    /// implementation), against the f64 reference: its worst gradient...
    pub f32_grad: Worst,
    /// ...its worst per-sample loss...
    pub f32_loss: Worst,
    /// ...its worst drift...
    pub f32_drift: Worst,
    /// ...and its worst moving statistics.
    pub f32_moving_stats: Worst,
    /// The moving statistics' bound, likewise from `f32_moving_stats`.
    pub moving_stats_bound: f64,
    /// Per-sample losses.
    pub loss: Worst,
    /// Parameters after the update, relative to the size of the update.
    pub update: Worst,
    /// Optimizer state (velocity, moments).
    pub optimizer_state: Worst,
    /// BatchNorm's moving statistics after the step.
    pub moving_stats: Worst,
    /// Units within 1e-5 of their layer's RMS of the kink (ReLU at zero, max-pool window
    /// maxima), or within twice the layer's measured drift: either side is right in f32,
    /// so the reference takes the device's.
    pub ties: usize,
    /// Ties the device decided the other way than the f64 values would.
    pub flipped: usize,
    /// The largest drift of a layer's f32 pre-activations from f64, relative to the
    /// layer's RMS, which widens that layer's tie band (see `TIE_MARGIN`).
    pub drift: Worst,
    /// Device decisions against a clear f64 margin: a wrong forward pass...
    pub mismatch_count: usize,
    /// ...and the first few of each layer, described.
    pub mismatches: Vec<String>,
    /// Steps compared.
    pub steps: usize,
    /// Steps the loss scale skipped for an overflow (mixed_float16), each taken again.
    pub skipped_steps: usize,
    /// Samples per replica in each step.
    pub shares: Vec<usize>,
}

impl Report {
    fn finish(mut self) -> Report {
        // A NaN from the rounded run must not loosen anything (max() would drop it).
        let bound = |plain: f64| if ROUNDING_SLACK * plain > BOUND { ROUNDING_SLACK * plain } else { BOUND };
        (self.grad_bound, self.loss_bound, self.drift_bound) = (bound(self.f32_grad.error), bound(self.f32_loss.error), bound(self.f32_drift.error));
        self.moving_stats_bound = bound(self.f32_moving_stats.error);
        let others = [&self.update, &self.optimizer_state];
        self.ok = self.mismatch_count == 0
            && self.grad.error < self.grad_bound
            && self.loss.error < self.loss_bound
            && self.drift.error < self.drift_bound
            && self.moving_stats.error < self.moving_stats_bound
            && others.iter().all(|w| w.error < BOUND);
        self
    }
}

/// Max-norm relative error `max |got - want| / max |want|`; NaN when `got` is not finite.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    rel_err_floored(got, want, 0.0)
}

/// [`rel_err`] with the scale `max |want|` raised to at least `floor`.
fn rel_err_floored<G: Copy + Into<f64>>(got: &[G], want: &[f64], floor: f64) -> f64 {
    if got.iter().any(|&g| !g.into().is_finite()) {
        return f64::NAN;
    }
    let scale = want.iter().fold(floor, |m, w| m.max(w.abs()));
    let diff = got.iter().zip(want).fold(0.0f64, |m, (&g, w)| m.max((g.into() - w).abs()));
    if scale == 0.0 { diff } else { diff / scale }
}

/// The error of parameters after an update, relative to the largest update of the tensor:
/// each element may differ by two units in the last place of the f32 result (rounding of
/// `p - lr * u` and of the state), the rest counts against the update's size.
fn update_err(after: &[f32], before: &[f32], want: &[f64]) -> f64 {
    if after.iter().any(|a| !a.is_finite()) {
        return f64::NAN;
    }
    let step = before.iter().zip(want).fold(0.0f64, |m, (b, w)| m.max((*b as f64 - w).abs()));
    let diff = after.iter().zip(want).fold(0.0f64, |m, (a, w)| {
        let ulp = (w.abs() as f32).max(f32::MIN_POSITIVE);
        let ulp = (f32::from_bits(ulp.to_bits() + 1) - ulp) as f64;
        m.max(((*a as f64 - w).abs() - 2.0 * ulp).max(0.0))
    });
    if step == 0.0 { diff } else { diff / step }
}

/// Reads the device's decisions for one recorded layer: ReLU outputs (standalone or fused)
/// and max-pool choices, nested for residual blocks.
fn decision(device: &Device, node: &Node, saved: &crate::layers::Saved) -> Result<Decision> {
    Ok(match node {
        Node::ReLU | Node::BatchNorm { relu: true, .. } | Node::Add { relu: true } | Node::Activation(Act::Rectifier { .. }) => Decision::Relu(device.read_values(&saved.output)?),
        Node::MaxPool { .. } | Node::GlobalMaxPool { .. } => {
            let arg = saved.extra.first().ok_or_else(|| crate::Error::Config("max pool record without its argmax".into()))?;
            Decision::MaxPool(device.read_u32(arg)?)
        }
        Node::Augment { .. } => {
            let draws = saved.extra.first().ok_or_else(|| crate::Error::Config("augmentation record without its draws".into()))?;
            Decision::Augment(device.read_u32(draws)?.into_iter().map(|v| v as i32).collect())
        }
        Node::Residual { main, shortcut, relu } => {
            if saved.inner.len() != main.len() + shortcut.len() {
                bail!(Config, "residual record has {} sub-layers, the reference expects {}", saved.inner.len(), main.len() + shortcut.len());
            }
            let (m, s) = saved.inner.split_at(main.len());
            let chain = |nodes: &[Node], recs: &[(crate::Tensor, crate::layers::Saved)]| -> Result<Vec<Decision>> {
                nodes.iter().zip(recs).map(|(n, (_, rec))| decision(device, n, rec)).collect()
            };
            Decision::Residual { main: chain(main, m)?, shortcut: chain(shortcut, s)?, join: if *relu { Some(device.read_values(&saved.output)?) } else { None } }
        }
        _ => Decision::None,
    })
}

/// The decisions of a replica's last training step, one per node of `net`.
pub fn decisions(device: &Device, net: &Net, records: &[Record]) -> Result<Vec<Decision>> {
    if records.len() != net.nodes.len() {
        bail!(Config, "the device recorded {} layers, the reference has {} nodes", records.len(), net.nodes.len());
    }
    net.nodes.iter().zip(records).map(|(n, (_, _, saved))| decision(device, n, saved)).collect()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The fewest rows per channel a BatchNorm may normalise over for its step to be checked.
/// Over n rows the normalised output has n - 1 degrees of freedom and a gradient that
/// nearly vanishes as n falls (over two rows x_hat is ±1 whatever x is): f32 rounding is then
/// most of what remains. Measured on the CIFAR ResNet-18 at 7 px (its last stage at 1x1):
/// 2 rows 4.7e-1, 3 rows 1.1e-3, 6 rows 4.0e-5, 12 rows 1.3e-5 gradient error, while every
/// shape with 8 rows or more stays at or below ~1e-5.
pub const MIN_BATCHNORM_ROWS: usize = 8;

/// The smallest number of rows any BatchNorm of `model` normalises over for a share of
/// `share` samples, with the layer's name.
fn fewest_batchnorm_rows(model: &Sequential, share: usize) -> Option<(usize, String)> {
    let def = model.definition();
    let layout = &def.layout;
    def.layers
        .iter()
        .enumerate()
        .filter(|(_, l)| l.class_name() == "BatchNormalization" || l.config().to_string().contains("\"BatchNormalization\""))
        // A frozen one normalises with its moving statistics: nothing cancels over few rows.
        .filter(|(i, _)| !def.frozen.contains(i))
        // A residual block's BatchNorms all run at the block's output resolution (its stride
        // is taken by the first convolution of each chain).
        .map(|(i, _)| (share * layout.shapes[i][..layout.shapes[i].len() - 1].iter().product::<usize>(), layout.layer_names[i].clone()))
        .min_by_key(|(rows, _)| *rows)
}

/// Trains `model` (compiled, on any number of devices) one step per batch of `batches` and
/// checks each step against the f64 reference. The model's weights move as training would
/// move them; its plans keep their forward's tensors while the check runs.
pub fn check(model: &mut Sequential, batches: &[(Vec<u8>, Vec<u32>)]) -> Result<Report> {
    check_edited(model, batches, |_| {})
}

/// [`check`], with `edit` applied to each replica's decisions before the reference takes
/// them: the tests of the check itself feed it a wrong mask and see it fail.
fn check_edited(model: &mut Sequential, batches: &[(Vec<u8>, Vec<u32>)], edit: impl FnMut(&mut [Decision])) -> Result<Report> {
    let report = check_steps(model, batches, edit);
    // Plans built from here on leave their activations to the pool again, whether the
    // check finished or stopped at an error.
    if let Ok(c) = model.compiled() {
        for r in &mut c.replicas.replicas {
            r.keep_records(false);
        }
    }
    report
}

fn check_steps(model: &mut Sequential, batches: &[(Vec<u8>, Vec<u32>)], mut edit: impl FnMut(&mut [Decision])) -> Result<Report> {
    let net = Net::from_definition(model.definition())?;
    let layout: Layout = model.definition().layout.clone();
    let sample: usize = model.input_shape().iter().product();
    let mut report = Report::default();
    {
        let c = model.compiled()?;
        c.replicas.flush()?;
        for r in &mut c.replicas.replicas {
            r.keep_records(true);
        }
    }
    for (step, (images, labels)) in batches.iter().enumerate() {
        let n = labels.len();
        if n == 0 || images.len() != n * sample {
            bail!(Shape, "check: batch {step} has {} image bytes for {n} labels of {sample} bytes", images.len());
        }
        let shares = model.device_shares(n);
        let smallest = shares.iter().copied().filter(|&s| s > 0).min().unwrap_or(n);
        if let Some((rows, layer)) = fewest_batchnorm_rows(model, smallest).filter(|(rows, _)| *rows < MIN_BATCHNORM_ROWS) {
            bail!(
                Config,
                "check: BatchNorm layer {layer} normalises over only {rows} rows per channel for a share of {smallest} samples (shares {shares:?}); the gradient through a BatchNorm over fewer than {MIN_BATCHNORM_ROWS} rows nearly vanishes and f32 cannot resolve it, so no f32 step can be checked there: use a larger batch or image"
            );
        }
        // Under mixed_float16 the step's gradients carry the loss scale, which a step moves
        // when it overflows (skipped: nothing but the moving statistics changed, and the
        // halved scale takes the same batch again, as training would take the next) or after
        // its growth steps (thousands).
        let (p0, s0, o0, lr, optimizer, t, outs, policy, loss_scale) = loop {
            let (p0, s0, o0) = model.get_weights()?;
            let (lr, optimizer, t) = {
                let c = model.compiled()?;
                (c.next_rate(), c.optimizer.clone(), c.step + 1)
            };
            let before = model.loss_scale()?;
            model.train_on_batch(images, labels)?;
            let (outs, _) = model.collect(0)?;
            match (before, model.loss_scale()?) {
                (None, _) => break (p0, s0, o0, lr, optimizer, t, outs, DTypePolicy::Float32, 1.0),
                (Some((s, skipped)), Some((_, now))) if now == skipped => break (p0, s0, o0, lr, optimizer, t, outs, DTypePolicy::MixedFloat16, s as f64),
                (Some((s, _)), _) if s > 1.0 => report.skipped_steps += 1,
                (Some(_), _) => bail!(Gpu, "check: step {step} overflows even at loss scale 1 (mixed_float16): its gradients hold NaN or infinity"),
            }
        };
        let device_losses: Vec<f32> = outs.iter().flat_map(|o| o.loss.iter().copied()).collect();

        // The reference, one replica's share at a time, with that replica's decisions.
        let scale = 1.0 / n as f32;
        let mut grads: Vec<Vec<f64>> = layout.params.iter().map(|e| vec![0.0; e.spec.len()]).collect();
        let mut states_sum: Vec<Vec<f64>> = layout.states.iter().map(|e| vec![0.0; e.spec.len()]).collect();
        let mut losses = Vec::with_capacity(n);
        let (mut grads32, mut losses32, mut states_sum32) = (grads.clone(), Vec::with_capacity(n), states_sum.clone());
        let device_grads = {
            let c = model.compiled()?;
            let reps = &c.replicas.replicas;
            let mut lo = 0;
            for (r, &count) in reps.iter().zip(&shares) {
                // Convoy averages the replicas' moving statistics weighted by the samples each
                // saw (the single-device update for the mean): an idle replica weighs nothing.
                let weight = count as f64 / n as f64;
                let (st, st32) = if count == 0 {
                    let kept: Vec<Vec<f64>> = layout.states.iter().map(|e| f64s(&s0[e.range()])).collect();
                    (kept.clone(), kept)
                } else {
                    let records = r.records(count, scale).ok_or_else(|| crate::Error::Config(format!("replica {} kept no records of its step", r.device.ordinal)))?;
                    let mut dec = decisions(&r.device, &net, records)?;
                    edit(&mut dec);
                    let imgs = &images[lo * sample..(lo + count) * sample];
                    // The reference's loss gradient carries the device's loss scale too, so the
                    // rounded run's f16 operands see the values the device's did; the exact
                    // run is linear in it (a power of two: removed exactly below).
                    let (mut s, mut s32) = train_step_pair_for(policy, &net, &layout, &p0, &s0, imgs, &labels[lo..lo + count], &dec, loss_scale / n as f64)?;
                    for g in s.grads.iter_mut().chain(s32.grads.iter_mut()) {
                        g.iter_mut().for_each(|v| *v /= loss_scale);
                    }
                    for (g, sg) in grads.iter_mut().zip(&s.grads) {
                        g.iter_mut().zip(sg).for_each(|(a, b)| *a += b);
                    }
                    for (g, sg) in grads32.iter_mut().zip(&s32.grads) {
                        g.iter_mut().zip(sg).for_each(|(a, b)| *a = (*a + b) as f32 as f64);
                    }
                    losses.extend(s.losses);
                    losses32.extend(s32.losses);
                    report.f32_drift.take(s32.kinks.drift, || format!("step {step}, replica {}: {}", r.device.ordinal, s32.kinks.drift_at));
                    report.ties += s.kinks.ties;
                    report.flipped += s.kinks.flipped;
                    report.drift.take(s.kinks.drift, || format!("step {step}, replica {}: {}", r.device.ordinal, s.kinks.drift_at));
                    report.mismatch_count += s.kinks.mismatch_count;
                    report.mismatches.extend(s.kinks.mismatches.into_iter().map(|m| format!("step {step}, replica {}: {m}", r.device.ordinal)));
                    (s.states, s32.states)
                };
                for (acc, s) in states_sum.iter_mut().zip(st) {
                    acc.iter_mut().zip(s).for_each(|(a, b)| *a += weight * b);
                }
                for (acc, s) in states_sum32.iter_mut().zip(st32) {
                    acc.iter_mut().zip(s).for_each(|(a, b)| *a = (*a + (weight * b) as f32 as f64) as f32 as f64);
                }
                lo += count;
            }
            // After an exchange every replica's gradient tensor holds the sum.
            let mut g = reps[0].device.read(&reps[0].grads)?;
            g.iter_mut().for_each(|v| *v = (*v as f64 / loss_scale) as f32);
            g
        };
        let at = |name: &str| format!("step {step}: {name}");
        // A tensor whose true gradient vanishes (a convolution's bias before BatchNorm, which
        // subtracts any shift) holds only the rounding of sums that cancel: its scale is
        // floored at GRAD_FLOOR of the largest gradient of its layer (the kernel's, summed
        // over the same terms times the inputs), so that rounding is not read as an error.
        let mut largest = vec![0.0f64; layout.per_layer.len()];
        for (e, want) in layout.params.iter().zip(&grads) {
            largest[e.layer] = want.iter().fold(largest[e.layer], |m, g| m.max(g.abs()));
        }
        for ((e, want), plain) in layout.params.iter().zip(&grads).zip(&grads32) {
            let got = &device_grads[e.range()];
            report.grad.take(rel_err_floored(got, want, GRAD_FLOOR * largest[e.layer]), || at(&e.name));
            report.f32_grad.take(rel_err_floored(plain, want, GRAD_FLOOR * largest[e.layer]), || at(&e.name));
        }
        report.loss.take(rel_err(&device_losses, &losses), || at("loss"));
        report.f32_loss.take(rel_err_floored(&losses32, &losses, 0.0), || at("loss"));

        // The update, from convoy's weights and convoy's gradient: the gradient was held to
        // the bound above, and Adam's update divides by it (a gradient near zero with a
        // relative error of 1e-6 may still turn its update around).
        let mut params = f64s(&p0);
        let entry_grads: Vec<Vec<f64>> = layout.params.iter().map(|e| f64s(&device_grads[e.range()])).collect();
        let mut opt_state: Vec<Vec<f64>> = o0.iter().map(|s| f64s(s)).collect();
        ref_optimizer::apply(&optimizer, t, lr as f64, &layout, &mut params, &entry_grads, &mut opt_state)?;
        // A frozen layer's parameters and their optimizer state take no update.
        for e in layout.params.iter().filter(|e| model.definition().frozen.contains(&e.layer)) {
            params[e.range()].copy_from_slice(&f64s(&p0[e.range()]));
            for (s, before) in opt_state.iter_mut().zip(&o0) {
                s[e.range()].copy_from_slice(&f64s(&before[e.range()]));
            }
        }
        let (p1, s1, o1) = model.get_weights()?;
        for e in &layout.params {
            let r = e.range();
            report.update.take(update_err(&p1[r.clone()], &p0[r.clone()], &params[r.clone()]), || at(&e.name));
            for (k, (got, want)) in o1.iter().zip(&opt_state).enumerate() {
                report.optimizer_state.take(rel_err(&got[r.clone()], &want[r.clone()]), || at(&format!("{} (optimizer state {k})", e.name)));
            }
        }
        let (expected, plain) = (states_sum, states_sum32);
        for (i, (e, want)) in layout.states.iter().zip(&expected).enumerate() {
            // A moving mean near zero (a convolution of zero-mean weights) is the small
            // difference of large sums: its error is measured against GRAD_FLOOR of the
            // channels' spread, the square root of the moving variance that follows it.
            let floor = match (e.spec.name, layout.states.get(i + 1), expected.get(i + 1)) {
                ("moving_mean", Some(next), Some(var)) if next.spec.name == "moving_variance" => GRAD_FLOOR * var.iter().fold(0.0f64, |m, v| m.max(*v)).sqrt(),
                _ => 0.0,
            };
            report.moving_stats.take(rel_err_floored(&s1[e.range()], want, floor), || at(&e.name));
            report.f32_moving_stats.take(rel_err_floored(&plain[i], want, floor), || at(&e.name));
        }
        report.steps += 1;
        report.shares = shares;
    }
    Ok(report.finish())
}

/// What [`check_zoo`] runs.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    /// A zoo model (`convoy::model::zoo::MODELS`).
    pub model: String,
    /// Global batch per step, split across the devices.
    pub batch_size: usize,
    /// Side of the square random images, in pixels.
    pub image_size: usize,
    /// The model's classes.
    pub classes: usize,
    /// Training steps to compare.
    pub steps: usize,
    /// The update rule the steps apply.
    pub optimizer: crate::optim::Optimizer,
    /// Relative speed per device, fixing the split (uneven splits); even by default.
    pub speeds: Option<Vec<f64>>,
    /// Seed of the weights and the random images and labels.
    pub seed: u64,
    /// The precision policy the model trains under: under `mixed_float16` the bounds come
    /// from a plain implementation of that policy (f16 operands in every product).
    pub precision: DTypePolicy,
    /// The cross-entropy's label smoothing the model is compiled with (Keras').
    pub label_smoothing: f32,
}

impl CheckConfig {
    /// `model` at `batch_size` and `image_size`, three steps of the benchmarks' SGD (Nesterov
    /// momentum 0.9, weight decay 5e-4): momentum and decay both take part from step two.
    pub fn new(model: &str, batch_size: usize, image_size: usize) -> CheckConfig {
        CheckConfig {
            model: model.to_string(),
            batch_size,
            image_size,
            classes: 10,
            steps: 3,
            optimizer: crate::optim::Optimizer::sgd(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4),
            speeds: None,
            seed: 0,
            precision: DTypePolicy::Float32,
            label_smoothing: 0.0,
        }
    }
}

/// Builds zoo model `cfg.model`, compiles it on `devices` and checks `cfg.steps` steps on
/// random images (noise, so no two windows are alike by construction and every unit's
/// pre-activation is its own).
pub fn check_zoo(cfg: &CheckConfig, devices: Vec<std::sync::Arc<Device>>) -> Result<Report> {
    let (mut model, batches) = zoo_case(cfg, devices)?;
    check(&mut model, &batches)
}

/// Images and labels of one step.
type Batch = (Vec<u8>, Vec<u32>);

/// The compiled model and the batches of a [`check_zoo`] run.
fn zoo_case(cfg: &CheckConfig, devices: Vec<std::sync::Arc<Device>>) -> Result<(Sequential, Vec<Batch>)> {
    use rand::{RngExt, SeedableRng};
    if cfg.batch_size == 0 || cfg.steps == 0 || cfg.image_size == 0 {
        bail!(Config, "check: batch size ({}), steps ({}) and image size ({}) must be positive", cfg.batch_size, cfg.steps, cfg.image_size);
    }
    let shape = [cfg.image_size, cfg.image_size, 3];
    let mut model = crate::model::zoo::by_name(&cfg.model, &shape, cfg.classes)?;
    model.set_dtype_policy(cfg.precision);
    let n = devices.len();
    model.compile(crate::model::CompileOptions::new(cfg.optimizer.clone()).devices(devices).seed(cfg.seed).max_batch(cfg.batch_size).label_smoothing(cfg.label_smoothing))?;
    model.set_device_speeds(cfg.speeds.as_deref().unwrap_or(&vec![1.0; n]))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ 0x636f6e766f79);
    let sample: usize = shape.iter().product();
    let batches: Vec<Batch> = (0..cfg.steps)
        .map(|_| {
            let images = (0..cfg.batch_size * sample).map(|_| rng.random()).collect();
            let labels = (0..cfg.batch_size).map(|_| rng.random_range(0..cfg.classes as u32)).collect();
            (images, labels)
        })
        .collect();
    Ok((model, batches))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_relative_to_the_largest_reference_value_and_nan_wins() {
        assert_eq!(rel_err(&[1.0, 2.5], &[1.0, 2.0]), 0.25);
        assert!(rel_err(&[f32::NAN, 0.0], &[1.0, 1.0]).is_nan());
        assert_eq!(rel_err(&[0.0], &[0.0]), 0.0);
        // A vanishing tensor is measured against the floor, not its own rounding.
        assert!((rel_err_floored(&[1e-9], &[1e-17], 1e-3) - 1e-6).abs() < 1e-12);
        assert!((rel_err_floored(&[1.1], &[1.0], 1e-3) - 0.1).abs() < 1e-6);
        let mut w = Worst::default();
        w.take(1e-6, || "a".into());
        w.take(f64::NAN, || "b".into());
        w.take(1.0, || "c".into());
        assert!(w.error.is_nan() && w.at == "b", "{w:?}");
        let r = Report { grad: Worst { error: f64::NAN, at: "x".into() }, ..Default::default() }.finish();
        assert!(!r.ok, "a NaN error must fail the check");
    }

    /// Applies `edit` to the first ReLU decision found (depth first), if any.
    fn edit_first_relu(decisions: &mut [Decision], edit: &mut impl FnMut(&mut Vec<f32>)) -> bool {
        decisions.iter_mut().any(|d| match d {
            Decision::Relu(y) => {
                edit(y);
                true
            }
            Decision::Residual { main, shortcut, .. } => edit_first_relu(main, edit) || edit_first_relu(shortcut, edit),
            _ => false,
        })
    }

    /// Flips the ReLU decision of the unit furthest from zero in the first ReLU found.
    fn flip_one(decisions: &mut [Decision]) -> bool {
        edit_first_relu(decisions, &mut |y| {
            let i = (0..y.len()).max_by(|&a, &b| y[a].abs().total_cmp(&y[b].abs())).expect("a unit");
            y[i] = if y[i] > 0.0 { 0.0 } else { 1.0 };
        })
    }

    /// Under mixed_float16 the device keeps f16 exactly where the reference rounds
    /// (`Node::stores_f16`, channels in whole quads, a convolution's output only from an f16
    /// input): the check's own records show each recorded output's storage, so a layer that
    /// silently fell back to f32 (or a reference that rounds where the device does not)
    /// fails here rather than only loosening the check's bounds.
    #[test]
    fn mixed_precision_stores_f16_where_the_reference_rounds() {
        use crate::model::DTypePolicy;
        let devices = crate::device::open("software").expect("the software adapter");
        let cfg = CheckConfig { precision: DTypePolicy::MixedFloat16, steps: 1, ..CheckConfig::new("resnet18", 8, 32) };
        let (mut model, batches) = zoo_case(&cfg, devices).unwrap();
        // check_steps leaves the records kept (check itself drops them after).
        let report = check_steps(&mut model, &batches, |_| {}).unwrap();
        assert!(report.ok, "{report:?}");
        let net = Net::from_definition(model.definition()).unwrap();
        let c = model.compiled().unwrap();
        let records = c.replicas.replicas[0].records(8, 1.0 / 8.0).expect("the check keeps its records");
        // (node, its input, its record): every node's output storage against the rule.
        fn walk(nodes: &[Node], recs: &[(crate::Tensor, crate::layers::Saved)], at: &str, seen: &mut Vec<String>) {
            for (i, (node, (x, saved))) in nodes.iter().zip(recs).enumerate() {
                let quads = |t: &crate::Tensor| t.shape().last().is_some_and(|c| c % 4 == 0);
                let conv_from_f32 = matches!(node, Node::Conv2D { .. }) && !quads(x);
                // A fused ReLU's record passes its BatchNorm's output on: only the nodes that
                // store are held to the rule.
                let want = node.stores_f16() && quads(&saved.output) && !conv_from_f32;
                if node.stores_f16() {
                        assert_eq!(saved.output.dtype() == crate::DType::F16, want, "{at}[{i}] {node:?}: output {:?} is {:?}", saved.output.shape(), saved.output.dtype());
                }
                if want {
                    seen.push(format!("{at}[{i}]"));
                }
                if let Node::Residual { main, shortcut, .. } = node {
                    let (m, s) = saved.inner.split_at(main.len());
                    walk(main, m, &format!("{at}[{i}].main"), seen);
                    walk(shortcut, s, &format!("{at}[{i}].shortcut"), seen);
                }
            }
        }
        let recs: Vec<(crate::Tensor, crate::layers::Saved)> = records.iter().map(|(_, x, s)| (x.clone(), s.clone())).collect();
        let mut seen = Vec::new();
        walk(&net.nodes, &recs, "resnet18", &mut seen);
        // The stem (its input the image padded to four f16 channels), its BatchNorm and pool,
        // every block and its layers, the global pool.
        assert!(seen.len() > 40 && seen[0] == "resnet18[0]", "f16 outputs: {seen:?}");
        assert_eq!((recs[0].0.shape()[3], recs[0].0.dtype()), (4, crate::DType::F16), "the stem's input");
    }

    /// Under mixed_float16 a gradient is stored as its activation: in a resnet18 step every
    /// backward pass of BatchNorm, the join's ReLU gradient, the gradient sums and the pools
    /// runs on the f16 modules; every convolution's weight gradient reads an f16 dy and every
    /// input gradient writes f16, the stride-2 ones' phase products too; the step casts only
    /// where an f32 layer meets f16. A layer that handed on an f32 gradient fails here.
    #[test]
    fn mixed_precision_stores_gradients_as_their_activations() {
        use crate::kernels::Dispatch;
        use crate::model::DTypePolicy;
        let devices = crate::device::open("software").expect("the software adapter");
        let cfg = CheckConfig { precision: DTypePolicy::MixedFloat16, steps: 1, ..CheckConfig::new("resnet18", 8, 32) };
        let (mut model, batches) = zoo_case(&cfg, devices).unwrap();
        check_steps(&mut model, &batches, |_| {}).unwrap();
        let c = model.compiled().unwrap();
        let dispatches = c.replicas.replicas[0].training_dispatches(8, 1.0 / 8.0).expect("the step's plan");
        // BatchNorm's gradient passes by their entries (the software adapter's end in `_cpu`).
        for entry in ["backward_partial", "backward_dx", "relu_backward", "add", "add_relu_backward", "max_pool_backward", "global_avg_pool_backward"] {
            let all: Vec<&Dispatch> = dispatches.iter().filter(|d| d.kernel.strip_suffix("_cpu").unwrap_or(d.kernel) == entry).collect();
            assert!(!all.is_empty(), "{entry}: not recorded");
            for d in all {
                assert!(d.shader.ends_with("+f16"), "{entry} runs {} ({})", d.shader, d.path);
            }
        }
        let weights: Vec<&Dispatch> = dispatches.iter().filter(|d| d.kernel == "conv2d_backward_weights" && d.flops > 0.0).collect();
        let f32_dy: Vec<&&Dispatch> = weights.iter().filter(|d| !d.shader.contains("b16")).collect();
        assert!(weights.len() > 15 && f32_dy.is_empty(), "{} weight gradients, on an f32 dy: {f32_dy:#?}", weights.len());
        // Casts only where an f32 layer meets f16: the classifier's input and that input's
        // gradient. The image is normalised into f16 padded to four channels, which the stem
        // reads with a kernel padded to match and writes f16 from.
        let casts: Vec<&str> = dispatches.iter().filter(|d| d.shader == "cast.wgsl").map(|d| d.kernel).collect();
        assert_eq!(casts, ["from_f16", "to_f16"], "the step's casts");
        let image: Vec<&str> = dispatches.iter().filter(|d| d.shader == "image.wgsl").map(|d| d.path.as_str()).collect();
        assert!(image.len() == 1 && image[0].starts_with("normalize_u8_f16") && image[0].contains("padded"), "the image: {image:?}");
        let pads: Vec<&str> = dispatches.iter().filter(|d| d.shader == "concat.wgsl").map(|d| d.kernel).collect();
        assert_eq!(pads, ["pad_block", "slice_block"], "the stem's kernel padded and its gradient sliced");
        let data: Vec<&Dispatch> = dispatches.iter().filter(|d| d.kernel == "conv2d_backward_data" && d.flops > 0.0).collect();
        assert!(data.iter().all(|d| d.shader.contains("a16")), "an input gradient read an f32 dy: {data:#?}");
        // Each writes dx as f16 (a split product's partials are f32: its path names the
        // storage it ends in).
        let f16_dx = data.iter().filter(|d| d.path.split_whitespace().any(|t| t.starts_with("store=") && t.ends_with("c16"))).count();
        assert!(data.len() > 20 && f16_dx == data.len(), "{f16_dx} of {} input gradients write an f16 dx", data.len());
        // Each block after the first masks its input gradient by the block before's ReLU in
        // its sum, so only the last block masks its own: one relu_backward, seven fused sums.
        // The four blocks whose first convolution is unit-stride finish that sum in the store
        // of its input gradient (Conv2D::backward_joined), the three strided ones in a pass.
        let count = |entry: &str| dispatches.iter().filter(|d| d.kernel == entry).count();
        let joined = dispatches.iter().filter(|d| d.kernel == "conv2d_backward_data" && d.path.split_whitespace().any(|t| t == "join")).count();
        assert_eq!((count("relu_backward"), count("add_relu_backward"), joined), (1, 3, 4), "the joins' ReLU gradients");
    }

    /// The element-wise activations keep their input's storage under mixed_float16: the
    /// MLP's ReLUs between Dense layers stay f32 and its step casts nothing, and MobileNetV2's
    /// ReLU6 runs both ways on the f16 module between its f16 BatchNorms.
    #[test]
    fn mixed_precision_activations_keep_their_input_storage() {
        use crate::model::DTypePolicy;
        let step = |model: &str, batch: usize, size: usize| {
            let devices = crate::device::open("software").expect("the software adapter");
            let cfg = CheckConfig { precision: DTypePolicy::MixedFloat16, steps: 1, ..CheckConfig::new(model, batch, size) };
            let (mut model, batches) = zoo_case(&cfg, devices).unwrap();
            check_steps(&mut model, &batches, |_| {}).unwrap();
            let c = model.compiled().unwrap();
            let dispatches = c.replicas.replicas[0].training_dispatches(batch, 1.0 / batch as f32).expect("the step's plan");
            dispatches.iter().map(|d| (d.kernel, d.shader)).collect::<Vec<_>>()
        };
        let mlp = step("mlp", 6, 5);
        assert!(mlp.iter().all(|(_, shader)| *shader != "cast.wgsl"), "the MLP casts: {mlp:?}");
        assert!(mlp.iter().any(|(k, _)| *k == "relu_forward"), "{mlp:?}");
        let mobilenet = step("mobilenet_v2", 8, 32);
        let relu6: Vec<_> = mobilenet.iter().filter(|(k, _)| k.starts_with("activation_")).collect();
        assert!(relu6.len() > 60 && relu6.iter().all(|(_, shader)| shader.ends_with("+f16")), "MobileNetV2's ReLU6: {relu6:?}");
    }

    #[test]
    fn the_check_passes_on_convoy_and_fails_on_a_mask_from_the_wrong_side() {
        let devices = || crate::device::open("software").expect("the software adapter");
        let cfg = CheckConfig { steps: 2, ..CheckConfig::new("convnet7", 5, 9) };
        let (mut model, batches) = zoo_case(&cfg, devices()).unwrap();
        let good = check(&mut model, &batches).unwrap();
        assert!(good.ok, "{good:?}");
        assert!(good.grad.error < 1e-5, "{:?}", good.grad);
        let (mut model, batches) = zoo_case(&cfg, devices()).unwrap();
        let mut flipped = 0;
        let bad = check_edited(&mut model, &batches, |d| flipped += flip_one(d) as usize).unwrap();
        assert_eq!(flipped, 2, "one flip per step");
        assert!(!bad.ok, "a flipped mask must fail the check: {bad:?}");
        assert!(bad.grad.error > BOUND, "{:?}", bad.grad);
        assert!(!bad.mismatches.is_empty(), "the flipped unit is far from zero: {bad:?}");
    }

    /// A model with every augmentation layer, on one replica and on two: the device's steps
    /// match the reference that follows the draws read back from each replica, and a draw
    /// changed on the host (sample 0's vertical flip at the first layer) fails the check.
    #[test]
    fn augmentation_passes_the_check_and_a_changed_draw_fails_it() {
        use rand::{RngExt, SeedableRng};
        let model = |devices: &str| {
            let mut m = super::super::tests::augment_model();
            let devices = crate::device::open(devices).unwrap();
            let n = devices.len();
            m.compile(crate::model::CompileOptions::new(crate::optim::Optimizer::sgd(0.05)).devices(devices).seed(9).max_batch(10)).unwrap();
            m.set_device_speeds(&vec![1.0; n]).unwrap();
            m
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let batches: Vec<Batch> = (0..3).map(|_| ((0..10 * 126).map(|_| rng.random()).collect(), (0..10).map(|_| rng.random_range(0..4)).collect())).collect();
        for devices in ["software", "software:2"] {
            let r = check(&mut model(devices), &batches).unwrap();
            assert!(r.ok && r.steps == 3, "{devices}: {r:?}");
        }
        let mut edited = 0;
        let bad = check_edited(&mut model("software"), &batches, |d| {
            if let Decision::Augment(draws) = &mut d[0] {
                (draws[0], draws[1]) = if draws[0] == 1 { (-1, 6) } else { (1, 0) };
                edited += 1;
            }
        })
        .unwrap();
        assert_eq!(edited, 3, "one edit per step");
        assert!(!bad.ok && bad.loss.error > bad.loss_bound, "a changed draw must fail the check: {bad:?}");
    }

    #[test]
    fn an_update_may_differ_by_rounding_but_not_by_more() {
        // p = 1 moved by 1e-5: f32 can only hold it to ~6e-8, which is allowed.
        let want = 1.0 - 1e-5;
        assert!(update_err(&[want as f32], &[1.0], &[want]) < 1e-12);
        // An update of 1e-3 that is 1% off (1e-5, far above f32's 6e-8 there) is seen.
        let want = 1.0 - 1e-3;
        let wrong = (1.0 - 1.01e-3) as f32;
        let e = update_err(&[wrong], &[1.0], &[want]);
        assert!((0.009..0.011).contains(&e), "{e}");
    }

    /// Moves the largest active unit of the first ReLU found by 1% of its value: a forward
    /// pass that is slightly wrong, not on the wrong side of any kink.
    fn nudge_one(decisions: &mut [Decision]) -> bool {
        edit_first_relu(decisions, &mut |y| {
            let i = (0..y.len()).max_by(|&a, &b| y[a].total_cmp(&y[b])).expect("a unit");
            y[i] *= 1.01;
        })
    }

    #[test]
    fn a_forward_that_drifts_past_its_bound_fails_instead_of_widening_the_ties() {
        let devices = || crate::device::open("software").expect("the software adapter");
        let cfg = CheckConfig { steps: 1, ..CheckConfig::new("convnet7", 5, 9) };
        let (mut model, batches) = zoo_case(&cfg, devices()).unwrap();
        let bad = check_edited(&mut model, &batches, |d| assert!(nudge_one(d))).unwrap();
        assert!(!bad.ok, "{bad:?}");
        assert!(bad.drift.error > bad.drift_bound && bad.drift_bound < 1e-3, "{bad:?}");
    }

    #[test]
    fn errors_are_held_to_plain_f32_only_where_it_is_worse_than_the_bound() {
        let w = |error: f64| Worst { error, at: "x".into() };
        let with = |grad: f64, plain: f64| Report { grad: w(grad), f32_grad: w(plain), ..Default::default() }.finish();
        assert!(with(9e-5, 1e-6).ok);
        assert!(!with(2e-4, 1e-6).ok, "a well-conditioned step keeps the 1e-4 bound");
        let deep = with(3e-4, 5e-4);
        assert!(deep.ok && deep.grad_bound == ROUNDING_SLACK * 5e-4, "{deep:?}");
        assert!(!with(2.1e-3, 5e-4).ok);
        assert!(!with(2e-4, f64::NAN).ok, "a NaN from the rounded run loosens nothing");
        let drift = |device: f64, plain: f64| Report { drift: w(device), f32_drift: w(plain), ..Default::default() }.finish();
        assert!(drift(3e-4, 1e-4).ok && !drift(5e-4, 1e-4).ok);
        let loss = |device: f64, plain: f64| Report { loss: w(device), f32_loss: w(plain), ..Default::default() }.finish();
        assert!(loss(3e-4, 1e-4).ok && !loss(5e-4, 1e-4).ok);
    }
}
