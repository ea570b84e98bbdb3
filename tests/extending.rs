//! The extension surface: user shaders (cached by content, bounds-checked unless vouched for),
//! custom layers with their own kernels (gradient check, round trip, registry, data-parallel
//! training, freezing, precision policy), and loading models that use them.

mod common;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use convoy::device::ShaderChecks;
use convoy::kernels::{elementwise, grid_for, Dispatch, Shader};
use convoy::layers::{Dense, Flatten, Graph, Init, Layer, ParamSpec, Saved, Weights};
use convoy::model::config::layer_from_config;
use convoy::model::{CompileOptions, DTypePolicy, FromConfig, Sequential};
use convoy::optim::Optimizer;
use convoy::testing::{self, GradcheckOptions, ReferenceInputs, ReferenceOutputs};
use convoy::{Device, Result, Tensor};
use serde_json::json;

fn selection() -> String {
    std::env::var("CONVOY_TEST_DEVICE").unwrap_or_else(|_| "software".into())
}

fn device() -> Arc<Device> {
    convoy::device::open(&selection()).unwrap().remove(0)
}

/// Per-channel scale `y = x * s[c]` over the last axis, with its own kernels: a layer with a
/// parameter, so the registry, freezing and the exchange of its gradient are all exercised.
/// `broken` makes the input gradient ignore the scale (the gradient check must catch it).
#[derive(Debug, Clone, Default)]
struct ChannelScale {
    broken: bool,
}

const SCALE: Shader = Shader::new(
    "channel_scale.wgsl",
    r#"
struct Params { n: u32, c: u32, flags: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }

// out = a * b[channel]: the forward (a = x, b = s) and the input gradient (a = dy, b = s).
@compute @workgroup_size(256)
fn scale_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i >= p.n { return; }
    out[i] = select(a[i] * b[i % p.c], a[i], p.flags == 1u);
}

// out[c] = sum over rows of a * b: the scale's gradient (a = dy, b = x), one invocation a channel.
@compute @workgroup_size(256)
fn column_dot(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if c >= p.c { return; }
    var s = 0.0;
    for (var i = c; i < p.n; i += p.c) { s += a[i] * b[i]; }
    out[c] = s;
}
"#,
);

impl ChannelScale {
    fn launch(g: &Graph, entry: &'static str, a: &Tensor, b: &Tensor, out: &Tensor, flags: u32) -> Result<Dispatch> {
        let (n, c) = (a.len(), *a.shape().last().unwrap());
        let groups = if entry == "column_dot" { [(c as u32).div_ceil(256), 1, 1] } else { grid_for(g.device, n)? };
        Ok(Dispatch::with_params(g.device, &SCALE, entry, &[], &[n as u32, c as u32, flags, 0], &[(1, a), (2, b), (3, out)], groups))
    }
}

impl Layer for ChannelScale {
    fn class_name(&self) -> &'static str {
        "ChannelScale"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(input.to_vec())
    }
    fn params(&self, input: &[usize]) -> Vec<ParamSpec> {
        vec![ParamSpec::new("scale", vec![*input.last().unwrap()], Init::Ones, false)]
    }
    fn config(&self) -> serde_json::Value {
        json!({})
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved> {
        let y = g.activation(&x.shape()[1..])?;
        let d = Self::launch(g, "scale_rows", x, &w.params[0], &y, 0)?;
        g.push(d);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, w: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !w.grads.is_empty() {
            let d = Self::launch(g, "column_dot", dy, x, &w.grads[0], 0)?;
            g.push(d);
        }
        if !need_dx {
            return Ok(None);
        }
        let dx = g.activation(&x.shape()[1..])?;
        let d = Self::launch(g, "scale_rows", dy, &w.params[0], &dx, self.broken as u32)?;
        g.push(d);
        Ok(Some(dx))
    }
}

impl FromConfig for ChannelScale {
    const CLASS_NAME: &'static str = "ChannelScale";
    fn from_config(_: &serde_json::Value) -> Result<Self> {
        Ok(ChannelScale::default())
    }
}

fn scale_f64(inputs: &ReferenceInputs) -> ReferenceOutputs {
    let s = &inputs.params[0];
    let c = s.len();
    let y = inputs.x.iter().enumerate().map(|(i, v)| v * s[i % c]).collect();
    let dx = inputs.dy.iter().enumerate().map(|(i, d)| d * s[i % c]).collect();
    let mut ds = vec![0.0; c];
    for (i, (d, x)) in inputs.dy.iter().zip(&inputs.x).enumerate() {
        ds[i % c] += d * x;
    }
    ReferenceOutputs { y, dx, dparams: vec![ds] }
}

#[test]
fn a_user_shader_named_like_a_built_in_one_runs_its_own_code() {
    let device = device();
    let x = device.upload(&[7], &[-3.0, -1.0, 0.0, 1.0, 2.0, -0.5, 4.0]).unwrap();
    let (y, z) = (device.zeros(&[7]).unwrap(), device.zeros(&[7]).unwrap());
    let builtin = elementwise::relu_forward(&device, &x, &y).unwrap();
    // The user's shader takes the very name and entry point the built-in launch used.
    assert_eq!((builtin.shader, builtin.label), ("elementwise.wgsl", "relu_forward"));
    const IMPOSTOR: Shader = Shader::new(
        "elementwise.wgsl",
        "@group(0) @binding(0) var<storage, read_write> out: array<f32>;
         @compute @workgroup_size(64) fn relu_forward(@builtin(global_invocation_id) g: vec3<u32>) {
             if g.x < arrayLength(&out) { out[g.x] = 42.0; }
         }",
    );
    let mine = Dispatch::new(&device, &IMPOSTOR, "relu_forward", &[], &[(0, z.binding())], [1, 1, 1]);
    let again = elementwise::relu_forward(&device, &x, &y).unwrap();
    device.run(&[builtin, mine, again]);
    assert_eq!(device.read(&y).unwrap(), vec![0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 4.0]);
    assert_eq!(device.read(&z).unwrap(), vec![42.0; 7]);
    device.check().unwrap();
}

#[test]
fn user_shaders_keep_bounds_checks_where_convoys_own_drop_them() {
    let unchecked = convoy::device::open_with(&selection(), ShaderChecks::Unchecked).unwrap().remove(0);
    assert!(!unchecked.compiles_checked(&convoy::kernels::ELEMENTWISE));
    assert!(unchecked.compiles_checked(&SCALE));
    // SAFETY: not dispatched; only how it would be compiled is asked.
    let vouched = unsafe { Shader::new_unchecked("vouched.wgsl", "") };
    assert!(!unchecked.compiles_checked(&vouched));
    let checked = convoy::device::open_with(&selection(), ShaderChecks::Checked).unwrap().remove(0);
    assert!(checked.compiles_checked(&convoy::kernels::ELEMENTWISE) && checked.compiles_checked(&vouched));
    // And a user's layer trains on the device that ships unchecked shaders.
    let report = testing::gradcheck(&unchecked, &ChannelScale::default(), &[3, 4, 5]).unwrap();
    report.check().unwrap();
}

#[test]
fn gradcheck_passes_correct_layers_and_catches_a_wrong_gradient() {
    let device = device();
    for shape in [[3usize, 4, 5], [1, 1, 1], [2, 9, 7]] {
        let fd = testing::gradcheck(&device, &ChannelScale::default(), &shape).unwrap();
        fd.check().unwrap_or_else(|e| panic!("{shape:?}: {e}\n{fd}"));
        assert_eq!(fd.tensors.iter().map(|t| t.tensor.as_str()).collect::<Vec<_>>(), ["x", "scale"]);
        let opts = GradcheckOptions { batch: 5, seed: 3, ..Default::default() };
        let r = testing::gradcheck_reference(&device, &ChannelScale::default(), &shape, &opts, &scale_f64).unwrap();
        r.check().unwrap_or_else(|e| panic!("{shape:?}: {e}\n{r}"));
    }
    // convoy's own layers pass the same check.
    let dense = testing::gradcheck(&device, &Dense::new(3), &[6]).unwrap();
    dense.check().unwrap_or_else(|e| panic!("{e}\n{dense}"));
    let bn = testing::gradcheck_with(&device, &convoy::layers::BatchNormalization::new(), &[2, 3, 4], &GradcheckOptions { batch: 4, ..Default::default() }).unwrap();
    bn.check().unwrap_or_else(|e| panic!("{e}\n{bn}"));

    // A backward that forgets the scale in dx: both methods name `x`, and only `x`.
    let broken = ChannelScale { broken: true };
    let fd = testing::gradcheck(&device, &broken, &[3, 4, 5]).unwrap();
    let e = fd.check().unwrap_err().to_string();
    assert!(e.contains(" x ") && !e.contains("scale"), "{e}\n{fd}");
    let r = testing::gradcheck_reference(&device, &broken, &[3, 4, 5], &GradcheckOptions::default(), &scale_f64).unwrap();
    let e = r.check().unwrap_err().to_string();
    assert!(e.contains(" x ") && !e.contains("scale"), "{e}\n{r}");
}

fn model_with_scale(devices: Vec<Arc<Device>>) -> Sequential {
    let mut m = Sequential::new(&[4, 4, 3]);
    m.add(Flatten::new());
    m.add(Dense::new(8));
    m.add(ChannelScale::default());
    m.add(Dense::new(3));
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(devices).seed(5).max_batch(12)).unwrap();
    m
}

fn batch(seed: u8) -> (Vec<u8>, Vec<u32>) {
    let images = (0..12 * 48).map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed.wrapping_mul(11))).collect();
    let labels = (0..12).map(|i| (i + seed as u32) % 3).collect();
    (images, labels)
}

#[test]
fn a_custom_layer_trains_on_replicas_and_freezes_like_a_built_in_one() {
    let one = model_with_scale(vec![device()]);
    // Two replicas: `software:2`, or the test adapter twice (`0,0`) on the GPU machine.
    let two = model_with_scale(match std::env::var("CONVOY_TEST_DEVICE") {
        Ok(sel) => convoy::device::open(&format!("{sel},{sel}")).unwrap(),
        Err(_) => convoy::device::open("software:2").unwrap(),
    });
    let mut models = [one, two];
    for m in models.iter_mut() {
        for s in 0..3 {
            let (x, y) = batch(s);
            assert!(m.train_on_batch(&x, &y).unwrap()["loss"].is_finite());
        }
    }
    let (a, b) = (models[0].get_weights().unwrap().0, models[1].get_weights().unwrap().0);
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "one replica and two differ by {diff}");
    let replicas = models[1].replica_weights().unwrap();
    assert_eq!(replicas[0].0, replicas[1].0, "the replicas hold different weights");

    // Frozen: the scale (after Flatten's 0 and Dense's 48 * 8 + 8 parameters) stays put.
    let mut m = model_with_scale(vec![device()]);
    m.set_trainable(2, false).unwrap();
    let before = m.get_weights().unwrap().0;
    let (x, y) = batch(1);
    m.train_on_batch(&x, &y).unwrap();
    let after = m.get_weights().unwrap().0;
    let at = 48 * 8 + 8;
    assert_eq!(before[at..at + 8], after[at..at + 8], "a frozen custom layer moved");
    assert_ne!(before[..at], after[..at], "the layers around it did not train");
}

/// An identity layer `$name` that saves and registers as `$class`.
macro_rules! passthrough_layer {
    ($name:ident, $class:literal) => {
        #[derive(Debug)]
        struct $name;
        impl Layer for $name {
            fn class_name(&self) -> &'static str {
                $class
            }
            fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
                Ok(input.to_vec())
            }
            fn config(&self) -> serde_json::Value {
                json!({})
            }
            fn forward(&self, _: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
                Ok(Saved::output(x.clone()))
            }
            fn backward(&self, _: &mut Graph, _: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, n: bool) -> Result<Option<Tensor>> {
                Ok(n.then(|| dy.clone()))
            }
        }
        impl FromConfig for $name {
            const CLASS_NAME: &'static str = $class;
            fn from_config(_: &serde_json::Value) -> Result<Self> {
                Ok($name)
            }
        }
    };
}

#[test]
fn saved_models_with_custom_layers_load_once_registered() {
    let dir = common::tmp("registry");
    let path = dir.join("scaled.safetensors");
    let mut m = model_with_scale(vec![device()]);
    let (x, y) = batch(2);
    m.train_on_batch(&x, &y).unwrap();
    m.save(&path).unwrap();

    // The command line cannot know the layer: its error says to load the model from Rust.
    let out = common::convoy(&["evaluate", "--load", path.to_str().unwrap(), "--devices", &selection()]);
    common::fails_with(&out, &["ChannelScale", "register_layer", "from Rust"]);

    // Names of built-in layers are refused; the same type twice is fine.
    passthrough_layer!(NotDense, "Dense");
    let e = convoy::register_layer::<NotDense>().unwrap_err().to_string();
    assert!(e.contains("`Dense`") && e.contains("built-in"), "{e}");

    convoy::register_layer::<ChannelScale>().unwrap();
    convoy::register_layer::<ChannelScale>().unwrap();
    let (mut loaded, _) = Sequential::load(&path).unwrap();
    assert_eq!(loaded.layers()[2].class_name(), "ChannelScale");
    assert_eq!(loaded.get_weights().unwrap().0, m.get_weights().unwrap().0);
    loaded.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(vec![device()]).max_batch(12)).unwrap();
    let report = testing::layer_roundtrip(&device(), &ChannelScale::default(), &[3, 5, 2]).unwrap();
    assert_eq!((report.params, report.states), (2, 0));
    assert_eq!(layer_from_config(&report.saved).unwrap().class_name(), "ChannelScale");

    passthrough_layer!(Impostor, "ChannelScale");
    let e = convoy::register_layer::<Impostor>().unwrap_err().to_string();
    assert!(e.contains("already registered"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Records the policy each forward saw (0: none yet, 1: float32, 2: mixed).
#[derive(Debug)]
struct PolicyProbe {
    mixed: bool,
    seen: &'static AtomicU8,
}

impl Layer for PolicyProbe {
    fn class_name(&self) -> &'static str {
        "PolicyProbe"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({})
    }
    fn supports_mixed_precision(&self) -> bool {
        self.mixed
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        self.seen.store(if g.gemm().mixed { 2 } else { 1 }, Ordering::SeqCst);
        Ok(Saved::output(x.clone()))
    }
    fn backward(&self, _: &mut Graph, _: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, n: bool) -> Result<Option<Tensor>> {
        Ok(n.then(|| dy.clone()))
    }
}

#[test]
fn under_mixed_float16_a_custom_layer_runs_in_f32_unless_it_declares_otherwise() {
    static PLAIN: AtomicU8 = AtomicU8::new(0);
    static DECLARED: AtomicU8 = AtomicU8::new(0);
    let mut m = Sequential::new(&[2, 2, 3]);
    m.add(Flatten::new());
    m.add(PolicyProbe { mixed: false, seen: &PLAIN });
    m.add(PolicyProbe { mixed: true, seen: &DECLARED });
    m.add(Dense::new(2));
    m.set_dtype_policy(DTypePolicy::MixedFloat16);
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(vec![device()]).max_batch(2)).unwrap();
    m.train_on_batch(&[7u8; 24], &[0, 1]).unwrap();
    assert_eq!((PLAIN.load(Ordering::SeqCst), DECLARED.load(Ordering::SeqCst)), (1, 2));
}
