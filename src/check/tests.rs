//! The reference proved on its own: gradients against f64 central differences of its own
//! loss, forward values against direct definitions, the optimizer against hand-computed
//! steps, and the kink report against decisions flipped on purpose.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::*;
use crate::kernels::conv2d::Padding;
use crate::layers::*;
use crate::model::layout::Layout;
use crate::model::{Loss, Sequential};
use crate::optim::Optimizer;

/// What `Sequential::compile` fixes without a device: layout, classes, loss, fused ReLUs.
fn prepare(model: &mut Sequential, loss: Loss) -> (Net, Layout) {
    let def = &mut model.def;
    def.layout = def.build_layout().unwrap();
    def.classes = def.layout.shapes.last().unwrap()[0];
    def.loss = loss;
    def.fuse_relus();
    (Net::from_definition(def).unwrap(), def.layout.clone())
}

/// Random weights with non-trivial BatchNorm scales, shifts and biases (the initial ones
/// are exactly 1 and 0, which would hide a swapped or dropped term), and random positive
/// moving statistics.
fn weights(layout: &Layout, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (p, s) = layout.initial_values(seed);
    let mut p: Vec<f64> = p.into_iter().map(f64::from).collect();
    for e in &layout.params {
        let v = &mut p[e.range()];
        match e.spec.name {
            "gamma" => v.iter_mut().for_each(|x| *x = rng.random_range(0.6..1.4)),
            "beta" | "bias" => v.iter_mut().for_each(|x| *x = rng.random_range(-0.3..0.3)),
            _ => {}
        }
    }
    let mut s: Vec<f64> = s.into_iter().map(f64::from).collect();
    for e in &layout.states {
        let lo = if e.spec.name == "moving_variance" { 0.5 } else { -0.5 };
        s[e.range()].iter_mut().for_each(|x| *x = rng.random_range(lo..lo + 1.0));
    }
    (p, s)
}

fn batch(net: &Net, n: usize, seed: u64) -> (Vec<u8>, Vec<u32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let sample: usize = net.input_shape.iter().product();
    let images = (0..n * sample).map(|_| rng.random()).collect();
    let labels = (0..n).map(|_| rng.random_range(0..net.classes as u32)).collect();
    (images, labels)
}

/// The worst disagreement, relative to each tensor's largest gradient, between the
/// reference's gradient and central differences (step 1e-6) of its own loss with the same
/// decisions held fixed (which makes the loss smooth), on each tensor's largest coordinate
/// and a few random ones.
#[allow(clippy::too_many_arguments)]
fn gradcheck(net: &Net, layout: &Layout, params: &[f64], states: &[f64], images: &[u8], labels: &[u32], decisions: &[Decision], seed: u64) -> f64 {
    gradcheck_except(net, layout, params, states, images, labels, decisions, seed, &[])
}

/// [`gradcheck`] of every parameter tensor but those listed (by index into `layout.params`).
#[allow(clippy::too_many_arguments)]
fn gradcheck_except(net: &Net, layout: &Layout, params: &[f64], states: &[f64], images: &[u8], labels: &[u32], decisions: &[Decision], seed: u64, skip: &[usize]) -> f64 {
    let scale = 1.0 / labels.len() as f64;
    let step = train_step(net, layout, params, states, images, labels, decisions, scale).unwrap();
    let loss_at = |p: &[f64]| -> f64 { train_step(net, layout, p, states, images, labels, decisions, scale).unwrap().losses.iter().sum::<f64>() * scale };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut worst = 0.0f64;
    let h = 1e-6;
    for (i, (e, g)) in layout.params.iter().zip(&step.grads).enumerate() {
        if skip.contains(&i) {
            continue;
        }
        assert_eq!(g.len(), e.spec.len());
        assert!(g.iter().all(|v| v.is_finite()), "{}: non-finite gradient", e.name);
        let norm = g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let largest = g.iter().enumerate().fold(0, |best, (i, v)| if v.abs() > g[best].abs() { i } else { best });
        let mut coords = vec![largest];
        coords.extend((0..3).map(|_| rng.random_range(0..g.len())));
        for k in coords {
            let mut p = params.to_vec();
            p[e.offset + k] += h;
            let up = loss_at(&p);
            p[e.offset + k] -= 2.0 * h;
            let down = loss_at(&p);
            let fd = (up - down) / (2.0 * h);
            // A tensor whose gradient is zero (BatchNorm's input with a single row) is
            // compared absolutely, against the differences' rounding (~1e-10).
            let err = (fd - g[k]).abs() / norm.max(1e-3);
            assert!(err < 1e-6, "{}[{k}]: analytic {:e}, central difference {fd:e} (tensor max {norm:e}, error {err:e})", e.name, g[k]);
            worst = worst.max(err);
        }
    }
    worst
}

/// Every node type but the residual block: convolutions with valid, same and explicit
/// padding, stride 2 and (2, 1), oblong kernels, with and without bias; BatchNorm with and
/// without a fused ReLU; standalone ReLUs; max pooling (same) and average pooling (same, and
/// PyTorch's explicit padding, which counts padding in the mean); flatten.
fn plain_net(loss: Loss) -> (Net, Layout) {
    let mut m = Sequential::new(&[9, 8, 2]);
    let mut oblong = Conv2D::new(3, 3);
    oblong.kernel_size = (3, 2);
    m.add(oblong);
    m.add(BatchNormalization::new().momentum(0.9));
    m.add(ReLU::new());
    m.add(Conv2D::new(4, 3).padding(Padding::Same).strides(2).use_bias(false));
    m.add(ReLU::new());
    let mut explicit = Conv2D::new(4, 2).padding(Padding::Explicit(1, 2));
    explicit.kernel_size = (2, 3);
    explicit.strides = (2, 1);
    m.add(explicit);
    m.add(MaxPool2D::new(2).padding(crate::kernels::pool::PoolPadding::Same));
    m.add(BatchNormalization::new().epsilon(1e-2));
    m.add(AveragePooling2D::new(2).strides(1).padding(crate::kernels::pool::PoolPadding::Same));
    m.add(AveragePooling2D::new(3).strides(1).padding(crate::kernels::pool::PoolPadding::Explicit(1, 1)));
    m.add(Flatten::new());
    m.add(Dense::new(5));
    m.add(ReLU::new());
    m.add(Dense::new(3));
    prepare(&mut m, loss)
}

fn block(main: Vec<Box<dyn Layer>>, shortcut: Vec<Box<dyn Layer>>) -> Residual {
    Residual::new(main, shortcut)
}

fn conv_bn(filters: usize, kernel: usize, stride: usize, bias: bool) -> Vec<Box<dyn Layer>> {
    vec![
        Box::new(Conv2D::new(filters, kernel).strides(stride).padding(Padding::Explicit(kernel / 2, kernel / 2)).use_bias(bias)),
        Box::new(BatchNormalization::new().momentum(0.9).epsilon(1e-5)),
    ]
}

/// Residual blocks with an identity shortcut and with a projection, with and without the
/// fused join ReLU; max pooling as the ResNet stem's (3x3, stride 2, explicit padding 1);
/// global average pooling.
fn residual_net(loss: Loss) -> (Net, Layout) {
    prepare(&mut residual_model(), loss)
}

fn residual_model() -> Sequential {
    let mut m = Sequential::new(&[6, 6, 3]);
    for l in conv_bn(4, 3, 1, false) {
        m.add_boxed(l);
    }
    m.add(ReLU::new());
    let mut main = conv_bn(4, 3, 1, false);
    main.push(Box::new(ReLU::new()));
    main.extend(conv_bn(4, 3, 1, true));
    m.add(block(main, Vec::new()));
    m.add(ReLU::new());
    m.add(MaxPool2D::new(3).strides(2).padding(crate::kernels::pool::PoolPadding::Explicit(1, 1)));
    let mut main = conv_bn(6, 3, 2, false);
    main.push(Box::new(ReLU::new()));
    main.extend(conv_bn(6, 3, 1, false));
    m.add(block(main, conv_bn(6, 1, 2, false)));
    let mut main = conv_bn(6, 3, 1, false);
    main.push(Box::new(ReLU::new()));
    m.add(block(main, conv_bn(6, 1, 1, true)));
    m.add(ReLU::new());
    m.add(block(conv_bn(6, 1, 1, false), Vec::new()));
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(4));
    m
}

/// [`residual_model`] with the stem's BatchNorm (its ReLU fused) and the first residual
/// block (two BatchNorms, one with a fused ReLU) frozen.
fn frozen_residual_model() -> Sequential {
    let mut m = residual_model();
    assert_eq!((m.layers()[1].class_name(), m.layers()[3].class_name()), ("BatchNormalization", "Residual"));
    m.set_trainable(1, false).unwrap();
    m.set_trainable(3, false).unwrap();
    m
}

#[test]
fn nets_fold_fused_relus() {
    let (net, layout) = residual_net(Loss::SparseCategoricalCrossentropy);
    assert_eq!(net.nodes.len(), 9, "{:#?}", net.nodes);
    assert!(matches!(net.nodes[1], Node::BatchNorm { relu: true, .. }));
    assert!(matches!(&net.nodes[2], Node::Residual { relu: true, shortcut, main } if shortcut.is_empty() && main.len() == 5 && main[2] == Node::ReLU));
    assert!(matches!(net.nodes[4], Node::Residual { relu: false, .. }));
    assert!(matches!(net.nodes[5], Node::Residual { relu: true, .. }));
    assert_eq!(net.names[2], "residual");
    assert_eq!(net.param_shapes().unwrap(), layout.params.iter().map(|e| e.spec.shape.clone()).collect::<Vec<_>>());
    let (net, _) = plain_net(Loss::SparseCategoricalCrossentropy);
    assert!(matches!(net.nodes[2], Node::Conv2D { kernel: (3, 3), strides: (2, 2), padding: Padding::Same, use_bias: false, .. }));
    assert!(matches!(net.nodes[3], Node::ReLU));
    assert!(matches!(net.nodes[4], Node::Conv2D { kernel: (2, 3), strides: (2, 1), padding: Padding::Explicit(1, 2), use_bias: true, .. }));
}

#[test]
fn gradients_match_central_differences() {
    for loss in [Loss::SparseCategoricalCrossentropy, Loss::MeanSquaredError] {
        for (which, (net, layout)) in [("plain", plain_net(loss)), ("residual", residual_net(loss))] {
            let (params, states) = weights(&layout, 5);
            let (images, labels) = batch(&net, 3, 6);
            let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
            let worst = gradcheck(&net, &layout, &params, &states, &images, &labels, &decisions, 7);
            eprintln!("{which} net, {loss:?}: worst relative error {worst:e}");
        }
    }
}

/// Dense -> BatchNorm + ReLU on a batch of one: every channel sees a single row, so the
/// variance is 0, x_hat is 0 and the output is exactly beta.
fn single_row_net() -> (Net, Layout, Vec<f64>, Vec<f64>) {
    let mut m = Sequential::new(&[2, 2, 1]);
    m.add(Flatten::new());
    m.add(Dense::new(4));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(Dense::new(3));
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    let (mut params, states) = weights(&layout, 9);
    let beta = &layout.params[3];
    assert_eq!(beta.name, "batch_normalization/beta");
    params[beta.offset..beta.offset + 4].copy_from_slice(&[1e-12, 0.5, -0.5, 0.3]);
    (net, layout, params, states)
}

#[test]
fn batchnorm_of_a_single_row() {
    let (net, layout, params, states) = single_row_net();
    let (images, labels) = batch(&net, 1, 3);
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    assert_eq!(decisions[2], Decision::Relu(vec![1e-12, 0.5, 0.0, 0.3]));
    gradcheck(&net, &layout, &params, &states, &images, &labels, &decisions, 1);
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &decisions, 1.0).unwrap();
    assert!(step.grads[0].iter().all(|&g| g == 0.0), "nothing before a one-row BatchNorm can move its output: {:?}", step.grads[0]);
    assert_eq!((step.kinks.ties, step.kinks.flipped, step.kinks.mismatch_count), (1, 0, 0));
    // The decisions hold the f64 outputs rounded to f32: that rounding is all the drift.
    assert!(step.kinks.drift < 1e-7 && step.kinks.drift_at == "batch_normalization", "{:?}", step.kinks);
}

#[test]
fn flipped_ties_and_mismatches_are_told_apart() {
    let (net, layout, params, states) = single_row_net();
    let (images, labels) = batch(&net, 1, 3);
    let own = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let scale = 1.0;
    let base = train_step(&net, &layout, &params, &states, &images, &labels, &own, scale).unwrap();

    // Unit 0 sits at 1e-12 against a layer RMS of 0.35: inactive on the device is a tie.
    let mut tie = own.clone();
    tie[2] = Decision::Relu(vec![0.0, 0.5, 0.0, 0.3]);
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &tie, scale).unwrap();
    assert_eq!((step.kinks.ties, step.kinks.flipped, step.kinks.mismatch_count), (1, 1, 0));

    // Unit 1 is at 0.5: inactive on the device is a mismatch, which the gradient still follows.
    let mut wrong = own.clone();
    wrong[2] = Decision::Relu(vec![1e-12, 0.0, 0.0, 0.3]);
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &wrong, scale).unwrap();
    assert_eq!((step.kinks.ties, step.kinks.flipped, step.kinks.mismatch_count), (1, 0, 1));
    assert!(step.kinks.mismatches[0].starts_with("batch_normalization: unit 1: f64 pre-activation 5.000000e-1"), "{:?}", step.kinks.mismatches);
    assert_eq!(step.grads[3][1], 0.0, "the device's inactive unit passes no gradient to beta");
    assert!(base.grads[3][1] != 0.0);
    gradcheck(&net, &layout, &params, &states, &images, &labels, &wrong, 2);

    // The wrong side's output (0 instead of 0.5) reaches the logits too.
    assert!(step.logits.iter().zip(&base.logits).any(|(a, b)| (a - b).abs() > 1e-3));
}

/// A 1x1 convolution mixing a pixel channel with 1e-7 of another, then a 2x2 max pool:
/// two pixels with equal first channels give values 1e-8 apart, a tie at RMS ~1.
fn pool_tie_net() -> (Net, Layout, Vec<f64>, Vec<f64>, Vec<u8>) {
    let mut m = Sequential::new(&[2, 2, 2]);
    m.add(Conv2D::new(1, 1).use_bias(false));
    m.add(MaxPool2D::new(2));
    m.add(Flatten::new());
    m.add(Dense::new(2));
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    let (mut params, states) = weights(&layout, 4);
    params[0..2].copy_from_slice(&[1.0, 1e-7]);
    // Positions 0..4 (h * 2 + w): (200, 10), (200, 20), (50, 0), (100, 0).
    let images = vec![200, 10, 200, 20, 50, 0, 100, 0];
    (net, layout, params, states, images)
}

#[test]
fn max_pool_ties_and_mismatches() {
    let (net, layout, params, states, images) = pool_tie_net();
    let own = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    assert_eq!(own[1], Decision::MaxPool(vec![1]));
    let run = |choice: u32| {
        let mut d = own.clone();
        d[1] = Decision::MaxPool(vec![choice]);
        (train_step(&net, &layout, &params, &states, &images, &[1], &d, 1.0).unwrap(), d)
    };
    let (agree, _) = run(1);
    assert_eq!(agree.kinks, KinkReport { ties: 1, ..Default::default() });
    let (flip, d) = run(0);
    assert_eq!(flip.kinks, KinkReport { ties: 1, flipped: 1, ..Default::default() });
    // The gradient follows the device's choice: the conv weight sees pixel 0's channels.
    assert!((flip.grads[0][1] / flip.grads[0][0] - agree.grads[0][1] / agree.grads[0][0]).abs() > 1e-3);
    gradcheck(&net, &layout, &params, &states, &images, &[1], &d, 3);
    let (wrong, _) = run(3);
    assert_eq!((wrong.kinks.ties, wrong.kinks.flipped, wrong.kinks.mismatch_count), (1, 0, 1));
    assert!(wrong.kinks.mismatches[0].contains("took position 3"), "{:?}", wrong.kinks.mismatches);
    let (outside, _) = run(7);
    assert_eq!(outside.kinks.mismatch_count, 1);
    assert!(outside.kinks.mismatches[0].contains("outside its window"), "{:?}", outside.kinks.mismatches);
}

#[test]
fn decisions_of_the_wrong_structure_are_refused() {
    let (net, layout) = residual_net(Loss::SparseCategoricalCrossentropy);
    let (params, states) = weights(&layout, 1);
    let (images, labels) = batch(&net, 2, 1);
    let own = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let mut short = own.clone();
    short.pop();
    let err = train_step(&net, &layout, &params, &states, &images, &labels, &short, 0.5).unwrap_err().to_string();
    assert!(err.contains("9 nodes but 8 decisions"), "{err}");
    let mut swapped = own.clone();
    swapped.swap(0, 1);
    let err = train_step(&net, &layout, &params, &states, &images, &labels, &swapped, 0.5).unwrap_err().to_string();
    assert!(err.contains("decisions[0]"), "{err}");
    let mut truncated = own;
    truncated[1] = Decision::Relu(vec![1.0; 5]);
    let err = train_step(&net, &layout, &params, &states, &images, &labels, &truncated, 0.5).unwrap_err().to_string();
    assert!(err.contains("has 5 values"), "{err}");
}

/// A model whose logits are the first layer's output (an identity Dense after Flatten), so
/// the forward of that layer can be compared with its definition.
fn probe(first: impl Layer + 'static, input: &[usize]) -> (Net, Layout, Vec<f64>, Vec<f64>) {
    let mut m = Sequential::new(input);
    m.add(first);
    m.add(Flatten::new());
    let n = Layout::new(input, &m.def.layers).unwrap().shapes.last().unwrap()[0];
    m.add(Dense::new(n));
    let (net, l) = prepare(&mut m, Loss::MeanSquaredError);
    let (mut params, states) = weights(&l, 2);
    let (k, b) = (&l.params[l.params.len() - 2], &l.params[l.params.len() - 1]);
    for i in 0..n {
        for j in 0..n {
            params[k.offset + i * n + j] = (i == j) as u8 as f64;
        }
        params[b.offset + i] = 0.0;
    }
    (net, l, params, states)
}

fn pixels(net: &Net, images: &[u8]) -> Vec<f64> {
    let c = net.input_shape[2];
    images.iter().enumerate().map(|(i, &b)| (b as f64 / 255.0 - net.mean[i % c]) / net.std[i % c]).collect()
}

#[test]
fn convolution_forward_matches_its_definition() {
    // (padding, stride, kernel, explicit (top, left) for the definition below)
    let cases = [(Padding::Valid, (1, 1), (3, 2), (0, 0)), (Padding::Same, (2, 2), (3, 3), (1, 1)), (Padding::Same, (2, 1), (2, 2), (0, 0)), (Padding::Explicit(2, 1), (2, 3), (3, 2), (2, 1))];
    for (padding, strides, kernel, (pt, pl)) in cases {
        let mut conv = Conv2D::new(3, 1).padding(padding);
        conv.kernel_size = kernel;
        conv.strides = strides;
        let (net, layout, params, states) = probe(conv, &[5, 7, 2]);
        let (images, _) = batch(&net, 2, 8);
        let logits = predict(&net, &layout, &params, &states, &images).unwrap();
        let x = pixels(&net, &images);
        let (w, bias) = (&params[layout.params[0].offset..], &params[layout.params[1].offset..]);
        let (out_h, out_w) = (layout.shapes[0][0], layout.shapes[0][1]);
        let mut expected = Vec::new();
        for b in 0..2 {
            for oh in 0..out_h {
                for ow in 0..out_w {
                    for f in 0..3 {
                        let mut s = bias[f];
                        for i in 0..kernel.0 {
                            for j in 0..kernel.1 {
                                let (h, wc) = ((oh * strides.0 + i) as isize - pt, (ow * strides.1 + j) as isize - pl);
                                if (0..5).contains(&h) && (0..7).contains(&wc) {
                                    for c in 0..2 {
                                        s += x[((b * 5 + h as usize) * 7 + wc as usize) * 2 + c] * w[((i * kernel.1 + j) * 2 + c) * 3 + f];
                                    }
                                }
                            }
                        }
                        expected.push(s);
                    }
                }
            }
        }
        assert_eq!(logits.len(), expected.len(), "{padding:?} {strides:?}");
        for (a, e) in logits.iter().zip(&expected) {
            assert!((a - e).abs() < 1e-12, "{padding:?} {strides:?} {kernel:?}: {a} vs {e}");
        }
    }
}

#[test]
fn grouped_and_dilated_convolution_forward_matches_its_definition() {
    // (filters, groups, kernel, dilation, padding, explicit (top, left) for the definition)
    let cases = [
        (6, 2, (3, 3), (1, 1), Padding::Same, (1, 1)),
        (4, 4, (2, 3), (2, 1), Padding::Valid, (0, 0)),
        (8, 2, (3, 2), (2, 3), Padding::Same, (2, 1)),
        (4, 1, (3, 3), (3, 2), Padding::Explicit(1, 2), (1, 2)),
    ];
    let (c, h, wd) = (4, 7, 8);
    for (filters, groups, kernel, dilation, padding, (pt, pl)) in cases {
        let mut conv = Conv2D::new(filters, 1).padding(padding).groups(groups).dilation_rate(dilation);
        conv.kernel_size = kernel;
        let (net, layout, params, states) = probe(conv, &[h, wd, c]);
        assert_eq!(layout.params[0].spec.shape, vec![kernel.0, kernel.1, c / groups, filters]);
        let (images, _) = batch(&net, 2, 8);
        let logits = predict(&net, &layout, &params, &states, &images).unwrap();
        let x = pixels(&net, &images);
        let (w, bias) = (&params[layout.params[0].offset..], &params[layout.params[1].offset..]);
        let (out_h, out_w) = (layout.shapes[0][0], layout.shapes[0][1]);
        let (cg, fg) = (c / groups, filters / groups);
        let mut expected = Vec::new();
        for b in 0..2 {
            for oh in 0..out_h {
                for ow in 0..out_w {
                    for f in 0..filters {
                        let mut s = bias[f];
                        for i in 0..kernel.0 {
                            for j in 0..kernel.1 {
                                let (y, xc) = ((oh + i * dilation.0) as isize - pt, (ow + j * dilation.1) as isize - pl);
                                if (0..h as isize).contains(&y) && (0..wd as isize).contains(&xc) {
                                    // filter f's group reads its own cg input channels
                                    for cl in 0..cg {
                                        let ci = (f / fg) * cg + cl;
                                        s += x[((b * h + y as usize) * wd + xc as usize) * c + ci] * w[((i * kernel.1 + j) * cg + cl) * filters + f];
                                    }
                                }
                            }
                        }
                        expected.push(s);
                    }
                }
            }
        }
        let case = format!("{filters} filters, {groups} groups, {kernel:?} at {dilation:?}, {padding:?}");
        assert_eq!(logits.len(), expected.len(), "{case}");
        for (a, e) in logits.iter().zip(&expected) {
            assert!((a - e).abs() < 1e-12, "{case}: {a} vs {e}");
        }
    }
}

/// Grouped and dilated convolutions between BatchNorms (ResNeXt's grouped 3x3 with a
/// stride, a dilated one, one of a channel a group), through the reference's backward.
#[test]
fn grouped_and_dilated_gradients_match_central_differences() {
    let mut m = Sequential::new(&[7, 8, 2]);
    m.add(Conv2D::new(8, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(Conv2D::new(8, 3).strides(2).padding(Padding::Same).groups(4).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(Conv2D::new(6, 3).padding(Padding::Same).dilation_rate((2, 1)).groups(2));
    m.add(Conv2D::new(6, 2).dilation_rate(2).groups(6));
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(3));
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    assert!(matches!(net.nodes[2], Node::Conv2D { strides: (2, 2), dilation: (1, 1), groups: 4, .. }));
    assert!(matches!(net.nodes[4], Node::Conv2D { dilation: (2, 1), groups: 2, use_bias: true, .. }));
    assert!(matches!(net.nodes[5], Node::Conv2D { dilation: (2, 2), groups: 6, .. }));
    assert_eq!(net.param_shapes().unwrap(), layout.params.iter().map(|e| e.spec.shape.clone()).collect::<Vec<_>>());
    let (params, states) = weights(&layout, 11);
    let (images, labels) = batch(&net, 3, 12);
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let worst = gradcheck(&net, &layout, &params, &states, &images, &labels, &decisions, 13);
    eprintln!("grouped / dilated net: worst relative error {worst:e}");
}

#[test]
fn pooling_forward_matches_keras() {
    // 3x3 input, 2x2 windows, stride 2, "same": the padding goes to the bottom and right,
    // and the means divide by the input positions only (4, 2, 2, 1).
    let (net, layout, params, states) = probe(AveragePooling2D::new(2).padding(crate::kernels::pool::PoolPadding::Same), &[3, 3, 1]);
    let images: Vec<u8> = (0..9).map(|i| i * 20).collect();
    let x = pixels(&net, &images);
    let y = predict(&net, &layout, &params, &states, &images).unwrap();
    let expected = [(x[0] + x[1] + x[3] + x[4]) / 4.0, (x[2] + x[5]) / 2.0, (x[6] + x[7]) / 2.0, x[8]];
    for (a, e) in y.iter().zip(expected) {
        assert!((a - e).abs() < 1e-12, "{y:?} vs {expected:?}");
    }
    let (net, layout, params, states) = probe(MaxPool2D::new(2).padding(crate::kernels::pool::PoolPadding::Same), &[3, 3, 1]);
    let images: Vec<u8> = vec![9, 3, 1, 2, 4, 7, 8, 6, 5];
    let x = pixels(&net, &images);
    assert_eq!(predict(&net, &layout, &params, &states, &images).unwrap(), vec![x[0], x[5], x[6], x[8]]);
}

#[test]
fn pooling_forward_matches_pytorch_explicit_padding() {
    // 3x3 input, 3x3 windows, stride 2, padding 1 (the ResNet stem's pool): (3 + 2 - 3)/2 + 1
    // = 2 outputs per axis, each window holding 4 inputs and 5 padded positions; the means
    // divide by 9 (count_include_pad) and negative inputs show that padding never wins a max.
    use crate::kernels::pool::PoolPadding;
    let (net, layout, params, states) = probe(AveragePooling2D::new(3).strides(2).padding(PoolPadding::Explicit(1, 1)), &[3, 3, 1]);
    let images: Vec<u8> = (0..9).map(|i| i * 20).collect();
    let x = pixels(&net, &images);
    let y = predict(&net, &layout, &params, &states, &images).unwrap();
    let expected = [(x[0] + x[1] + x[3] + x[4]) / 9.0, (x[1] + x[2] + x[4] + x[5]) / 9.0, (x[3] + x[4] + x[6] + x[7]) / 9.0, (x[4] + x[5] + x[7] + x[8]) / 9.0];
    for (a, e) in y.iter().zip(expected) {
        assert!((a - e).abs() < 1e-12, "{y:?} vs {expected:?}");
    }
    let (net, layout, params, states) = probe(MaxPool2D::new(3).strides(2).padding(PoolPadding::Explicit(1, 1)), &[3, 3, 1]);
    let images: Vec<u8> = vec![9, 3, 1, 2, 4, 7, 8, 6, 5];
    let x = pixels(&net, &images);
    assert!(x.iter().all(|&v| v < 0.0), "padding (0) must be a rival of every input: {x:?}");
    assert_eq!(predict(&net, &layout, &params, &states, &images).unwrap(), vec![x[0], x[5], x[6], x[5]]);
}

#[test]
fn batchnorm_statistics_and_inference() {
    let mut m = Sequential::new(&[3, 2, 2]);
    m.add(BatchNormalization::new().momentum(0.75));
    m.add(Flatten::new());
    m.add(Dense::new(3));
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    let (params, states) = weights(&layout, 3);
    let (images, labels) = batch(&net, 4, 3);
    let x = pixels(&net, &images);
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &own_decisions(&net, &layout, &params, &states, &images).unwrap(), 0.25).unwrap();
    for c in 0..2 {
        let v: Vec<f64> = x.iter().skip(c).step_by(2).copied().collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / v.len() as f64;
        let (mm, mv) = (states[layout.states[0].offset + c], states[layout.states[1].offset + c]);
        assert!((step.states[0][c] - (0.75 * mm + 0.25 * mean)).abs() < 1e-14);
        assert!((step.states[1][c] - (0.75 * mv + 0.25 * var)).abs() < 1e-14);
    }
    // With momentum 0 the moving statistics become this batch's, and inference on the same
    // batch reproduces the training logits.
    let mut m = Sequential::new(&[3, 2, 2]);
    m.add(BatchNormalization::new().momentum(0.0));
    m.add(Flatten::new());
    m.add(Dense::new(3));
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    let own = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &own, 0.25).unwrap();
    let logits = predict(&net, &layout, &params, &step.flat_states(&layout), &images).unwrap();
    for (a, b) in logits.iter().zip(&step.logits) {
        assert!((a - b).abs() < 1e-12, "{logits:?} vs {:?}", step.logits);
    }
}

#[test]
fn zoo_models_match_their_layouts() {
    use crate::model::zoo;
    for name in zoo::MODELS {
        let mut model = zoo::by_name(name, &[32, 32, 3], 10).unwrap();
        let (net, layout) = prepare(&mut model, Loss::SparseCategoricalCrossentropy);
        let shapes = |entries: &[crate::model::layout::Entry]| entries.iter().map(|e| e.spec.shape.clone()).collect::<Vec<_>>();
        assert_eq!(net.param_shapes().unwrap().len(), layout.params.len(), "{name}");
        assert_eq!(net.param_shapes().unwrap(), shapes(&layout.params), "{name}");
        assert_eq!(net.state_shapes().unwrap(), shapes(&layout.states), "{name}");
        let recorded = model.def.fused.iter().filter(|f| !**f).count();
        assert_eq!(net.nodes.len(), recorded, "{name}: one node per recorded layer");
    }
}

#[test]
fn dropout_is_refused_unless_its_rate_is_zero() {
    let mut m = Sequential::new(&[2, 2, 1]);
    m.add(Flatten::new());
    m.add(Dropout::new(0.0));
    m.add(Dense::new(2));
    let (net, _) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    assert_eq!(net.nodes[1], Node::Identity);
    let mut m = Sequential::new(&[2, 2, 1]);
    m.add(Flatten::new());
    m.add(Dropout::new(0.5));
    m.add(Dense::new(2));
    m.def.fused = vec![false; 3];
    m.def.layout = Layout::new(&[2, 2, 1], &m.def.layers).unwrap();
    m.def.classes = 2;
    let err = Net::from_definition(&m.def).unwrap_err().to_string();
    assert!(err.contains("does not support Dropout with rate > 0") && err.contains("0.5"), "{err}");
}

/// Two steps of each update rule on a Dense kernel (decayed, w = 1, gradients 0.5 then
/// 0.25) and its bias (not decayed, w = 2, gradients -1 then 1), worked by hand.
#[test]
fn optimizer_steps_match_hand_computed_values() {
    let layers: Vec<Box<dyn Layer>> = vec![Box::new(Flatten::new()), Box::new(Dense::new(2))];
    let layout = Layout::new(&[1, 1, 2], &layers).unwrap();
    let (k, b) = (&layout.params[0], &layout.params[1]);
    assert!(k.spec.decay && !b.spec.decay);
    let lr = 0.5;
    let cases: [(&str, Optimizer, [f64; 2], [f64; 2]); 9] = [
        ("sgd", Optimizer::sgd(0.5), [0.75, 0.625], [2.5, 2.0]),
        // g = 0.5 + 0.5 * 1 = 1 -> 0.5; g = 0.25 + 0.5 * 0.5 = 0.5 -> 0.25
        ("sgd + decay", Optimizer::sgd(0.5).l2(0.5), [0.5, 0.25], [2.5, 2.0]),
        // L2 with momentum: g = 1, v = 1 -> 0.5; g = 0.25 + 0.25, v = 0.5 + 0.5 -> 0.0
        ("momentum + l2", Optimizer::sgd(0.5).momentum(0.5).l2(0.5), [0.5, 0.0], [2.5, 2.25]),
        // Decoupled (Keras 3): w *= 0.75 -> 0.75, v = 0.5 -> 0.5; w *= 0.75 -> 0.375,
        // v = 0.25 + 0.25 -> 0.125
        ("momentum + decoupled decay", Optimizer::sgd(0.5).momentum(0.5).weight_decay(0.5), [0.5, 0.125], [2.5, 2.25]),
        // v = 0.5 -> 0.75; v = 0.25 + 0.25 = 0.5 -> 0.5 | v = -1 -> 2.5; v = -0.5 + 1 -> 2.25
        ("momentum", Optimizer::sgd(0.5).momentum(0.5), [0.75, 0.5], [2.5, 2.25]),
        // u = 0.5 + 0.25 -> 0.625; v = 0.5, u = 0.25 + 0.25 -> 0.375 | u = -1.5 -> 2.75; v = 0.5, u = 1.25 -> 2.125
        ("nesterov", Optimizer::sgd(0.5).momentum(0.5).nesterov(true), [0.625, 0.375], [2.75, 2.125]),
        // beta1 0.5, beta2 0.75, eps 0.25. Step 1: m = 0.25, v = 0.0625, m^ = 0.5, v^ = 0.25
        // -> 1 - 0.25 / 0.75. Step 2: m = 0.25, v = 0.0625, m^ = 1/3, v^ = 1/7.
        // Bias: m^ = -1, v^ = 1 -> 2.4; m = 0.25, v = 0.4375, m^ = 1/3, v^ = 1 -> 2.4 - (1/6) / 1.25.
        ("adam", adam(false, 0.0), [2.0 / 3.0, 2.0 / 3.0 - (1.0 / 6.0) / ((1.0f64 / 7.0).sqrt() + 0.25)], [2.4, 2.4 - (1.0 / 6.0) / 1.25]),
        // L2 in the gradient: g = 1 -> m^ = 1, v^ = 1 -> 0.6; g = 0.25 + 0.3 = 0.55,
        // m = 0.525, v = 0.1875 + 0.075625, m^ = 0.7, v^ = 0.263125 / 0.4375
        ("adam + decay", adam(false, 0.5), [0.6, 0.6 - 0.35 / ((0.263125f64 / 0.4375).sqrt() + 0.25)], [2.4, 2.4 - (1.0 / 6.0) / 1.25]),
        // Decoupled: w *= 0.75 first: 0.75 - 1/3; then (5/12) * 0.75 - (1/6) / (sqrt(1/7) + 0.25)
        ("adamw", adam(true, 0.5), [0.75 - 1.0 / 3.0, 5.0 / 12.0 * 0.75 - (1.0 / 6.0) / ((1.0f64 / 7.0).sqrt() + 0.25)], [2.4, 2.4 - (1.0 / 6.0) / 1.25]),
    ];
    for (name, opt, kernel, bias) in cases {
        let mut params = vec![7.0; layout.param_len];
        params[k.offset..k.offset + 4].fill(1.0);
        params[b.offset..b.offset + 2].fill(2.0);
        let mut state = vec![vec![0.0; layout.param_len]; opt.state_count()];
        for (step, (gk, gb)) in [(0.5, -1.0), (0.25, 1.0)].into_iter().enumerate() {
            let grads = vec![vec![gk; 4], vec![gb; 2]];
            optimizer::apply(&opt, step as u64 + 1, lr, &layout, &mut params, &grads, &mut state).unwrap();
            for (got, want, what) in [(params[k.offset + 3], kernel[step], "kernel"), (params[b.offset + 1], bias[step], "bias")] {
                assert!((got - want).abs() < 1e-14, "{name} step {}: {what} {got} but by hand {want}", step + 1);
            }
        }
        assert_eq!(params[k.offset + 4], 7.0, "{name}: padding untouched");
    }
    let err = optimizer::apply(&Optimizer::sgd(0.1).momentum(0.9), 1, 0.1, &layout, &mut vec![0.0; layout.param_len], &[vec![0.0; 4], vec![0.0; 2]], &mut []).unwrap_err();
    assert!(err.to_string().contains("keeps 1 state tensors"), "{err}");
}

fn adam(decoupled: bool, wd: f32) -> Optimizer {
    let (beta_1, beta_2, epsilon) = (0.5, 0.75, 0.25);
    if decoupled {
        Optimizer::AdamW { learning_rate: 0.5, beta_1, beta_2, epsilon, weight_decay: wd, schedule: Default::default(), global_clipnorm: None }
    } else {
        Optimizer::Adam { learning_rate: 0.5, beta_1, beta_2, epsilon, weight_decay: wd, schedule: Default::default(), global_clipnorm: None }
    }
}

/// One ResNet-20 step at batch 64 on 32x32 images: the cost of a check. Run with
/// `cargo test --release --lib check::tests::resnet20_step_time -- --ignored --nocapture`.
#[test]
#[ignore]
fn resnet20_step_time() {
    let mut model = crate::model::zoo::resnet20(&[32, 32, 3], 10);
    let (net, layout) = prepare(&mut model, Loss::SparseCategoricalCrossentropy);
    let (params, states) = layout.initial_values(1);
    let (images, labels) = batch(&net, 64, 2);
    let t = std::time::Instant::now();
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let forward = t.elapsed();
    let t = std::time::Instant::now();
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &decisions, 1.0 / 64.0).unwrap();
    let full = t.elapsed();
    eprintln!("resnet20 batch 64, 32x32, {} threads: own forward {forward:?}, train_step {full:?}, loss {:.4}, {:?}", rayon::current_num_threads(), step.losses.iter().sum::<f64>() / 64.0, step.kinks);
    assert!(step.kinks.ok());
}

#[test]
fn f16_rounding_of_the_mixed_reference() {
    use crate::check::ops::round_f16;
    // f16's spacing at 1 is 2^-10; ties go to even.
    assert_eq!(round_f16(1.0 + 3.0 / 4096.0), 1.0 + 1.0 / 1024.0);
    assert_eq!(round_f16(1.0 + 2.0 / 4096.0), 1.0);
    assert_eq!(round_f16(1.0 + 6.0 / 4096.0), 1.0 + 2.0 / 1024.0);
    assert_eq!(round_f16(-3.1406), -3.140625);
    assert_eq!(round_f16(65519.0), 65504.0);
    assert_eq!(round_f16(65520.0), f64::INFINITY);
    assert_eq!(round_f16(-1e9), f64::NEG_INFINITY);
    // Subnormals: multiples of 2^-24.
    assert_eq!(round_f16(3.0 * 2f64.powi(-26)), 2f64.powi(-24));
    assert_eq!(round_f16(2f64.powi(-26)), 0.0);
    assert!(round_f16(f64::NAN).is_nan());
    // Every NaN, whatever its payload: all ones once carried into -0.0.
    for bits in [0x7fff_ffff_ffff_ffffu64, 0xffff_ffff_ffff_ffff, 0x7ff0_0000_0000_0001] {
        assert!(round_f16(f64::from_bits(bits)).is_nan(), "{bits:#x}");
    }
}

/// MobileNet's depthwise block (3x3, stride 2, same, no bias, between BatchNorm + ReLU) and a
/// depthwise layer with every option (oblong kernel, strides (1, 2), multiplier 2, dilation,
/// explicit padding, bias).
fn depthwise_net(loss: Loss) -> (Net, Layout) {
    let mut m = Sequential::new(&[7, 8, 2]);
    m.add(Conv2D::new(4, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(DepthwiseConv2D::new(3).strides(2).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(DepthwiseConv2D::new((2, 3)).strides((1, 2)).padding(Padding::Explicit(1, 1)).depth_multiplier(2).dilation_rate((2, 1)));
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(3));
    prepare(&mut m, loss)
}

#[test]
fn depthwise_gradients_match_central_differences() {
    let (net, layout) = depthwise_net(Loss::SparseCategoricalCrossentropy);
    assert!(matches!(net.nodes[2], Node::DepthwiseConv2D { kernel: (3, 3), strides: (2, 2), padding: Padding::Same, depth_multiplier: 1, dilation: (1, 1), use_bias: false }));
    assert!(matches!(net.nodes[4], Node::DepthwiseConv2D { kernel: (2, 3), strides: (1, 2), padding: Padding::Explicit(1, 1), depth_multiplier: 2, dilation: (2, 1), use_bias: true }));
    assert_eq!(net.param_shapes().unwrap(), layout.params.iter().map(|e| e.spec.shape.clone()).collect::<Vec<_>>());
    let (params, states) = weights(&layout, 11);
    let (images, labels) = batch(&net, 3, 12);
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let worst = gradcheck(&net, &layout, &params, &states, &images, &labels, &decisions, 13);
    eprintln!("depthwise net: worst relative error {worst:e}");
}

#[test]
fn depthwise_forward_matches_its_definition() {
    // (kernel, strides, dilation, padding, multiplier, explicit (top, left) for the definition)
    let cases = [
        ((3, 3), (1, 1), (1, 1), Padding::Valid, 1, (0, 0)),
        ((3, 3), (2, 2), (1, 1), Padding::Same, 2, (1, 1)),
        ((2, 3), (1, 2), (2, 1), Padding::Same, 3, (1, 1)),
        ((2, 2), (2, 1), (1, 2), Padding::Explicit(2, 1), 1, (2, 1)),
    ];
    for (kernel, strides, dilation, padding, m, (pt, pl)) in cases {
        let layer = DepthwiseConv2D::new(kernel).strides(strides).dilation_rate(dilation).padding(padding).depth_multiplier(m);
        let (net, layout, params, states) = probe(layer, &[5, 7, 2]);
        let (images, _) = batch(&net, 2, 8);
        let logits = predict(&net, &layout, &params, &states, &images).unwrap();
        let x = pixels(&net, &images);
        let (w, bias) = (&params[layout.params[0].offset..], &params[layout.params[1].offset..]);
        let (out_h, out_w) = (layout.shapes[0][0], layout.shapes[0][1]);
        let mut expected = Vec::new();
        for b in 0..2 {
            for oh in 0..out_h {
                for ow in 0..out_w {
                    for c in 0..2 {
                        for k in 0..m {
                            let mut s = bias[c * m + k];
                            for i in 0..kernel.0 {
                                for j in 0..kernel.1 {
                                    let h = (oh * strides.0 + i * dilation.0) as isize - pt;
                                    let wc = (ow * strides.1 + j * dilation.1) as isize - pl;
                                    if (0..5).contains(&h) && (0..7).contains(&wc) {
                                        s += x[((b * 5 + h as usize) * 7 + wc as usize) * 2 + c] * w[((i * kernel.1 + j) * 2 + c) * m + k];
                                    }
                                }
                            }
                            expected.push(s);
                        }
                    }
                }
            }
        }
        assert_eq!(logits.len(), expected.len(), "{kernel:?} {strides:?} {dilation:?} {padding:?}");
        for (a, e) in logits.iter().zip(&expected) {
            assert!((a - e).abs() < 1e-12, "{kernel:?} {strides:?} {dilation:?} {padding:?} x{m}: {a} vs {e}");
        }
    }
}

/// The layers of issue 14's activation part: the per-channel maps, a capped and leaky ReLU
/// after a BatchNorm (not fused: a node of its own, its pieces taken from the device),
/// LeakyReLU, GELU in both forms, SiLU, tanh, sigmoid, softmax and global max pooling.
fn activation_model() -> Sequential {
    let mut m = Sequential::new(&[6, 5, 3]);
    m.add(Normalization::new(vec![0.5, 0.4, 0.3], vec![0.1, 0.2, 0.3]));
    m.add(Rescaling::per_channel(vec![0.5, 1.0, 2.0], vec![0.1]));
    m.add(Conv2D::new(6, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(ReLU::new().max_value(0.8).negative_slope(0.1));
    m.add(Conv2D::new(6, 3).padding(Padding::Same));
    m.add(LeakyReLU::new());
    m.add(Activation::new("gelu").unwrap());
    m.add(GlobalMaxPooling2D::new());
    m.add(Dense::new(8));
    m.add(Activation::new("silu").unwrap());
    m.add(Activation::new("relu6").unwrap());
    m.add(Activation::new("tanh").unwrap());
    m.add(Activation::of(ActivationFn::Gelu { approximate: true }));
    m.add(Dense::new(6));
    m.add(Softmax::new());
    m.add(Activation::new("sigmoid").unwrap());
    m.add(Dense::new(4));
    m
}

#[test]
fn activation_nodes_match_central_differences() {
    let mut m = activation_model();
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    assert_eq!(net.nodes[3], Node::BatchNorm { momentum: 0.99f32 as f64, epsilon: 1e-3f32 as f64, relu: false, frozen: false }, "a capped ReLU must not fuse");
    assert!(matches!(net.nodes[4], Node::Activation(Act::Rectifier { max_value, negative_slope }) if max_value == 0.8f32 as f64 && negative_slope == 0.1f32 as f64));
    assert!(matches!(net.nodes[8], Node::GlobalMaxPool { keepdims: false }));
    let (params, states) = weights(&layout, 11);
    let (images, labels) = batch(&net, 3, 12);
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let worst = gradcheck(&net, &layout, &params, &states, &images, &labels, &decisions, 13);
    eprintln!("activation net: worst relative error {worst:e}");
}

/// The capped ReLU's pieces: a unit the device puts on the cap against a clear f64 margin is
/// a mismatch, one at the cap's edge a tie; the gradient follows the device.
#[test]
fn capped_relu_pieces_follow_the_device() {
    let mut m = Sequential::new(&[1, 1, 2]);
    m.add(Flatten::new());
    m.add(Dense::new(3));
    m.add(ReLU::new().max_value(0.5).negative_slope(0.25));
    m.add(Dense::new(2));
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    let (params, states) = weights(&layout, 3);
    let (images, labels) = batch(&net, 1, 4);
    let own = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let Decision::Relu(y) = &own[2] else { panic!("{:?}", own[2]) };
    let base = train_step(&net, &layout, &params, &states, &images, &labels, &own, 1.0).unwrap();
    assert_eq!((base.kinks.ties, base.kinks.mismatch_count), (0, 0), "{:?}", base.kinks);
    // Every unit moved to the cap: each one not within a tie of it is a mismatch.
    let capped = vec![0.5f32; y.len()];
    let mut wrong = own.clone();
    wrong[2] = Decision::Relu(capped);
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &wrong, 1.0).unwrap();
    let off_cap = y.iter().filter(|&&v| (v - 0.5).abs() > 1e-3).count();
    assert!(off_cap > 0 && step.kinks.mismatch_count == off_cap, "{y:?}: {:?}", step.kinks);
    // On the cap no gradient passes to the dense layer before it.
    assert!(step.grads[0].iter().chain(&step.grads[1]).all(|g| *g == 0.0), "{:?}", step.grads);
    gradcheck(&net, &layout, &params, &states, &images, &labels, &wrong, 5);
}

/// The whole check on the software adapter: the device's step of the activation model
/// against the f64 reference, two steps.
#[test]
fn activation_layers_pass_the_check_on_the_device() {
    let mut m = activation_model();
    m.compile(crate::model::CompileOptions::new(Optimizer::sgd(0.05)).devices(crate::device::open("software").unwrap()).seed(9).max_batch(8)).unwrap();
    m.set_device_speeds(&[1.0]).unwrap();
    let mut rng = StdRng::seed_from_u64(10);
    let batches: Vec<(Vec<u8>, Vec<u32>)> = (0..2).map(|_| ((0..8 * 90).map(|_| rng.random()).collect(), (0..8).map(|_| rng.random_range(0..4)).collect())).collect();
    let r = check(&mut m, &batches).unwrap();
    eprintln!("{r:?}");
    assert!(r.ok, "{r:?}");
}

/// LayerNormalization after a convolution (per pixel over 5 channels) and after a Dense
/// layer (per sample over 7 units, a wider epsilon).
fn layer_norm_model() -> Sequential {
    let mut m = Sequential::new(&[5, 4, 3]);
    m.add(Conv2D::new(5, 3).padding(Padding::Same));
    m.add(LayerNormalization::new());
    m.add(Activation::new("tanh").unwrap());
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(7));
    m.add(LayerNormalization::new().epsilon(1e-2));
    m.add(Dense::new(4));
    m
}

#[test]
fn layer_norm_nodes_match_central_differences() {
    let mut m = layer_norm_model();
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    assert_eq!(net.nodes[5], Node::LayerNorm { epsilon: 1e-2f32 as f64 });
    let (params, states) = weights(&layout, 21);
    let (images, labels) = batch(&net, 3, 22);
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let worst = gradcheck(&net, &layout, &params, &states, &images, &labels, &decisions, 23);
    eprintln!("layer norm net: worst relative error {worst:e}");
}

#[test]
fn layer_norm_passes_the_check_on_the_device() {
    let mut m = layer_norm_model();
    m.compile(crate::model::CompileOptions::new(Optimizer::sgd(0.05)).devices(crate::device::open("software").unwrap()).seed(9).max_batch(8)).unwrap();
    m.set_device_speeds(&[1.0]).unwrap();
    let mut rng = StdRng::seed_from_u64(10);
    let batches: Vec<(Vec<u8>, Vec<u32>)> = (0..2).map(|_| ((0..8 * 60).map(|_| rng.random()).collect(), (0..8).map(|_| rng.random_range(0..4)).collect())).collect();
    let r = check(&mut m, &batches).unwrap();
    eprintln!("{r:?}");
    assert!(r.ok, "{r:?}");
}

/// Every augmentation, each after a layer whose gradient it must route back (but the
/// first): both flips, a reflecting and a nearest-edge translation (one-sided), a crop.
/// `check`'s own test (run.rs) runs it on the device too.
pub(super) fn augment_model() -> Sequential {
    let mut m = Sequential::new(&[7, 6, 3]);
    m.add(RandomFlip::default().seed(3));
    m.add(Conv2D::new(4, 3).padding(Padding::Same));
    m.add(RandomTranslation::new(0.3, 0.5).seed(4));
    m.add(Activation::new("tanh").unwrap());
    m.add(RandomCrop::new(5, 4));
    m.add(RandomFlip::new(FlipMode::Horizontal));
    m.add(Conv2D::new(4, 3).padding(Padding::Same));
    m.add(RandomTranslation::new(0.0, 0.0).height_range(-0.6, -0.2).width_range(0.1, 0.5).fill_mode(FillMode::Nearest));
    m.add(RandomTranslation::new(0.4, 0.4).fill_mode(FillMode::Constant).fill_value(0.5));
    m.add(RandomTranslation::new(0.4, 0.4).fill_mode(FillMode::Wrap));
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(4));
    m
}

#[test]
fn augment_nodes_match_central_differences() {
    let mut m = augment_model();
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    assert_eq!(net.nodes[4], Node::Augment { crop: Some((5, 4)), y: AxisKind::Offset, x: AxisKind::Offset, fill: FillMode::Constant, fill_value: 0.0 });
    let (params, states) = weights(&layout, 31);
    let (images, labels) = batch(&net, 6, 32);
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let Decision::Augment(crop) = &decisions[4] else { panic!("{:?}", decisions[4]) };
    assert!(crop.chunks(4).any(|d| d[1] != crop[1]), "the reference's own crops differ between samples: {crop:?}");
    let worst = gradcheck(&net, &layout, &params, &states, &images, &labels, &decisions, 33);
    eprintln!("augment net: worst relative error {worst:e}");
}

/// In inference every augmentation is the identity but the crop, which takes the centre.
#[test]
fn augment_nodes_infer_as_the_identity_and_the_centre_crop() {
    let mut m = Sequential::new(&[6, 5, 1]);
    m.add(RandomFlip::default());
    m.add(RandomTranslation::new(0.5, 0.5));
    m.add(RandomCrop::new(3, 2));
    m.add(Flatten::new());
    m.add(Dense::new(6).use_bias(false));
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    // The kernel picks one input pixel per output: the logits are the centre window.
    let mut params = vec![0.0f64; layout.param_len];
    for k in 0..6 {
        params[layout.params[0].offset + k * 6 + k] = 1.0;
    }
    let (images, _) = batch(&net, 2, 41);
    let logits = predict(&net, &layout, &params, &[], &images).unwrap();
    let px = pixels(&net, &images);
    for b in 0..2 {
        for (k, (i, j)) in [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)].into_iter().enumerate() {
            assert_eq!(logits[b * 6 + k], px[b * 30 + i * 5 + j], "sample {b}, output {k}");
        }
    }
}

/// The parameter and state indices (into `layout.params` / `layout.states`) of the layers a
/// model has frozen.
fn frozen_entries(m: &Sequential, layout: &Layout) -> (Vec<usize>, Vec<usize>) {
    let (mut params, mut states) = (Vec::new(), Vec::new());
    for (i, &(p0, np, s0, ns)) in layout.per_layer.iter().enumerate() {
        if !m.is_trainable(i) {
            params.extend(p0..p0 + np);
            states.extend(s0..s0 + ns);
        }
    }
    (params, states)
}

#[test]
fn frozen_batchnorms_run_in_inference_mode() {
    // Keras 3: a BatchNormalization set trainable = False (itself, or a block around it)
    // normalises with its moving statistics in training too, leaves them alone, and its
    // gradient is the inference transform's: dx = dy * gamma / sqrt(var + eps).
    let mut m = frozen_residual_model();
    let (net, layout) = prepare(&mut m, Loss::SparseCategoricalCrossentropy);
    assert!(matches!(net.nodes[1], Node::BatchNorm { relu: true, frozen: true, .. }), "{:?}", net.nodes[1]);
    let Node::Residual { main, .. } = &net.nodes[2] else { panic!("{:?}", net.nodes[2]) };
    // A chain's ReLU stays a node of its own (see `node_of`).
    assert!(matches!(main[1], Node::BatchNorm { frozen: true, .. }) && main[2] == Node::ReLU && matches!(main[4], Node::BatchNorm { frozen: true, .. }), "{main:?}");
    assert!(matches!(&net.nodes[4], Node::Residual { shortcut, .. } if matches!(shortcut[1], Node::BatchNorm { frozen: false, .. })));
    let (params, states) = weights(&layout, 31);
    let (images, labels) = batch(&net, 3, 32);
    let decisions = own_decisions(&net, &layout, &params, &states, &images).unwrap();
    let step = train_step(&net, &layout, &params, &states, &images, &labels, &decisions, 1.0 / 3.0).unwrap();
    let (frozen_params, frozen_states) = frozen_entries(&m, &layout);
    // The conv before each frozen BatchNorm still trains: its gradient goes through the
    // inference transform, which the central differences check.
    let gamma_beta: Vec<usize> = frozen_params.iter().copied().filter(|&i| matches!(layout.params[i].spec.name, "gamma" | "beta")).collect();
    assert_eq!(gamma_beta.len(), 6);
    for &i in &gamma_beta {
        assert!(step.grads[i].iter().all(|&g| g == 0.0), "{}: a frozen BatchNorm's gradient must be 0", layout.params[i].name);
    }
    let worst = gradcheck_except(&net, &layout, &params, &states, &images, &labels, &decisions, 33, &gamma_beta);
    eprintln!("frozen residual net: worst relative error {worst:e}");
    for (i, e) in layout.states.iter().enumerate() {
        let moved = step.states[i] != states[e.range()];
        assert_eq!(moved, !frozen_states.contains(&i), "{}: moving statistics moved {moved}", e.name);
    }
}

#[test]
fn frozen_batchnorms_pass_the_check_on_the_device() {
    for selection in ["software", "software:2"] {
        let mut rng = StdRng::seed_from_u64(11);
        let batches: Vec<(Vec<u8>, Vec<u32>)> = (0..3).map(|_| ((0..8 * 108).map(|_| rng.random()).collect(), (0..8).map(|_| rng.random_range(0..4)).collect())).collect();
        // Trained unfrozen first, so that the moving statistics the frozen layers normalise
        // with are no longer the initial zeros and ones (which would hide a dropped term).
        let mut m = residual_model();
        let devices = crate::device::open(selection).unwrap();
        let n = devices.len();
        let opts = || crate::model::CompileOptions::new(Optimizer::sgd(0.05).momentum(0.9)).devices(devices.clone()).seed(9).max_batch(8);
        m.compile(opts()).unwrap();
        for _ in 0..5 {
            m.train_on_batch(&batches[2].0, &batches[2].1).unwrap();
        }
        m.set_trainable(1, false).unwrap();
        m.set_trainable(3, false).unwrap();
        m.compile(opts()).unwrap();
        m.set_device_speeds(&vec![1.0; n]).unwrap();
        let batches = &batches[..2];
        let r = check(&mut m, batches).unwrap();
        eprintln!("{selection}: {r:?}");
        assert!(r.ok, "{selection}: {r:?}");
    }
}

/// The plain-f32 model's Winograd convolution, run in f64, is the direct convolution: both
/// tile sizes, both passes, every padding Winograd takes, tiles overhanging odd images.
#[test]
fn winograd_model_is_the_convolution() {
    use crate::kernels::winograd::Pass;
    let mut r = StdRng::seed_from_u64(7);
    for (shape, filters, padding) in [([2, 5, 7, 3], 4, Padding::Same), ([1, 6, 6, 2], 5, Padding::Valid), ([1, 4, 5, 3], 2, Padding::Explicit(2, 2))] {
        let g = crate::kernels::conv2d::Conv2dGeometry::new(&shape, filters, (3, 3), (1, 1), padding).unwrap();
        let rand = |r: &mut StdRng, n: usize| (0..n).map(|_| r.random_range(-1.0..1.0)).collect::<Vec<f64>>();
        let (x, w, dy) = (rand(&mut r, g.input_shape().iter().product()), rand(&mut r, g.kernel_shape().iter().product()), rand(&mut r, g.output_shape().iter().product()));
        let close = |a: &[f64], b: &[f64], what: &str| {
            let e = a.iter().zip(b).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            assert!(e < 1e-12, "{what} {g:?}: {e:e}");
        };
        for m in [2, 4] {
            close(&super::winograd::convolve::<ops::Exact>(&g, Pass::Forward, m, &x, &w), &ops::conv_forward::<ops::Exact>(&g, &x, &w, None), "forward");
            close(&super::winograd::convolve::<ops::Exact>(&g, Pass::BackwardData, m, &dy, &w), &ops::conv_input_grad::<ops::Exact>(&g, &dy, &w), "input gradient");
        }
    }
}
