//! The reference's activations in f64: the smooth functions with their derivatives, and the
//! rectifier (capped and leaky ReLU) whose kinks it takes from the device.

use rayon::prelude::*;

use super::decisions::Decision;
use super::net::Act;
use super::reference::{KinkReport, TIE_MARGIN, TIE_THRESHOLD};
use crate::{bail, Result};

/// erfc in f64: the series of erf, whose terms are all positive, below 2; Laplace's
/// continued fraction above, where 1 - erf would lose the tail's digits. Both to about
/// 1e-15 relative, far below what the f32 kernel is held to.
fn erfc(z: f64) -> f64 {
    if z < 0.0 {
        return 2.0 - erfc(-z);
    }
    if z < 2.0 {
        let (mut term, mut sum) = (z, z);
        for n in 1..200 {
            term *= 2.0 * z * z / (2 * n + 1) as f64;
            sum += term;
        }
        return 1.0 - 2.0 / std::f64::consts::PI.sqrt() * (-z * z).exp() * sum;
    }
    let mut k = z;
    for n in (1..200).rev() {
        k = z + (n as f64 / 2.0) / k;
    }
    (-z * z).exp() / (std::f64::consts::PI.sqrt() * k)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// 1 - tanh(x)^2 without the cancellation near |tanh| = 1.
fn sech2(x: f64) -> f64 {
    1.0 / x.cosh().powi(2)
}

const GELU_C: f64 = 0.797_884_560_802_865_4;

/// `(f(x), f'(x))` of a smooth activation; `None` for the rectifier, whose derivative is
/// the device's decision.
pub(crate) fn smooth(act: Act, x: f64) -> Option<(f64, f64)> {
    Some(match act {
        Act::Rectifier { .. } => return None,
        Act::Sigmoid => (sigmoid(x), sigmoid(x) * sigmoid(-x)),
        Act::Tanh => (x.tanh(), sech2(x)),
        Act::Silu => (x * sigmoid(x), sigmoid(x) * (1.0 + x * sigmoid(-x))),
        Act::Gelu => {
            let cdf = 0.5 * erfc(-x * std::f64::consts::FRAC_1_SQRT_2);
            (x * cdf, cdf + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt())
        }
        Act::GeluTanh => {
            let u = GELU_C * (x + 0.044715 * x.powi(3));
            let t = u.tanh();
            (0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * sech2(u) * GELU_C * (1.0 + 3.0 * 0.044715 * x * x))
        }
    })
}

/// Which piece of a rectifier a unit is on: the slope (at and below 0), the identity, or
/// the cap (at and above `max_value`), as the kernel's derivative splits them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Piece {
    Slope,
    Linear,
    Cap,
}

impl Piece {
    fn of_input(z: f64, max_value: f64) -> Piece {
        if z <= 0.0 {
            Piece::Slope
        } else if z < max_value {
            Piece::Linear
        } else {
            Piece::Cap
        }
    }
    /// The piece the device's output `y` shows: the cap where it reached `max_value`, the
    /// identity where it is positive, else the slope.
    fn of_output(y: f32, max_value: f64) -> Piece {
        if y as f64 >= max_value {
            Piece::Cap
        } else if y > 0.0 {
            Piece::Linear
        } else {
            Piece::Slope
        }
    }
    fn derivative(self, slope: f64) -> f64 {
        match self {
            Piece::Slope => slope,
            Piece::Linear => 1.0,
            Piece::Cap => 0.0,
        }
    }
}

/// Applies a rectifier (`slope * z` at and below 0, `z` up to `max_value`, `max_value` from
/// there) to `z` in place, on the pieces the device's output shows or, without one, its own;
/// returns each unit's derivative. A unit within the tie threshold of either kink is a tie
/// (counted as flipped where the device took the other piece); any other disagreement is a
/// mismatch, which the reference still follows, as `rectify` does for the plain ReLU.
pub(crate) fn rectifier(
    kinks: &mut KinkReport,
    last_drift: &mut f64,
    name: &str,
    z: &mut [f64],
    (max_value, slope): (f64, f64),
    device: Option<&[f32]>,
) -> Result<(Vec<f64>, Option<Decision>)> {
    let apply = |v: f64, p: Piece| match p {
        Piece::Slope => slope * v,
        Piece::Linear => v,
        Piece::Cap => max_value,
    };
    let Some(device) = device else {
        let pieces: Vec<Piece> = z.iter().map(|&v| Piece::of_input(v, max_value)).collect();
        let mut y = Vec::with_capacity(z.len());
        for (v, p) in z.iter_mut().zip(&pieces) {
            *v = apply(*v, *p);
            // A unit on the identity must read back as one: positive and below the cap.
            y.push(match p {
                Piece::Linear => (*v as f32).max(f32::MIN_POSITIVE).min(f32::from_bits((max_value as f32).to_bits().saturating_sub(1))),
                _ => *v as f32,
            });
        }
        return Ok((pieces.iter().map(|p| p.derivative(slope)).collect(), Some(Decision::Relu(y))));
    };
    if device.len() != z.len() {
        bail!(Shape, "{name}: the device's output has {} values, the layer {}", device.len(), z.len());
    }
    let rms = (z.par_iter().map(|v| v * v).sum::<f64>() / z.len().max(1) as f64).sqrt();
    // The device's output on the identity piece is its f32 pre-activation.
    let drift = z.iter().zip(device).filter(|(_, d)| Piece::of_output(**d, max_value) == Piece::Linear).map(|(z, d)| (*d as f64 - z).abs()).fold(0.0, f64::max);
    let relative = if rms > 0.0 { drift / rms } else { 0.0 };
    if relative > kinks.drift || kinks.drift_at.is_empty() {
        (kinks.drift, kinks.drift_at) = (relative, name.to_string());
    }
    *last_drift = drift;
    let thr = (TIE_THRESHOLD * rms).max(TIE_MARGIN * drift);
    let mut listed = 0;
    let mut derivative = Vec::with_capacity(z.len());
    for (i, (v, &d)) in z.iter_mut().zip(device).enumerate() {
        let (theirs, ours) = (Piece::of_output(d, max_value), Piece::of_input(*v, max_value));
        if v.abs() <= thr || (*v - max_value).abs() <= thr {
            kinks.ties += 1;
            kinks.flipped += (theirs != ours) as usize;
        } else if theirs != ours {
            let z = *v;
            kinks.mismatch(&mut listed, || format!("{name}: unit {i}: f64 pre-activation {z:.6e} (layer RMS {rms:.3e}) is on the {ours:?} piece but the device's output {d:e} on the {theirs:?} piece"));
        }
        *v = apply(*v, theirs);
        derivative.push(theirs.derivative(slope));
    }
    Ok((derivative, None))
}

/// The softmax of each row of `k` values.
pub(crate) fn softmax(x: &[f64], k: usize) -> Vec<f64> {
    x.par_chunks(k)
        .flat_map_iter(|row| {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

/// `y * (dy - Σ dy * y)` over each row of `k` values.
pub(crate) fn softmax_backward(y: &[f64], dy: &[f64], k: usize) -> Vec<f64> {
    y.par_chunks(k)
        .zip(dy.par_chunks(k))
        .flat_map_iter(|(y, g)| {
            let dot: f64 = y.iter().zip(g).map(|(y, g)| y * g).sum();
            y.iter().zip(g).map(move |(y, g)| y * (g - dot))
        })
        .collect()
}
