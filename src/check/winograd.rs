//! Winograd's F(m x m, 3 x 3) in the reference's arithmetic: the plain-f32 model computes
//! the convolutions the device takes through Winograd (`kernels::winograd`) the same way, so
//! that its distance from f64, which bounds the device's, is that of the algorithm the device
//! runs (F(4x4)'s transforms lose about four times the direct sum's precision). The f64
//! reference itself always convolves directly.

use rayon::prelude::*;

use super::ops::Arith;
use crate::kernels::conv2d::Conv2dGeometry;
use crate::kernels::winograd::{matrices, Pass, Plan};

/// `pass` of `geom` (y from x, or dx from dy) through F(m x m, 3 x 3), every operation
/// rounded by `A`, each sum taken in order.
pub(crate) fn convolve<A: Arith>(geom: &Conv2dGeometry, pass: Pass, m: usize, src: &[f64], w: &[f64]) -> Vec<f64> {
    let plan = Plan::new(geom, pass, m);
    let ((sh, sw, k), (dh, dw, n), (pt, pl)) = (plan.src, plan.dst, plan.pad);
    let (c, f) = (geom.in_c, geom.filters);
    // Tap (r, s) from source channel ki to destination channel ni: the kernel itself, or
    // (input gradient) flipped in both axes with its channels swapped.
    let tap = |r: usize, s: usize, ki: usize, ni: usize| match pass {
        Pass::Forward => w[((r * 3 + s) * c + ki) * f + ni],
        Pass::BackwardData => w[(((2 - r) * 3 + (2 - s)) * c + ni) * f + ki],
    };
    let (bt, g, at) = matrices(m);
    let a = m + 2;
    // Sum over i < len of x(i) * y(i), in order.
    let dot = |len: usize, x: &dyn Fn(usize) -> f64, y: &dyn Fn(usize) -> f64| (0..len).fold(0.0, |acc, i| A::r(acc + A::r(x(i) * y(i))));
    // U[e][ki][ni] = (G g G^T)[e]
    let mut u = vec![0.0; a * a * k * n];
    let mut gg = [0.0; 18];
    for ki in 0..k {
        for ni in 0..n {
            for (e, v) in gg[..a * 3].iter_mut().enumerate() {
                *v = dot(3, &|r| g[(e / 3) * 3 + r], &|r| tap(r, e % 3, ki, ni));
            }
            for e in 0..a * a {
                u[(e * k + ki) * n + ni] = dot(3, &|s| gg[(e / a) * 3 + s], &|s| g[(e % a) * 3 + s]);
            }
        }
    }
    let (th, tw, tiles) = plan.tiles();
    let outputs: Vec<Vec<f64>> = (0..tiles)
        .into_par_iter()
        .map(|t| {
            let (b, rest) = (t / (th * tw), t % (th * tw));
            let (h0, w0) = ((rest / tw * m) as isize - pt as isize, (rest % tw * m) as isize - pl as isize);
            // M[e][ni] = sum over ki of V[e][ki] U[e][ki][ni], ki in order.
            let mut prod = vec![0.0; a * a * n];
            let (mut d, mut bd) = ([0.0; 36], [0.0; 36]);
            for ki in 0..k {
                for (e, v) in d[..a * a].iter_mut().enumerate() {
                    let (ih, iw) = (h0 + (e / a) as isize, w0 + (e % a) as isize);
                    let inside = ih >= 0 && iw >= 0 && (ih as usize) < sh && (iw as usize) < sw;
                    *v = if inside { src[((b * sh + ih as usize) * sw + iw as usize) * k + ki] } else { 0.0 };
                }
                for e in 0..a * a {
                    bd[e] = dot(a, &|r| bt[(e / a) * a + r], &|r| d[r * a + e % a]);
                }
                for e in 0..a * a {
                    let v = dot(a, &|s| bd[(e / a) * a + s], &|s| bt[(e % a) * a + s]);
                    super::ops::axpy::<A>(&mut prod[e * n..(e + 1) * n], v, &u[(e * k + ki) * n..][..n]);
                }
            }
            // y = A^T M A per destination channel.
            let mut y = vec![0.0; m * m * n];
            let mut am = [0.0; 24];
            for ni in 0..n {
                for (e, v) in am[..m * a].iter_mut().enumerate() {
                    *v = dot(a, &|x| at[(e / a) * a + x], &|x| prod[(x * a + e % a) * n + ni]);
                }
                for o in 0..m * m {
                    y[o * n + ni] = dot(a, &|nu| am[(o / m) * a + nu], &|nu| at[(o % m) * a + nu]);
                }
            }
            y
        })
        .collect();
    let mut dst = vec![0.0; plan.batch * dh * dw * n];
    for (t, y) in outputs.iter().enumerate() {
        let (b, rest) = (t / (th * tw), t % (th * tw));
        for o in 0..m * m {
            let (oh, ow) = (rest / tw * m + o / m, rest % tw * m + o % m);
            if oh < dh && ow < dw {
                dst[((b * dh + oh) * dw + ow) * n..][..n].copy_from_slice(&y[o * n..(o + 1) * n]);
            }
        }
    }
    dst
}
