//! Finite-difference gradient checks through small whole networks: the analytic gradient
//! of the compiled backward pass against central differences of the forward loss, along
//! random directions and on the largest single coordinates.

use std::sync::Arc;

use convoy::layers::*;
use convoy::model::{CompileOptions, Loss, Sequential};
use convoy::optim::Optimizer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

fn device() -> Vec<Arc<convoy::Device>> {
    vec![convoy::device::open(&std::env::var("CONVOY_TEST_DEVICE").unwrap_or_else(|_| "software".into())).unwrap().remove(0)]
}

fn compile(model: &mut Sequential, loss: Loss) {
    model
        .compile(CompileOptions::new(Optimizer::sgd(0.1)).loss(loss).devices(device()).seed(3).max_batch(8))
        .unwrap();
}

/// Checks the gradient of `model` on a random batch; returns the worst relative error.
fn check(model: &mut Sequential, batch: usize, classes: u32, seed: u64) -> f64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let sample: usize = model.input_shape().iter().product();
    let images: Vec<u8> = (0..batch * sample).map(|_| rng.random()).collect();
    let labels: Vec<u32> = (0..batch).map(|_| rng.random_range(0..classes)).collect();
    let (params, _, _) = model.get_weights().unwrap();
    let (loss, grads) = model.compute_gradients(&images, &labels).unwrap();
    assert!(grads.iter().all(|g| g.is_finite()), "non-finite gradient");
    let mut loss_at = |p: &[f32]| -> f64 {
        model.set_weights(p).unwrap();
        model.compute_gradients(&images, &labels).unwrap().0
    };
    // Small enough that ReLU kinks are rarely crossed, large enough for f32 forward noise.
    let eps = 2e-3f64;
    // What a central difference of f32 losses cannot resolve: four units in the last place
    // of the loss over 2 eps (1.3e-4 for a loss near 1.1). A gradient of 0.003 read through
    // it moved by 7e-3 of itself when BatchNorm's statistics changed their rounding order.
    let noise = 4.0 * f32::EPSILON as f64 * loss.abs() / (2.0 * eps);
    let rel = |numeric: f64, analytic: f64| ((numeric - analytic).abs() - noise).max(0.0) / analytic.abs().max(numeric.abs()).max(1e-3);
    let mut worst = 0.0f64;
    // Random directions of unit norm exercise every parameter at once.
    for _ in 0..3 {
        let v: Vec<f64> = params.iter().map(|_| rng.random_range(-1.0f64..1.0)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let shifted = |s: f64| -> Vec<f32> { params.iter().zip(&v).map(|(p, d)| (*p as f64 + s * d / norm) as f32).collect() };
        let numeric = (loss_at(&shifted(eps)) - loss_at(&shifted(-eps))) / (2.0 * eps);
        let analytic: f64 = grads.iter().zip(&v).map(|(g, d)| *g as f64 * d / norm).sum();
        let err = rel(numeric, analytic);
        eprintln!("direction: numeric {numeric:.6} analytic {analytic:.6} error {err:.2e}");
        worst = worst.max(err);
    }
    // The largest single coordinates.
    let mut order: Vec<usize> = (0..grads.len()).collect();
    order.sort_by(|&a, &b| grads[b].abs().total_cmp(&grads[a].abs()));
    for &i in order.iter().take(4) {
        let mut p = params.clone();
        p[i] = params[i] + eps as f32;
        let up = loss_at(&p);
        p[i] = params[i] - eps as f32;
        let down = loss_at(&p);
        let numeric = (up - down) / (2.0 * eps);
        let err = rel(numeric, grads[i] as f64);
        eprintln!("param {i}: numeric {numeric:.6} analytic {:.6} error {err:.2e}", grads[i]);
        worst = worst.max(err);
    }
    model.set_weights(&params).unwrap();
    worst
}

#[test]
fn conv_bn_relu_pool_dense_gradients_match_finite_differences() {
    let mut m = Sequential::new(&[7, 6, 3]);
    m.add(Conv2D::new(5, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(MaxPool2D::new(2));
    m.add(Flatten::new());
    m.add(Dense::new(4));
    compile(&mut m, Loss::SparseCategoricalCrossentropy);
    let err = check(&mut m, 5, 4, 1);
    assert!(err < 5e-3, "relative error {err:.3e}");
}

#[test]
fn residual_block_gradients_match_finite_differences() {
    let mut m = Sequential::new(&[6, 6, 3]);
    m.add(Conv2D::new(4, 3).padding(Padding::Explicit(1, 1)).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    let main: Vec<Box<dyn Layer>> = vec![
        Box::new(Conv2D::new(6, 3).strides(2).padding(Padding::Explicit(1, 1)).use_bias(false)),
        Box::new(BatchNormalization::new()),
        Box::new(ReLU::new()),
        Box::new(Conv2D::new(6, 3).padding(Padding::Explicit(1, 1)).use_bias(false)),
        Box::new(BatchNormalization::new()),
    ];
    let shortcut: Vec<Box<dyn Layer>> =
        vec![Box::new(Conv2D::new(6, 1).strides(2).use_bias(false)), Box::new(BatchNormalization::new())];
    m.add(Residual::new(main, shortcut));
    m.add(ReLU::new());
    let identity: Vec<Box<dyn Layer>> = vec![Box::new(Conv2D::new(6, 3).padding(Padding::Same)), Box::new(BatchNormalization::new())];
    m.add(Residual::new(identity, Vec::new()));
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(3));
    compile(&mut m, Loss::SparseCategoricalCrossentropy);
    let err = check(&mut m, 4, 3, 2);
    assert!(err < 5e-3, "relative error {err:.3e}");
}

#[test]
fn average_pool_dropout_free_mlp_with_mse_gradients_match() {
    let mut m = Sequential::new(&[5, 5, 2]);
    m.add(AveragePooling2D::new(2).strides(1));
    m.add(Flatten::new());
    m.add(Dense::new(7));
    m.add(ReLU::new());
    m.add(Dense::new(3));
    compile(&mut m, Loss::MeanSquaredError);
    let err = check(&mut m, 3, 3, 3);
    assert!(err < 5e-3, "relative error {err:.3e}");
}

/// MobileNet's block (depthwise 3x3 at stride 2 between BatchNorms), and a depthwise layer
/// with every option on (oblong kernel, strides (1, 2), multiplier 2, dilation, explicit
/// padding, bias): the first on 8 channels (the vec4 kernels), the second on 5 (scalar, 10
/// outputs). Without the block's ReLUs: with them, a random direction of step 2e-3 moves
/// some of the few hundred pre-activations across the kink, and central differences miss
/// by 1e-2 to 5e-1 whether the middle layer is this one or a Conv2D (measured with each in
/// turn); the whole block with ReLUs is checked against the f64 reference, which takes the
/// device's decisions (tests/depthwise.rs).
#[test]
fn depthwise_conv_gradients_match_finite_differences() {
    let mut m = Sequential::new(&[7, 6, 3]);
    m.add(Conv2D::new(8, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(DepthwiseConv2D::new(3).strides(2).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(4));
    compile(&mut m, Loss::SparseCategoricalCrossentropy);
    let err = check(&mut m, 5, 4, 4);
    assert!(err < 5e-3, "MobileNet block: relative error {err:.3e}");

    let mut m = Sequential::new(&[7, 6, 3]);
    m.add(Conv2D::new(5, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(DepthwiseConv2D::new((2, 3)).strides((1, 2)).padding(Padding::Explicit(1, 1)).depth_multiplier(2).dilation_rate((2, 1)));
    m.add(Flatten::new());
    m.add(Dense::new(3));
    compile(&mut m, Loss::SparseCategoricalCrossentropy);
    let err = check(&mut m, 4, 3, 5);
    assert!(err < 5e-3, "depthwise with every option: relative error {err:.3e}");
}

/// Conv2D's groups and dilation_rate (Keras'): ResNeXt's grouped 3x3 with a stride, a
/// dilated grouped one with an oblong rate, and one of a channel a group (a depthwise
/// convolution with a multiplier, as a grouped Conv2D), without ReLUs (see the depthwise
/// test above); with ReLUs the block is checked against the f64 reference
/// (tests/conv_groups.rs).
#[test]
fn grouped_and_dilated_conv_gradients_match_finite_differences() {
    let mut m = Sequential::new(&[7, 6, 3]);
    m.add(Conv2D::new(8, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(Conv2D::new(8, 3).strides(2).padding(Padding::Same).groups(4).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(Conv2D::new(6, 3).padding(Padding::Same).dilation_rate((2, 1)).groups(2));
    m.add(Conv2D::new(12, 2).dilation_rate(2).groups(6));
    m.add(Flatten::new());
    m.add(Dense::new(4));
    compile(&mut m, Loss::SparseCategoricalCrossentropy);
    let err = check(&mut m, 5, 4, 6);
    assert!(err < 5e-3, "grouped / dilated convolutions: relative error {err:.3e}");
}

/// The smooth activations, softmax, the per-channel maps, leaky and capped ReLUs (their
/// kinks are rarely within eps) and global max pooling (its argmax is stable under a small
/// step), through a residual chain whose ReLU6 must not be fused into the BatchNorm before it.
#[test]
fn activation_layers_gradients_match_finite_differences() {
    let mut m = Sequential::new(&[6, 5, 3]);
    m.add(Normalization::new(vec![0.2, -0.1, 0.0], vec![0.3, 2.0, 1.0]));
    m.add(Rescaling::per_channel(vec![0.5, 1.5, -1.0], vec![0.1]));
    m.add(Conv2D::new(4, 3).padding(Padding::Same));
    m.add(Activation::new("gelu").unwrap());
    let main: Vec<Box<dyn Layer>> = vec![
        Box::new(Conv2D::new(4, 3).padding(Padding::Same)),
        Box::new(BatchNormalization::new()),
        Box::new(ReLU::new().max_value(0.6).negative_slope(0.05)),
        Box::new(Conv2D::new(4, 1)),
        Box::new(Activation::new("silu").unwrap()),
    ];
    m.add(Residual::new(main, Vec::new()));
    m.add(LeakyReLU::new());
    m.add(GlobalMaxPooling2D::new());
    m.add(Dense::new(6));
    m.add(Activation::new("tanh").unwrap());
    m.add(Activation::of(ActivationFn::Gelu { approximate: true }));
    m.add(Softmax::new());
    m.add(Activation::new("sigmoid").unwrap());
    m.add(Dense::new(4));
    compile(&mut m, Loss::SparseCategoricalCrossentropy);
    let err = check(&mut m, 5, 4, 4);
    assert!(err < 5e-3, "relative error {err:.3e}");
}
