//! SGD, Adam and AdamW updates against f64 references of PyTorch's formulas, over several
//! steps of one compiled dispatch whose learning rate and gradients change between steps.

use std::ops::Range;

use convoy::kernels::optimizer::{self, Hyper, OptimizerKind};
use convoy::{Error, Tensor};

use crate::common::*;

const SIZES: &[usize] = &[1, 7, 1000, 4097];
const STEPS: u64 = 5;

/// A decaying schedule, so a stale learning rate in `hyper` would show.
pub(crate) fn lr_at(step: u64, base: f32) -> f32 {
    base * 0.8f32.powi(step as i32 - 1)
}

/// The host model of the optimizer state: parameters and up to two state vectors.
#[derive(Clone)]
pub(crate) struct Model {
    pub p: Vec<f64>,
    pub s0: Vec<f64>,
    pub s1: Vec<f64>,
}

/// One step of PyTorch's documented algorithms (torch.optim, "Algorithm" sections), dampening
/// 0, with a per-element weight decay `wd` (0 where decay is masked off):
///
/// SGD:   g ← g + λθ;  b ← μb + g (b = g at t = 1: the same, as b starts at 0);
///        g ← nesterov ? g + μb : b;  θ ← θ − γg
///        (decoupled, Keras 3: θ ← θ − γλθ first, without the g ← g + λθ line)
/// Adam:  g ← g + λθ;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
///        m̂ ← m / (1−β1^t);  v̂ ← v / (1−β2^t);  θ ← θ − γ·m̂ / (√v̂ + ε)
/// AdamW: θ ← θ − γλθ, then Adam's moments and update without the g ← g + λθ line.
pub(crate) fn reference_step(kind: &OptimizerKind, wd: &[f64], m: &mut Model, grads: &[f32], lr: f32, t: u64) {
    let lr = lr as f64;
    for i in 0..m.p.len() {
        let (w, g) = (m.p[i], grads[i] as f64);
        match *kind {
            OptimizerKind::Sgd { momentum, nesterov, decoupled } => {
                let mu = momentum as f64;
                let (w, g) = if decoupled { (w - lr * wd[i] * w, g) } else { (w, g + wd[i] * w) };
                let update = if mu == 0.0 {
                    g
                } else {
                    m.s0[i] = mu * m.s0[i] + g;
                    if nesterov { g + mu * m.s0[i] } else { m.s0[i] }
                };
                m.p[i] = w - lr * update;
            }
            OptimizerKind::Adam { beta1, beta2, epsilon, decoupled } => {
                let (b1, b2, eps) = (beta1 as f64, beta2 as f64, epsilon as f64);
                let (w, g) = if decoupled { (w - lr * wd[i] * w, g) } else { (w, g + wd[i] * w) };
                m.s0[i] = b1 * m.s0[i] + (1.0 - b1) * g;
                m.s1[i] = b2 * m.s1[i] + (1.0 - b2) * g * g;
                let m_hat = m.s0[i] / (1.0 - b1.powi(t as i32));
                let v_hat = m.s1[i] / (1.0 - b2.powi(t as i32));
                m.p[i] = w - lr * m_hat / (v_hat.sqrt() + eps);
            }
        }
    }
}

fn cases() -> Vec<(&'static str, OptimizerKind, f32, f32)> {
    vec![
        ("sgd", OptimizerKind::sgd(0.0, false), 0.0, 0.1),
        ("sgd momentum", OptimizerKind::sgd(0.9, false), 0.0, 0.1),
        ("sgd nesterov", OptimizerKind::sgd(0.9, true), 0.0, 0.1),
        ("sgd weight decay", OptimizerKind::sgd(0.0, false), 0.05, 0.1),
        ("sgd momentum + weight decay", OptimizerKind::sgd(0.9, true), 0.05, 0.1),
        ("sgd decoupled weight decay", OptimizerKind::sgd_decoupled(0.0, false), 0.05, 0.1),
        ("sgd momentum + decoupled weight decay", OptimizerKind::sgd_decoupled(0.9, true), 0.05, 0.1),
        ("adam", OptimizerKind::adam(), 0.0, 0.01),
        ("adam l2", OptimizerKind::adam(), 0.1, 0.01),
        ("adamw", OptimizerKind::adamw(), 0.1, 0.01),
    ]
}

/// Zero-filled state tensors for `kind`, as a model's compile would allocate them.
pub(crate) fn zero_state(kind: &OptimizerKind, n: usize) -> Vec<Tensor> {
    (0..kind.state_count()).map(|_| device().zeros(&[n]).unwrap()).collect()
}

/// Runs `STEPS` steps of `dispatches` (built once), rewriting grads and hyper before each,
/// and the reference alongside. Returns the reference after the last step.
fn train(kind: &OptimizerKind, wd: &[f64], model: &mut Model, grads: &Tensor, hyper: &Tensor, dispatches: &[convoy::kernels::Dispatch], base_lr: f32, seed: u64) {
    let d = device();
    let mut r = rng(seed);
    for t in 1..=STEPS {
        let g = random(&mut r, grads.len());
        d.write(grads, &g).unwrap();
        let lr = lr_at(t, base_lr);
        Hyper::for_step(lr, kind, t).unwrap().write(&d, hyper).unwrap();
        run(dispatches);
        reference_step(kind, wd, model, &g, lr, t);
    }
}

#[test]
fn every_rule_matches_pytorch_over_several_steps() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(10);
        let mut worst = 0.0f64;
        for (name, kind, weight_decay, base_lr) in cases() {
            for &n in SIZES {
                let p0 = random(&mut r, n);
                let (params, grads) = (upload(&p0, &[n]), d.zeros(&[n]).unwrap());
                let state = zero_state(&kind, n);
                let state_refs: Vec<&Tensor> = state.iter().collect();
                let hyper = Hyper::for_step(base_lr, &kind, 1).unwrap().upload(&d).unwrap();
                let step = optimizer::update(&d, &kind, weight_decay, &params, &grads, &state_refs, &hyper).unwrap();
                let mut model = Model { p: p0.iter().map(|&v| v as f64).collect(), s0: vec![0.0; n], s1: vec![0.0; n] };
                train(&kind, &vec![weight_decay as f64; n], &mut model, &grads, &hyper, &[step], base_lr, n as u64);
                worst = worst.max(assert_close(&format!("{name} n={n} params"), &read(&params), &model.p));
                if let Some(s) = state.first() {
                    worst = worst.max(assert_close(&format!("{name} n={n} state 0"), &read(s), &model.s0));
                }
                if let Some(s) = state.get(1) {
                    worst = worst.max(assert_close(&format!("{name} n={n} state 1"), &read(s), &model.s1));
                }
            }
        }
        eprintln!("optimizer rules: worst relative error {worst:.2e}");
    });
}

#[test]
fn view_update_leaves_the_rest_untouched() {
    on_each_variant(|_| {
        // 192 elements = 768 bytes in: a 256-byte-aligned view, 333 long, ending mid-tensor.
        let d = device();
        let mut r = rng(11);
        let (n, start, len) = (1000, 192, 333);
        let kind = OptimizerKind::adamw();
        let p0 = random(&mut r, n);
        let (params, grads) = (upload(&p0, &[n]), d.zeros(&[n]).unwrap());
        let state = zero_state(&kind, n);
        let hyper = Hyper::for_step(0.01, &kind, 1).unwrap().upload(&d).unwrap();
        let views: Vec<Tensor> = [&params, &grads, &state[0], &state[1]].iter().map(|t| t.view(start, &[len]).unwrap()).collect();
        let step = optimizer::update(&d, &kind, 0.1, &views[0], &views[1], &[&views[2], &views[3]], &hyper).unwrap();
        let mut model = Model { p: p0[start..start + len].iter().map(|&v| v as f64).collect(), s0: vec![0.0; len], s1: vec![0.0; len] };
        train(&kind, &vec![0.1; len], &mut model, &views[1], &hyper, &[step], 0.01, 11);
        let got = read(&params);
        let e = assert_close("adamw view", &got[start..start + len], &model.p);
        eprintln!("adamw view: relative error {e:.2e}");
        let outside = |v: &[f32]| v[..start].iter().chain(&v[start + len..]).copied().collect::<Vec<f32>>();
        assert_eq!(outside(&got), outside(&p0), "parameters outside the view changed");
        for s in &state {
            assert!(outside(&read(s)).iter().all(|&v| v == 0.0), "state outside the view changed");
        }
    });
}

#[test]
fn masked_weight_decay_skips_the_excluded_ranges() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(12);
        let n = 1000;
        // Unaligned ranges, out of order, two of them adjacent: one dispatch with a mask.
        let no_decay: Vec<Range<usize>> = vec![990..1000, 100..137, 137..140, 500..503];
        let mut wd_of = vec![0.1f64; n];
        for range in &no_decay {
            wd_of[range.clone()].iter_mut().for_each(|w| *w = 0.0);
        }
        for (name, kind) in [("sgd momentum masked", OptimizerKind::sgd(0.9, false)), ("adamw masked", OptimizerKind::adamw()), ("adam masked", OptimizerKind::adam())] {
            let p0 = random(&mut r, n);
            let (params, grads) = (upload(&p0, &[n]), d.zeros(&[n]).unwrap());
            let state = zero_state(&kind, n);
            let state_refs: Vec<&Tensor> = state.iter().collect();
            let hyper = Hyper::for_step(0.05, &kind, 1).unwrap().upload(&d).unwrap();
            // One dispatch for every stretch.
            let steps = [optimizer::update_masked(&d, &kind, 0.1, &params, &grads, &state_refs, &hyper, &no_decay).unwrap()];
            let mut model = Model { p: p0.iter().map(|&v| v as f64).collect(), s0: vec![0.0; n], s1: vec![0.0; n] };
            train(&kind, &wd_of, &mut model, &grads, &hyper, &steps, 0.05, 12);
            let e = assert_close(name, &read(&params), &model.p);
            eprintln!("{name}: relative error {e:.2e}");
        }
    });
}

#[test]
fn bad_operands_are_errors() {
    let d = device();
    let n = 100;
    let z = |len: usize| d.zeros(&[len]).unwrap();
    let (params, grads, m, v) = (z(n), z(n), z(n), z(n));
    let hyper = Hyper::for_step(0.1, &OptimizerKind::adam(), 1).unwrap().upload(&d).unwrap();
    let adam = OptimizerKind::adam();
    let is_shape = |r: convoy::Result<convoy::kernels::Dispatch>| matches!(r, Err(Error::Shape(_)));

    let short = z(n - 1);
    let err = optimizer::update(&d, &adam, 0.0, &params, &short, &[&m, &v], &hyper).unwrap_err();
    assert!(matches!(err, Error::Shape(_)) && err.to_string().contains("[99]"), "length mismatch: {err}");
    assert!(is_shape(optimizer::update(&d, &adam, 0.0, &params, &grads, &[&m, &short], &hyper)), "short state");
    assert!(is_shape(optimizer::update(&d, &adam, 0.0, &params, &grads, &[&m], &hyper)), "Adam needs m and v");
    assert!(is_shape(optimizer::update(&d, &OptimizerKind::sgd(0.0, false), 0.0, &params, &grads, &[&m], &hyper)), "plain SGD keeps no state");
    assert!(is_shape(optimizer::update(&d, &OptimizerKind::sgd(0.9, false), 0.0, &params, &grads, &[], &hyper)), "momentum needs a velocity");
    assert!(is_shape(optimizer::update(&d, &adam, 0.0, &params, &grads, &[&m, &v], &z(3))), "hyper of 3 elements");
    assert!(is_shape(optimizer::update(&d, &adam, 0.0, &params, &grads, &[&m, &m], &hyper)), "m and v alias");
    assert!(is_shape(optimizer::update(&d, &adam, 0.0, &params, &params, &[&m, &v], &hyper)), "grads alias params");

    // Grads in the params' buffer: wgpu refuses read and read_write bindings of one buffer.
    let both = z(128);
    let (pv, gv) = (both.view(0, &[64]).unwrap(), both.view(64, &[64]).unwrap());
    let (m64, v64) = (z(64), z(64));
    assert!(is_shape(optimizer::update(&d, &adam, 0.0, &pv, &gv, &[&m64, &v64], &hyper)), "grads share the params' buffer");

    assert!(matches!(optimizer::update(&d, &adam, -1.0, &params, &grads, &[&m, &v], &hyper), Err(Error::Config(_))), "negative decay");
    let nesterov_without_momentum = OptimizerKind::sgd(0.0, true);
    assert!(matches!(optimizer::update(&d, &nesterov_without_momentum, 0.0, &params, &grads, &[], &hyper), Err(Error::Config(_))));
    let bad_beta = OptimizerKind::Adam { beta1: 1.0, beta2: 0.999, epsilon: 1e-8, decoupled: false };
    assert!(matches!(optimizer::update(&d, &bad_beta, 0.0, &params, &grads, &[&m, &v], &hyper), Err(Error::Config(_))));
    assert!(Hyper::for_step(0.1, &adam, 0).is_err(), "step 0");
    assert!(optimizer::update_masked(&d, &adam, 0.1, &params, &grads, &[&m, &v], &hyper, &[10..20, 15..30]).is_err(), "overlapping ranges");
    assert!(optimizer::update_masked(&d, &adam, 0.1, &params, &grads, &[&m, &v], &hyper, &[90..101]).is_err(), "range past the end");
}

#[test]
fn hyper_matches_pytorch_bias_corrections() {
    let adam = OptimizerKind::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-8, decoupled: false };
    let h = Hyper::for_step(0.5, &adam, 3).unwrap();
    assert_eq!(h.lr, 0.5);
    // Of the betas the kernel uses (f32), so the correction exactly un-biases its moments.
    let (b1, b2) = (0.9f32 as f64, 0.999f32 as f64);
    assert!((h.bias_correction1 as f64 - (1.0 - b1.powi(3))).abs() < 1e-7);
    assert!((h.bias_correction2 as f64 - (1.0 - b2.powi(3))).abs() < 1e-9);
    let s = Hyper::for_step(0.5, &OptimizerKind::sgd(0.9, false), 7).unwrap();
    assert_eq!((s.bias_correction1, s.bias_correction2), (1.0, 1.0));
    assert_eq!(std::mem::size_of::<Hyper>(), 4 * Hyper::LEN);
}

/// The loss-scale state's kernels (shaders/loss_scale.wgsl) and the optimizer's skip: a
/// flagged step leaves parameters and optimizer state as they were, the scale halves (never
/// below 1) and counts the skip; `growth_steps` finite steps in a row double it; the search
/// finds NaN and both infinities and nothing in finite data; the loss gradient is scaled.
#[test]
fn loss_scaling_skips_flagged_steps_and_moves_the_scale() {
    use convoy::kernels::loss_scale;
    on_each_variant(|_| {
        let d = device();
        let state = d.upload_u32(&[4], &loss_scale::initial_state(1024.0)).unwrap();
        let words = |t: &Tensor| d.read_u32(t).unwrap();
        let set = |w: [u32; 4]| d.write(&state, &w).unwrap();

        // The search, over sizes on and off the workgroup, by elements (n off quads) and by
        // quads: within one invocation's first quad, its later ones (the grid's stride; 4,096
        // is one workgroup whose last quads are each invocation's fourth), a second
        // workgroup's (4,100: 1,025 quads, 1,024 a workgroup).
        take_paths();
        for n in [1, 255, 1000, 4096, 4100] {
            let data = d.zeros(&[n]).unwrap();
            let find = loss_scale::find_non_finite(&d, &data, &state).unwrap();
            for at in [0, n / 3, n / 2 + 1, n - 1].into_iter().filter(|&at| at < n) {
                for bad in [None, Some(f32::NAN), Some(f32::INFINITY), Some(f32::NEG_INFINITY)] {
                    let mut v = vec![1e30f32; n];
                    if let Some(b) = bad {
                        v[at] = b;
                    }
                    d.write(&data, &v).unwrap();
                    set(loss_scale::initial_state(1024.0));
                    run(std::slice::from_ref(&find));
                    assert_eq!(words(&state)[2], bad.is_some() as u32, "n={n} at {at} {bad:?}");
                }
            }
        }
        let expected = [("find_non_finite", "scalar".to_string()), ("find_non_finite4", "vec4".to_string())];
        assert_paths_cover("loss_scale", &take_paths(), &expected, &[]);
        // Scaling the loss gradient.
        let g = upload(&[0.5, -2.0, 3.0], &[3]);
        set(loss_scale::initial_state(1024.0));
        run(&[loss_scale::scale_gradient(&d, &g, &state).unwrap()]);
        assert_eq!(read(&g), vec![512.0, -2048.0, 3072.0]);

        // Growth after three finite steps; halving, counting and the floor at 1.
        let update = loss_scale::update_scale(&d, &state, 3).unwrap();
        set(loss_scale::initial_state(1024.0));
        let mut seen = Vec::new();
        for _ in 0..4 {
            run(std::slice::from_ref(&update));
            let w = words(&state);
            seen.push((f32::from_bits(w[0]), w[1]));
        }
        assert_eq!(seen, vec![(1024.0, 1), (1024.0, 2), (2048.0, 0), (2048.0, 1)]);
        set([2048f32.to_bits(), 2, 1, 5]);
        run(std::slice::from_ref(&update));
        assert_eq!(words(&state), [1024f32.to_bits(), 0, 0, 6], "a flagged step halves, restarts the count, clears the flag, counts the skip");
        set([1f32.to_bits(), 0, 1, 0]);
        run(std::slice::from_ref(&update));
        assert_eq!(f32::from_bits(words(&state)[0]), 1.0, "never below 1");
        assert!(loss_scale::update_scale(&d, &state, 0).is_err());

        // A flagged step changes no parameter and no optimizer state, for every rule.
        let n = 300;
        let mut r = rng(21);
        for kind in [OptimizerKind::sgd(0.0, false), OptimizerKind::sgd(0.9, true), OptimizerKind::adam(), OptimizerKind::adamw()] {
            let p0 = random(&mut r, n);
            let (params, grads) = (upload(&p0, &[n]), upload(&random(&mut r, n), &[n]));
            let st: Vec<Tensor> = zero_state(&kind, n)
                .into_iter()
                .map(|t| {
                    d.write(&t, &vec![0.25f32; n]).unwrap();
                    t
                })
                .collect();
            let refs: Vec<&Tensor> = st.iter().collect();
            let hyper = Hyper::for_step(0.1, &kind, 3).unwrap().upload(&d).unwrap();
            let step = optimizer::update_scaled(&d, &kind, 0.1, &params, &grads, &refs, &hyper, &[0..10], Some(&state)).unwrap();
            set([1024f32.to_bits(), 0, 1, 0]);
            run(std::slice::from_ref(&step));
            assert_eq!(read(&params), p0, "{kind:?}: a skipped step moved the parameters");
            assert!(st.iter().all(|t| read(t).iter().all(|&v| v == 0.25)), "{kind:?}: a skipped step moved the optimizer state");
            set([1024f32.to_bits(), 0, 0, 0]);
            run(std::slice::from_ref(&step));
            assert_ne!(read(&params), p0, "{kind:?}: an unflagged step must update");
        }
        let hyper = Hyper::for_step(0.1, &OptimizerKind::adam(), 1).unwrap().upload(&d).unwrap();
        let z = d.zeros(&[n]).unwrap();
        let wrong = d.zeros(&[4]).unwrap();
        assert!(matches!(optimizer::update_scaled(&d, &OptimizerKind::sgd(0.0, false), 0.0, &z, &z, &[], &hyper, &[], Some(&wrong)), Err(Error::Shape(_))), "an f32 state is refused");
    });
}

/// Keras' `global_clipnorm` with frozen layers: the norm is over the trainable gradients only
/// (Keras computes no others), so the excluded ranges' values, huge or NaN, change nothing;
/// checked against the f64 norm of the rest, with and without the loss scale, and the path
/// coverage of the first pass with and without a mask.
#[test]
fn clipping_leaves_excluded_ranges_out_of_the_norm() {
    take_paths();
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(32);
        for (n, excluded) in [(8, vec![]), (300, vec![0..64, 256..300]), (65_536 + 77, vec![100..30_000, 64..90]), (200_003, vec![199_000..200_003])] {
            for loss_scale in [None, Some(1024.0f32)] {
                let (grads, partials) = (d.zeros(&[n]).unwrap(), d.zeros(&[optimizer::NORM_GROUPS]).unwrap());
                let hyper = Hyper::for_step(0.1, &OptimizerKind::sgd(0.0, false), 1).unwrap().upload(&d).unwrap();
                let ls = loss_scale.map(|s| d.upload_u32(&[4], &convoy::kernels::loss_scale::initial_state(s)).unwrap());
                let mut g = random(&mut r, n);
                let frozen = |i: usize| excluded.iter().any(|e: &std::ops::Range<usize>| e.contains(&i));
                for (i, v) in g.iter_mut().enumerate().filter(|(i, _)| frozen(*i)) {
                    *v = if i % 7 == 0 { f32::NAN } else { 1e6 };
                }
                let norm = g.iter().enumerate().filter(|(i, _)| !frozen(*i)).map(|(_, &v)| v as f64 * v as f64).sum::<f64>().sqrt();
                let clip = (norm / 2.0) as f32;
                d.write(&grads, &g.iter().map(|v| v * loss_scale.unwrap_or(1.0)).collect::<Vec<_>>()).unwrap();
                run(&optimizer::clip_by_global_norm_except(&d, clip, &grads, &hyper, &partials, ls.as_ref(), &excluded).unwrap());
                let (got, want) = (read(&hyper)[3] as f64, clip as f64 / norm);
                assert!((got - want).abs() <= 1e-5 * want, "n={n} excluded={excluded:?} loss_scale={loss_scale:?}: clip factor {got}, want {want}");
            }
        }
        let (z, partials, hyper) = (d.zeros(&[8]).unwrap(), d.zeros(&[optimizer::NORM_GROUPS]).unwrap(), d.zeros(&[4]).unwrap());
        let e = optimizer::clip_by_global_norm_except(&d, 1.0, &z, &hyper, &partials, None, &[4..9]).unwrap_err().to_string();
        assert!(e.contains("4..9") && e.contains("8 gradients"), "{e}");
    });
    assert_paths_cover("global norm", &take_paths(), &[("norm_partials", "excluded=no".into()), ("norm_partials", "excluded=yes".into())], &[]);
}

/// Keras' `global_clipnorm` (`tf.clip_by_global_norm`): every gradient times
/// `min(1, c / ‖g‖₂)`, the norm taken over the whole tensor in f64 here, then the rule's step
/// of [`reference_step`] on the clipped gradient.
#[test]
fn clipping_by_global_norm_matches_reference() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(31);
        // One element; under one workgroup; past the 256 x 256 elements one sweep of the
        // first pass covers (each invocation strides further); a large odd tensor.
        let cases = [(1, OptimizerKind::sgd(0.0, false)), (255, OptimizerKind::sgd(0.9, true)), (65_536 + 77, OptimizerKind::adam()), (200_003, OptimizerKind::sgd(0.0, false))];
        for (n, kind) in cases {
            // Loss-scaled gradients (mixed_float16) on one of the two: the norm is of the
            // gradient without the scale.
            for loss_scale in [None, Some(1024.0f32)] {
                let p0 = random(&mut r, n);
                let (params, grads, partials) = (upload(&p0, &[n]), d.zeros(&[n]).unwrap(), d.zeros(&[optimizer::NORM_GROUPS]).unwrap());
                let state = zero_state(&kind, n);
                let refs: Vec<&Tensor> = state.iter().collect();
                let hyper = Hyper::for_step(0.1, &kind, 1).unwrap().upload(&d).unwrap();
                let ls = loss_scale.map(|s| d.upload_u32(&[4], &convoy::kernels::loss_scale::initial_state(s)).unwrap());
                // About the norm of a unit-uniform gradient: the small step passes unclipped.
                let clip = (n as f64 / 3.0).sqrt() as f32;
                let mut steps = optimizer::clip_by_global_norm(&d, clip, &grads, &hyper, &partials, ls.as_ref()).unwrap();
                steps.push(optimizer::update_clipped(&d, &kind, 0.0, &params, &grads, &refs, &hyper, &[], ls.as_ref(), true).unwrap());
                let mut model = Model { p: p0.iter().map(|&v| v as f64).collect(), s0: vec![0.0; n], s1: vec![0.0; n] };
                for (t, size) in [(1u64, 0.1f32), (2, 3.0), (3, 30.0)] {
                    let g: Vec<f32> = random(&mut r, n).iter().map(|v| v * size).collect();
                    let scaled: Vec<f32> = g.iter().map(|v| v * loss_scale.unwrap_or(1.0)).collect();
                    d.write(&grads, &scaled).unwrap();
                    let lr = lr_at(t, 0.1);
                    Hyper::for_step(lr, &kind, t).unwrap().write(&d, &hyper).unwrap();
                    run(&steps);
                    let norm = g.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt();
                    let factor = (clip as f64 / norm).min(1.0);
                    let got = read(&hyper)[3] as f64;
                    assert!((got - factor).abs() <= 1e-5 * factor, "n={n} step {t}: clip factor {got}, want {factor} (norm {norm}, clip {clip})");
                    let clipped: Vec<f32> = g.iter().map(|&v| (v as f64 * factor) as f32).collect();
                    reference_step(&kind, &vec![0.0; n], &mut model, &clipped, lr, t);
                }
                assert_close(&format!("{kind:?} n={n} loss_scale={loss_scale:?}: params after 3 clipped steps"), &read(&params), &model.p);
            }
        }
        let (z, partials, hyper) = (d.zeros(&[8]).unwrap(), d.zeros(&[optimizer::NORM_GROUPS]).unwrap(), d.zeros(&[4]).unwrap());
        for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
            let e = optimizer::clip_by_global_norm(&d, bad, &z, &hyper, &partials, None).unwrap_err().to_string();
            assert!(e.contains("global_clipnorm") && e.contains(&bad.to_string()), "{e}");
        }
        let short = d.zeros(&[8]).unwrap();
        assert!(matches!(optimizer::clip_by_global_norm(&d, 1.0, &z, &hyper, &short, None), Err(Error::Shape(_))), "partials of the wrong size");
    });
}
