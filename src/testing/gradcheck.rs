//! One layer's forward and backward on an adapter, checked against central finite
//! differences or against the author's own f64 reference (`torch.autograd.gradcheck`'s role).

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::layers::{Graph, Init, Layer, ParamSpec, Weights};
use crate::{bail, DType, Device, Result, Tensor};

/// The bound on [`gradcheck`]'s errors: central differences of an f32 forward pass, as
/// tests/gradcheck.rs holds convoy's own layers to.
pub const FINITE_DIFFERENCE_BOUND: f64 = 5e-3;
/// The bound on [`gradcheck_reference`]'s errors: an f32 kernel against an f64 reference.
pub const REFERENCE_BOUND: f64 = 1e-4;

/// How [`gradcheck_with`] draws its inputs and directions.
#[derive(Clone, Debug)]
pub struct GradcheckOptions {
    /// Samples in the batch (layers that mix samples, as BatchNorm does, need more than one).
    pub batch: usize,
    /// Seed of the inputs, parameters, output weights and directions.
    pub seed: u64,
    /// The finite-difference step: small enough that ReLU-like kinks are rarely crossed,
    /// large enough to stand above f32 rounding of the forward pass.
    pub eps: f64,
    /// Random unit directions tried per tensor.
    pub directions: usize,
    /// Largest single coordinates of each gradient tried.
    pub coordinates: usize,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions { batch: 3, seed: 0, eps: 2e-3, directions: 3, coordinates: 4 }
    }
}

/// The worst relative error found for one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorError {
    /// `x` (the input gradient), `y` (the output, against a reference only) or the
    /// parameter's name from the layer's `params()`.
    pub tensor: String,
    /// The worst relative error over everything tried for it.
    pub error: f64,
}

/// What a gradient check found, one entry per tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct GradcheckReport {
    /// Per tensor, in the order input, parameters (with `y` first against a reference).
    pub tensors: Vec<TensorError>,
    /// The bound the method is held to ([`FINITE_DIFFERENCE_BOUND`] or [`REFERENCE_BOUND`]).
    pub bound: f64,
}

impl GradcheckReport {
    /// The largest error over all tensors.
    pub fn worst(&self) -> f64 {
        self.tensors.iter().map(|t| t.error).fold(0.0, f64::max)
    }
    /// An error naming every tensor above the bound; a NaN error fails too.
    pub fn check(&self) -> Result<()> {
        let bad: Vec<String> = self.tensors.iter().filter(|t| !(t.error <= self.bound)).map(|t| format!("{} {:.2e}", t.tensor, t.error)).collect();
        if !bad.is_empty() {
            bail!(Mismatch, "gradient check failed (bound {:.0e}): {}", self.bound, bad.join(", "));
        }
        Ok(())
    }
}

impl std::fmt::Display for GradcheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for t in &self.tensors {
            let verdict = if t.error <= self.bound { "ok" } else { "FAIL" };
            writeln!(f, "{:<24} {:.2e}  {verdict}", t.tensor, t.error)?;
        }
        write!(f, "worst {:.2e} (bound {:.0e})", self.worst(), self.bound)
    }
}

/// What a user's f64 reference receives: the values the adapter computed with, widened.
#[derive(Clone, Debug)]
pub struct ReferenceInputs {
    /// The input's shape, batch first.
    pub input_shape: Vec<usize>,
    /// The input, row-major.
    pub x: Vec<f64>,
    /// The parameters, in the order of the layer's `params()`.
    pub params: Vec<Vec<f64>>,
    /// The gradient arriving at the output (shape: the output's, batch first).
    pub dy: Vec<f64>,
}

/// What a user's f64 reference returns for [`ReferenceInputs`].
#[derive(Clone, Debug)]
pub struct ReferenceOutputs {
    /// The output.
    pub y: Vec<f64>,
    /// The gradient with respect to the input.
    pub dx: Vec<f64>,
    /// The gradient of each parameter, in the order of the layer's `params()`.
    pub dparams: Vec<Vec<f64>>,
}

/// [`gradcheck_with`] with the default options.
pub fn gradcheck(device: &Device, layer: &dyn Layer, input_shape: &[usize]) -> Result<GradcheckReport> {
    gradcheck_with(device, layer, input_shape, &GradcheckOptions::default())
}

/// Checks `layer`'s input and parameter gradients on `device` against central differences
/// of its own forward pass, with the scalar `L = sum(w * y)` for fixed random weights `w`
/// (so every output element counts). For each tensor, random unit directions and the
/// largest single coordinates are tried; the error of each is
/// `|numeric - analytic| / max(|analytic|, |numeric|, 1e-3)` and the report keeps the worst,
/// to be held to [`FINITE_DIFFERENCE_BOUND`].
///
/// The layer runs in training mode on one input, `input_shape` without the batch. Inputs
/// are drawn from U(-1, 1); parameters from their initialiser, with zeros and ones moved by
/// up to 0.1 so that biases and scales are exercised.
pub fn gradcheck_with(device: &Device, layer: &dyn Layer, input_shape: &[usize], options: &GradcheckOptions) -> Result<GradcheckReport> {
    let mut rig = Rig::new(device, layer, input_shape, options)?;
    let (_, dx, grads) = rig.run_all()?;
    let mut tensors = Vec::new();
    let x0 = rig.x_host.clone();
    tensors.push(TensorError { tensor: "x".into(), error: rig.worst_over(&x0, &dx, |rig, v| rig.set_x(v))? });
    for (i, g) in grads.iter().enumerate() {
        let p0 = rig.params_host[i].clone();
        let error = rig.worst_over(&p0, g, |rig, v| rig.set_param(i, v))?;
        rig.set_param(i, &p0)?;
        tensors.push(TensorError { tensor: rig.specs[i].name.to_string(), error });
    }
    rig.set_x(&x0)?;
    Ok(GradcheckReport { tensors, bound: FINITE_DIFFERENCE_BOUND })
}

/// Checks `layer`'s output and gradients on `device` against `reference`, an f64
/// implementation of the same layer given the very inputs, parameters and output gradient
/// the adapter used. Each tensor's error is the max-norm relative difference
/// `max|device - reference| / max|reference|`, to be held to [`REFERENCE_BOUND`].
pub fn gradcheck_reference(
    device: &Device,
    layer: &dyn Layer,
    input_shape: &[usize],
    options: &GradcheckOptions,
    reference: &dyn Fn(&ReferenceInputs) -> ReferenceOutputs,
) -> Result<GradcheckReport> {
    let mut rig = Rig::new(device, layer, input_shape, options)?;
    let (y, dx, grads) = rig.run_all()?;
    let wide = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
    let inputs = ReferenceInputs {
        input_shape: rig.x.shape().to_vec(),
        x: wide(&rig.x_host),
        params: rig.params_host.iter().map(|p| wide(p)).collect(),
        dy: rig.dy_host.clone(),
    };
    let want = reference(&inputs);
    let mut tensors = vec![TensorError { tensor: "y".into(), error: max_norm_error("y", &y, &want.y)? }];
    tensors.push(TensorError { tensor: "x".into(), error: max_norm_error("x", &dx, &want.dx)? });
    if want.dparams.len() != grads.len() {
        bail!(Config, "gradcheck_reference: the reference returned {} parameter gradients, the layer has {}", want.dparams.len(), grads.len());
    }
    for (i, (g, r)) in grads.iter().zip(&want.dparams).enumerate() {
        let name = rig.specs[i].name;
        tensors.push(TensorError { tensor: name.into(), error: max_norm_error(name, g, r)? });
    }
    Ok(GradcheckReport { tensors, bound: REFERENCE_BOUND })
}

fn max_norm_error(name: &str, got: &[f32], want: &[f64]) -> Result<f64> {
    if got.len() != want.len() {
        bail!(Config, "gradcheck_reference: `{name}` has {} elements on the device, {} in the reference", got.len(), want.len());
    }
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    // NaN anywhere must fail, so it is carried rather than skipped by `max`.
    let diff = got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0f64, |m, d| if d.is_nan() || m.is_nan() { f64::NAN } else { m.max(d) });
    Ok(if scale > 0.0 { diff / scale } else { diff })
}

/// The recorded layer with its tensors on the device and their host copies.
struct Rig<'d> {
    device: &'d Device,
    specs: Vec<ParamSpec>,
    x: Tensor,
    x_host: Vec<f32>,
    params: Vec<Tensor>,
    params_host: Vec<Vec<f32>>,
    grads: Vec<Tensor>,
    dy_host: Vec<f64>,
    y: Tensor,
    dx: Tensor,
    forward: usize,
    dispatches: Vec<crate::kernels::Dispatch>,
    rng: StdRng,
    options: GradcheckOptions,
}

impl<'d> Rig<'d> {
    fn new(device: &'d Device, layer: &dyn Layer, input_shape: &[usize], options: &GradcheckOptions) -> Result<Rig<'d>> {
        if options.batch == 0 || !(options.eps > 0.0) {
            bail!(Config, "gradcheck: batch must be positive and eps above zero, got batch {} and eps {}", options.batch, options.eps);
        }
        let name = layer.class_name();
        let out_shape = layer.output_shape(input_shape)?;
        let specs = layer.params(input_shape);
        let state_specs = layer.states(input_shape);
        let mut rng = StdRng::seed_from_u64(options.seed);
        let mut full = vec![options.batch];
        full.extend_from_slice(input_shape);
        let x_host: Vec<f32> = (0..full.iter().product::<usize>()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let x = device.upload(&full, &x_host)?;
        let params_host: Vec<Vec<f32>> = specs.iter().map(|s| draw(s, &mut rng, true)).collect();
        let params = specs.iter().zip(&params_host).map(|(s, v)| device.upload(&s.shape, v)).collect::<Result<Vec<_>>>()?;
        let grads = specs.iter().map(|s| device.zeros(&s.shape)).collect::<Result<Vec<_>>>()?;
        let states = state_specs.iter().map(|s| device.upload(&s.shape, &draw(s, &mut rng, false))).collect::<Result<Vec<_>>>()?;
        let mut out_full = vec![options.batch];
        out_full.extend_from_slice(&out_shape);
        let dy_host: Vec<f64> = (0..out_full.iter().product::<usize>()).map(|_| rng.random_range(-1.0f64..1.0)).collect();
        let dy = device.upload(&out_full, &dy_host.iter().map(|&v| v as f32).collect::<Vec<_>>())?;

        let step = device.zeros_of(&[1], DType::U32)?;
        let invalid = device.wgpu().push_error_scope(wgpu::ErrorFilter::Validation);
        let recorded = (|| -> Result<(Graph, Tensor, Tensor, usize)> {
            let mut g = Graph::new(device, options.batch, true, step);
            let w = Weights { params: &params, grads: &grads, states: &states };
            let saved = g.under_policy_of(layer, |g| layer.forward(g, &x, &w))?;
            if saved.output.shape() != out_full.as_slice() {
                bail!(Shape, "gradcheck: {name}'s forward wrote {:?}, its output_shape says {:?}", saved.output.shape(), out_full);
            }
            let forward = g.dispatches.len();
            let dx = g.under_policy_of(layer, |g| layer.backward(g, &x, &saved, &dy, &w, true))?;
            g.flush_deferred();
            let Some(dx) = dx else { bail!(Config, "gradcheck: {name}'s backward returned no input gradient although need_dx was set") };
            if dx.shape() != x.shape() {
                bail!(Shape, "gradcheck: {name}'s input gradient is {:?}, its input {:?}", dx.shape(), x.shape());
            }
            Ok((g, saved.output, dx, forward))
        })();
        if let Some(e) = pollster::block_on(invalid.pop()) {
            bail!(Gpu, "gradcheck: recording {name} on {}: {e}", device.name());
        }
        let (g, y, dx, forward) = recorded?;
        Ok(Rig { device, specs, x, x_host, params, params_host, grads, dy_host, y, dx, forward, dispatches: g.dispatches, rng, options: options.clone() })
    }

    /// Forward and backward: the output, the input gradient and the parameter gradients.
    fn run_all(&mut self) -> Result<(Vec<f32>, Vec<f32>, Vec<Vec<f32>>)> {
        for g in &self.grads {
            self.device.write(g, &vec![0.0f32; g.len()])?;
        }
        self.device.run(&self.dispatches);
        self.device.check()?;
        let grads = self.grads.iter().map(|g| self.device.read(g)).collect::<Result<Vec<_>>>()?;
        Ok((self.device.read(&self.y)?, self.device.read(&self.dx)?, grads))
    }

    /// `L = sum(dy * y)` of a forward pass with the tensors as they are now.
    fn loss(&self) -> Result<f64> {
        self.device.run(&self.dispatches[..self.forward]);
        self.device.check()?;
        let y = self.device.read(&self.y)?;
        Ok(y.iter().zip(&self.dy_host).map(|(&a, &w)| a as f64 * w).sum())
    }

    fn set_x(&mut self, v: &[f32]) -> Result<()> {
        self.device.write(&self.x, v)
    }

    fn set_param(&mut self, i: usize, v: &[f32]) -> Result<()> {
        self.device.write(&self.params[i], v)
    }

    /// The worst error over random directions and the largest coordinates of one tensor
    /// whose values are `at` and whose analytic gradient is `grad`; `set` writes it.
    fn worst_over(&mut self, at: &[f32], grad: &[f32], set: impl Fn(&mut Self, &[f32]) -> Result<()>) -> Result<f64> {
        let eps = self.options.eps;
        let mut worst = 0.0f64;
        let at_shift = |rig: &mut Self, d: &[f64], s: f64| -> Result<f64> {
            let moved: Vec<f32> = at.iter().zip(d).map(|(&p, &d)| (p as f64 + s * d) as f32).collect();
            set(rig, &moved)?;
            rig.loss()
        };
        let mut directions: Vec<Vec<f64>> = Vec::new();
        for _ in 0..self.options.directions {
            let v: Vec<f64> = at.iter().map(|_| self.rng.random_range(-1.0f64..1.0)).collect();
            let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
            directions.push(v.iter().map(|a| a / norm).collect());
        }
        let mut order: Vec<usize> = (0..grad.len()).collect();
        order.sort_by(|&a, &b| grad[b].abs().total_cmp(&grad[a].abs()));
        for &i in order.iter().take(self.options.coordinates) {
            let mut v = vec![0.0; at.len()];
            v[i] = 1.0;
            directions.push(v);
        }
        for d in &directions {
            let numeric = (at_shift(self, d, eps)? - at_shift(self, d, -eps)?) / (2.0 * eps);
            let analytic: f64 = grad.iter().zip(d).map(|(&g, &d)| g as f64 * d).sum();
            let err = (numeric - analytic).abs() / analytic.abs().max(numeric.abs()).max(1e-3);
            worst = if err.is_nan() || worst.is_nan() { f64::NAN } else { worst.max(err) };
        }
        set(self, at)?;
        Ok(worst)
    }
}

/// Values for a tensor of `spec`: drawn from its initialiser as a model's are; constants
/// moved by up to 0.1 when `jitter` (parameters, so biases and scales are exercised), kept
/// exactly otherwise (state such as moving statistics).
fn draw(spec: &ParamSpec, rng: &mut StdRng, jitter: bool) -> Vec<f32> {
    let mut out = vec![0.0; spec.len()];
    crate::model::layout::fill(&mut out, spec.init, rng);
    if jitter && matches!(spec.init, Init::Zeros | Init::Ones) {
        out.iter_mut().for_each(|v| *v += rng.random_range(-0.1f32..0.1));
    }
    out
}
