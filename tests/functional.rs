//! The functional API (issue 14, item 2): graphs of layers called on symbolic tensors, with
//! `Add` and `Concatenate`, trained by the same step plans as a stack.

use std::sync::Arc;

use convoy::layers::*;
use convoy::model::{input, Call, CompileOptions, Model, Sequential, SymbolicTensor};
use convoy::optim::Optimizer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// `n` replicas on the software adapter, or on the adapter `CONVOY_TEST_DEVICE` names (`0`:
/// `0,0` for two).
fn devices(n: usize) -> Vec<Arc<convoy::Device>> {
    match std::env::var("CONVOY_TEST_DEVICE") {
        Ok(sel) if !sel.trim().is_empty() => convoy::device::open(&vec![sel.trim(); n].join(",")).unwrap(),
        _ => convoy::device::open(&format!("software:{n}")).unwrap(),
    }
}

fn compile_on(model: &mut Sequential, devices: Vec<Arc<convoy::Device>>) {
    model.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(devices).seed(7).max_batch(16)).unwrap();
}

fn batch(n: usize, shape: &[usize], seed: u64) -> (Vec<u8>, Vec<u32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let images = (0..n * shape.iter().product::<usize>()).map(|_| rng.random()).collect();
    let labels = (0..n).map(|_| rng.random_range(0..10)).collect();
    (images, labels)
}

fn conv(filters: usize, k: usize) -> Conv2D {
    Conv2D::new(filters, k).padding(Padding::Same).use_bias(false)
}

/// A basic residual block as a stack with a `Residual` layer.
fn residual_stack() -> Sequential {
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(conv(8, 3)).add(BatchNormalization::new()).add(ReLU::new());
    m.add(Residual::new(vec![Box::new(conv(8, 3)), Box::new(BatchNormalization::new()), Box::new(ReLU::new()), Box::new(conv(8, 3)), Box::new(BatchNormalization::new())], vec![]));
    m.add(ReLU::new()).add(GlobalAveragePooling2D::new()).add(Dense::new(10));
    m
}

/// The same block as a functional graph: two branches joined by `Add`.
fn residual_graph() -> Sequential {
    let inputs = input(&[8, 8, 3]);
    let x = conv(8, 3).call(&inputs).unwrap();
    let x = BatchNormalization::new().call(&x).unwrap();
    let x = ReLU::new().call(&x).unwrap();
    let a = conv(8, 3).call(&x).unwrap();
    let a = BatchNormalization::new().call(&a).unwrap();
    let a = ReLU::new().call(&a).unwrap();
    let a = conv(8, 3).call(&a).unwrap();
    let a = BatchNormalization::new().call(&a).unwrap();
    let y = Add::new().call_many(&[&a, &x]).unwrap();
    let y = ReLU::new().call(&y).unwrap();
    let y = GlobalAveragePooling2D::new().call(&y).unwrap();
    let out = Dense::new(10).call(&y).unwrap();
    Model::functional(&inputs, &out).unwrap()
}

/// Two branches of different widths concatenated, one of them reading the input directly,
/// a node read three times (its gradient summed), a BatchNorm whose ReLU cannot fuse, and a
/// dead branch left out of the model.
fn two_branch(inputs: &SymbolicTensor) -> SymbolicTensor {
    let x = conv(6, 3).call(inputs).unwrap();
    let x = BatchNormalization::new().call(&x).unwrap();
    let x = ReLU::new().call(&x).unwrap();
    let a = conv(4, 1).call(&x).unwrap();
    let b = conv(5, 3).call(&x).unwrap();
    let b = ReLU::new().call(&b).unwrap();
    let c = conv(3, 3).call(inputs).unwrap();
    let _dead = Dense::new(3).call(&GlobalAveragePooling2D::new().call(&c).unwrap()).unwrap();
    // A BatchNorm read by a ReLU and by the join: the ReLU must not fuse into it.
    let d = BatchNormalization::new().call(&c).unwrap();
    let e = ReLU::new().call(&d).unwrap();
    let y = Concatenate::new().call_many(&[&a, &b, &c, &x, &d, &e]).unwrap();
    assert_eq!(y.shape(), &[8, 8, 24]);
    let y = AveragePooling2D::new(2).call(&y).unwrap();
    let y = Flatten::new().call(&y).unwrap();
    Dense::new(10).call(&y).unwrap()
}

#[test]
fn a_graph_of_a_residual_block_computes_what_the_residual_layer_does() {
    let (images, labels) = batch(6, &[8, 8, 3], 1);
    let mut stack = residual_stack();
    let mut graph = residual_graph();
    compile_on(&mut stack, devices(1));
    compile_on(&mut graph, devices(1));
    // Same parameters in the same order: the residual block lists its sub-layers' parameters
    // as the graph lists its layers'.
    let (params, _, _) = stack.get_weights().unwrap();
    assert_eq!(params.len(), graph.get_weights().unwrap().0.len());
    graph.set_weights(&params).unwrap();
    let (loss_s, grads_s) = stack.compute_gradients(&images, &labels).unwrap();
    let (loss_g, grads_g) = graph.compute_gradients(&images, &labels).unwrap();
    assert!((loss_s - loss_g).abs() < 1e-6, "loss {loss_s} against {loss_g}");
    let worst = grads_s.iter().zip(&grads_g).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let scale = grads_s.iter().map(|g| g.abs()).fold(0.0f32, f32::max);
    assert!(worst <= 1e-5 * scale.max(1.0), "gradients differ by {worst} (largest {scale})");
    // The ReLU after the join fuses into it, as the residual layer's does: the graph records
    // no standalone ReLU pass for it.
    assert!(graph.summary().unwrap().contains("Connected to"), "{}", graph.summary().unwrap());
}

#[test]
fn frozen_batch_norms_of_a_graph_compute_what_a_frozen_residual_layer_does() {
    // set_trainable addresses a functional model's layers in topological order: freezing the
    // graph's BatchNorms (and the convolutions of the block) is freezing the stack's stem
    // BatchNorm and its residual layer. Each BatchNorm then runs in inference mode.
    let (images, labels) = batch(6, &[8, 8, 3], 4);
    let (mut stack, mut graph) = (residual_stack(), residual_graph());
    for i in [1, 3] {
        stack.set_trainable(i, false).unwrap();
    }
    for i in [1, 3, 4, 6, 7] {
        graph.set_trainable(i, false).unwrap();
    }
    compile_on(&mut stack, devices(1));
    compile_on(&mut graph, devices(1));
    let (params, _, _) = stack.get_weights().unwrap();
    graph.set_weights(&params).unwrap();
    let (loss_s, grads_s) = stack.compute_gradients(&images, &labels).unwrap();
    let (loss_g, grads_g) = graph.compute_gradients(&images, &labels).unwrap();
    assert!((loss_s - loss_g).abs() < 1e-6, "loss {loss_s} against {loss_g}");
    let worst = grads_s.iter().zip(&grads_g).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let scale = grads_s.iter().map(|g| g.abs()).fold(0.0f32, f32::max);
    assert!(worst <= 1e-5 * scale.max(1.0), "gradients differ by {worst} (largest {scale})");
    // Inference mode: one sample's loss does not depend on the others in its batch.
    let alone = (0..6).map(|i| graph.compute_gradients(&images[i * 192..(i + 1) * 192], &labels[i..i + 1]).unwrap().0).sum::<f64>() / 6.0;
    assert!((loss_g - alone).abs() < 1e-5 * loss_g, "the batch's loss {loss_g}, its samples' {alone}");
}

#[test]
fn a_two_branch_graph_matches_finite_differences() {
    let inputs = input(&[8, 8, 3]);
    let out = two_branch(&inputs);
    let mut model = Model::functional(&inputs, &out).unwrap();
    // The dead branch (conv, pooling, dense) is not part of the model.
    assert_eq!(model.layers().len(), 13, "{}", model.summary().unwrap());
    compile_on(&mut model, devices(1));
    let (images, labels) = batch(5, &[8, 8, 3], 2);
    let (params, _, _) = model.get_weights().unwrap();
    let (_, grads) = model.compute_gradients(&images, &labels).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let eps = 1e-3f64;
    for _ in 0..6 {
        let v: Vec<f64> = params.iter().map(|_| rng.random_range(-1.0f64..1.0)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let mut loss_at = |s: f64| {
            let p: Vec<f32> = params.iter().zip(&v).map(|(p, d)| (*p as f64 + s * d / norm) as f32).collect();
            model.set_weights(&p).unwrap();
            model.compute_gradients(&images, &labels).unwrap().0
        };
        let numeric = (loss_at(eps) - loss_at(-eps)) / (2.0 * eps);
        let analytic: f64 = grads.iter().zip(&v).map(|(g, d)| *g as f64 * d / norm).sum();
        // f32 central differences of a loss near 2.3 carry about 1e-4 of noise at this step,
        // so small directional derivatives are held to an absolute 3e-4.
        let err = (numeric - analytic).abs() / analytic.abs().max(numeric.abs()).max(1e-2);
        eprintln!("numeric {numeric:.6} analytic {analytic:.6} error {err:.2e}");
        assert!(err < 3e-2, "numeric {numeric} analytic {analytic}: error {err:.2e}");
    }
}

#[test]
fn a_graph_trains_saves_reloads_and_evaluates_identically_on_two_replicas() {
    let inputs = input(&[8, 8, 3]);
    let out = two_branch(&inputs);
    let mut model = Model::functional(&inputs, &out).unwrap();
    compile_on(&mut model, devices(2));
    let (images, labels) = batch(16, &[8, 8, 3], 4);
    let first = model.train_on_batch(&images, &labels).unwrap()["loss"];
    for _ in 0..8 {
        model.train_on_batch(&images, &labels).unwrap();
    }
    let last = model.train_on_batch(&images, &labels).unwrap()["loss"];
    assert!(last < first, "loss {first} -> {last}");
    let probs = model.predict_images(&images, 16).unwrap();
    let dir = std::env::temp_dir().join(format!("convoy-functional-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("graph.safetensors");
    model.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices(1), 16).unwrap();
    assert_eq!(loaded.architecture(), model.architecture());
    let again = loaded.predict_images(&images, 16).unwrap();
    let worst = probs.iter().flatten().zip(again.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-6, "predictions differ by {worst} after reloading");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn graph_mistakes_are_named() {
    let inputs = input(&[8, 8, 3]);
    let a = conv(4, 3).call(&inputs).unwrap();
    let b = conv(5, 3).call(&inputs).unwrap();
    let err = Add::new().call_many(&[&a, &b]).unwrap_err().to_string();
    assert!(err.contains("[8, 8, 4]") && err.contains("[8, 8, 5]"), "{err}");
    let err = Add::new().call(&a).unwrap_err().to_string();
    assert!(err.contains("two or more"), "{err}");
    let err = ReLU::new().call_many(&[&a, &a]).unwrap_err().to_string();
    assert!(err.contains("takes one"), "{err}");
    let other = input(&[8, 8, 3]);
    let c = conv(4, 3).call(&other).unwrap();
    assert!(Add::new().call_many(&[&a, &c]).unwrap_err().to_string().contains("two different inputs"));
    assert!(Model::functional(&inputs, &c).map(|_| ()).unwrap_err().to_string().contains("not computed from these inputs"));
    assert!(Model::functional(&inputs, &inputs).map(|_| ()).unwrap_err().to_string().contains("no layers"));
    let out = Dense::new(10).call(&Flatten::new().call(&a).unwrap()).unwrap();
    Model::functional(&inputs, &out).unwrap();
    let err = Model::functional(&inputs, &out).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("already belongs to another model"), "{err}");
}

#[test]
fn saved_graphs_with_bad_inbound_lists_are_refused() {
    let inputs = input(&[4, 4, 1]);
    let a = conv(2, 1).call(&inputs).unwrap();
    let b = conv(2, 1).call(&inputs).unwrap();
    let y = Add::new().call_many(&[&a, &b]).unwrap();
    let y = Dense::new(3).call(&Flatten::new().call(&y).unwrap()).unwrap();
    let model = Model::functional(&inputs, &y).unwrap();
    let arch = model.architecture();
    assert_eq!(arch["layers"][2]["inbound"], serde_json::json!([1, 2]));
    Sequential::from_architecture(&arch).unwrap();
    let with = |layer: usize, inbound: serde_json::Value| {
        let mut a = arch.clone();
        a["layers"][layer]["inbound"] = inbound;
        Sequential::from_architecture(&a).map(|_| ()).unwrap_err().to_string()
    };
    assert!(with(2, serde_json::json!([1, 3])).contains("reads node 3"));
    assert!(with(2, serde_json::json!([1])).contains("merge layer takes two or more"));
    assert!(with(1, serde_json::json!([0, 1])).contains("it takes one"));
    assert!(with(2, serde_json::json!([])).contains("non-empty list"));
    assert!(with(2, serde_json::json!(["x"])).contains("non-empty list"));
    // Layer 1 (the second convolution) read by nobody: the join reads the first twice.
    assert!(with(2, serde_json::json!([1, 1])).contains("read by no layer"));
    // A layer added to the graph afterwards reads its output, and is saved naming it.
    let mut grown = Sequential::from_architecture(&arch).unwrap();
    grown.add(Dense::new(2));
    let again = grown.architecture();
    assert_eq!(again["layers"][5]["inbound"], serde_json::json!([5]));
    Sequential::from_architecture(&again).unwrap();
    let mut a = arch.clone();
    a["layers"][1].as_object_mut().unwrap().remove("inbound");
    assert!(Sequential::from_architecture(&a).map(|_| ()).unwrap_err().to_string().contains("no `inbound` list"));
}

#[test]
fn graphs_match_the_f64_reference_on_one_and_two_replicas() {
    // `convoy check`'s model-level reference follows the graph: merges, summed gradients of
    // a node read several times, a ReLU fused into an Add, one that cannot fuse.
    for replicas in [1, 2] {
        let inputs = input(&[8, 8, 3]);
        let out = two_branch(&inputs);
        for mut model in [residual_graph(), Model::functional(&inputs, &out).unwrap()] {
            compile_on(&mut model, devices(replicas));
            let batches: Vec<_> = (0..3).map(|s| batch(7, &[8, 8, 3], 10 + s)).collect();
            let r = convoy::check::check(&mut model, &batches).unwrap();
            eprintln!("{replicas} replicas: grads {:.1e} ({}), loss {:.1e}, moving {:.1e}", r.grad.error, r.grad.at, r.loss.error, r.moving_stats.error);
            assert!(r.ok, "{replicas} replicas: {r:#?}");
        }
    }
}
