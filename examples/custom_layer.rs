//! A layer convoy does not ship, written from outside the crate: Mish (`x * tanh(softplus(x))`,
//! Misra 2019) with its own WGSL kernels. The example checks its gradients (finite
//! differences, then an f64 reference), runs Keras' layer round trip, trains a model with it,
//! saves the model and loads it back through `register_layer`, and compares the evaluations.
//!
//! cargo run --release --example custom_layer [-- DEVICES]   (default: software)

use std::sync::Arc;

use convoy::kernels::{grid_for, Dispatch, Shader};
use convoy::layers::{Graph, Saved, Weights};
use convoy::model::FromConfig;
use convoy::prelude::*;
use convoy::testing::{self, GradcheckOptions, ReferenceInputs, ReferenceOutputs};
use convoy::{Result, Tensor};

/// The layer's kernels. `Shader::new` keeps wgpu's runtime bounds checks on every device, so
/// an indexing mistake here cannot touch memory the kernel does not own; a shader named like
/// one of convoy's (say `elementwise.wgsl`) would still run this code, since devices cache
/// modules by their text.
const MISH: Shader = Shader::new(
    "mish.wgsl",
    r#"
struct Params { n: u32, _pad0: u32, _pad1: u32, _pad2: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;

// log(1 + e^x) without overflow for large |x|.
fn softplus(v: f32) -> f32 {
    return max(v, 0.0) + log(1.0 + exp(-abs(v)));
}

// convoy's grids fold into 2-D past 65535 workgroups: rebuild the linear index.
fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn mish_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i >= p.n { return; }
    let v = x[i];
    out[i] = v * tanh(softplus(v));
}

@compute @workgroup_size(256)
fn mish_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i >= p.n { return; }
    let v = x[i];
    let t = tanh(softplus(v));
    let sigmoid = 1.0 / (1.0 + exp(-v));
    // d/dv [v tanh(sp(v))] = tanh(sp) + v (1 - tanh(sp)^2) sigmoid(v)
    out[i] = dy[i] * (t + v * (1.0 - t * t) * sigmoid);
}
"#,
);

/// Mish activation, element-wise on any shape.
#[derive(Debug, Clone, Default)]
struct Mish;

impl Mish {
    /// One launch over every element of `x`; `dy` is bound for the backward.
    fn launch(g: &Graph, entry: &'static str, x: &Tensor, dy: Option<&Tensor>, out: &Tensor) -> Result<Dispatch> {
        let n = x.len();
        let params = [n as u32, 0, 0, 0];
        let mut tensors = vec![(1, x), (2, out)];
        tensors.extend(dy.map(|d| (3, d)));
        Ok(Dispatch::with_params(g.device, &MISH, entry, &[], &params, &tensors, grid_for(g.device, n)?).named(entry, 0.0))
    }
}

impl Layer for Mish {
    fn class_name(&self) -> &'static str {
        "Mish"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let y = g.activation(&x.shape()[1..])?;
        let d = Self::launch(g, "mish_forward", x, None, &y)?;
        g.push(d);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !need_dx {
            return Ok(None);
        }
        let dx = g.activation(&x.shape()[1..])?;
        let d = Self::launch(g, "mish_backward", x, Some(dy), &dx)?;
        g.push(d);
        Ok(Some(dx))
    }
}

impl FromConfig for Mish {
    const CLASS_NAME: &'static str = "Mish";
    fn from_config(_: &serde_json::Value) -> Result<Self> {
        Ok(Mish)
    }
}

/// Mish and its derivative in f64: the independent reference for `gradcheck_reference`.
fn mish_f64(inputs: &ReferenceInputs) -> ReferenceOutputs {
    let sp = |v: f64| v.max(0.0) + (-v.abs()).exp().ln_1p();
    let y = inputs.x.iter().map(|&v| v * sp(v).tanh()).collect();
    let dx = inputs
        .x
        .iter()
        .zip(&inputs.dy)
        .map(|(&v, &d)| {
            let t = sp(v).tanh();
            d * (t + v * (1.0 - t * t) / (1.0 + (-v).exp()))
        })
        .collect();
    ReferenceOutputs { y, dx, dparams: Vec::new() }
}

fn main() {
    let selection = std::env::args().nth(1).unwrap_or_else(|| "software".into());
    if let Err(e) = run(&selection) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Everything the example shows, on the adapters `selection` names.
pub fn run(selection: &str) -> Result<()> {
    let devices = convoy::device::open(selection)?;
    let device: &Arc<convoy::Device> = &devices[0];
    println!("device: {}", device.name());

    // 1. Gradients, first against central differences of the layer's own forward pass,
    //    then against the f64 reference above (on an odd shape, batch 5).
    let by_differences = testing::gradcheck(device, &Mish, &[5, 7, 3])?;
    println!("gradcheck against finite differences:\n{by_differences}");
    by_differences.check()?;
    let options = GradcheckOptions { batch: 5, ..Default::default() };
    let by_reference = testing::gradcheck_reference(device, &Mish, &[9, 11, 6], &options, &mish_f64)?;
    println!("gradcheck against the f64 reference:\n{by_reference}");
    by_reference.check()?;

    // 2. Saving needs the class registered for loading; then Keras' layer round trip.
    convoy::register_layer::<Mish>()?;
    let roundtrip = testing::layer_roundtrip(device, &Mish, &[8, 8, 3])?;
    println!("layer round trip: {} ok, one step's loss {:.4}", roundtrip.saved, roundtrip.loss);

    // 3. Train a small model with it on the built-in synthetic task.
    let (train, val) = convoy::data::synthetic_split(4096, 1024, 16, 0)?;
    let (train, val): (Arc<dyn convoy::data::Dataset>, Arc<dyn convoy::data::Dataset>) = (Arc::new(train), Arc::new(val));
    let (shape, classes) = (train.image_shape(), train.num_classes());
    let mut model = Sequential::new(&shape);
    model.add(Conv2D::new(16, 3).strides(2).padding(Padding::Same));
    model.add(Mish);
    model.add(Flatten::new());
    model.add(Dense::new(64));
    model.add(Mish);
    model.add(Dense::new(classes));
    print!("{}", model.summary()?);
    model.compile(CompileOptions::new(Optimizer::adam(2e-3)).devices(devices.clone()).max_batch(128).seed(1))?;
    let history = model.fit(train, FitOptions { epochs: 4, batch_size: 128, validation_data: Some(val.clone()), ..Default::default() })?;
    let val_accuracy = history.history().get("val_accuracy").and_then(|v| v.last().copied()).unwrap_or(f64::NAN);
    println!("validation accuracy after {} epochs: {val_accuracy:.3}", history.epochs().len());

    // 4. Save, load back (the registry rebuilds Mish) and evaluate both the same way.
    let path = std::env::temp_dir().join(format!("convoy-custom-layer-{}.safetensors", std::process::id()));
    model.save(&path)?;
    let (mut loaded, _) = Sequential::load(&path)?;
    loaded.compile(CompileOptions::new(Optimizer::adam(2e-3)).devices(devices).max_batch(128).seed(1))?;
    let before = model.evaluate(val.clone(), 128)?;
    let after = loaded.evaluate(val, 128)?;
    let _ = std::fs::remove_file(&path);
    let (a, b) = (before["loss"], after["loss"]);
    println!("evaluation before saving: loss {a:.6}, accuracy {:.4}", before["accuracy"]);
    println!("evaluation after loading: loss {b:.6}, accuracy {:.4}", after["accuracy"]);
    if a.to_bits() != b.to_bits() || before["accuracy"] != after["accuracy"] {
        return Err(convoy::Error::Mismatch(format!("the loaded model evaluates to loss {b}, the saved one to {a}")));
    }
    println!("identical: ok");
    Ok(())
}
