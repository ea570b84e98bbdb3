//! Matrix products and dense layers, on the convolution's GEMM engine ([`super::gemm`]):
//! a transposed operand is only another way of gathering a tile.

use super::gemm::{self, ALoad, BLoad, Gemm, GemmOptions};
use super::{expect_shape, Dispatch};
use crate::{bail, Device, Result, Tensor};

fn matrix(kernel: &str, operand: &str, t: &Tensor) -> Result<(usize, usize)> {
    match *t.shape() {
        [r, c] => Ok((r, c)),
        _ => bail!(Shape, "{kernel}: {operand} must be 2-D, got {:?}", t.shape()),
    }
}

/// `c = op(a) · op(b)`, where `op` transposes when asked. `c` is overwritten.
///
/// # Shapes
/// a `[m, k]` (`[k, m]` with `trans_a`), b `[k, n]` (`[n, k]` with `trans_b`), c `[m, n]`.
pub fn matmul(device: &Device, a: &Tensor, b: &Tensor, c: &Tensor, trans_a: bool, trans_b: bool) -> Result<Vec<Dispatch>> {
    matmul_with(device, a, b, c, trans_a, trans_b, &GemmOptions::default())
}

/// [`matmul`] with the tile and K split forced (tuning, tests).
pub fn matmul_with(device: &Device, a: &Tensor, b: &Tensor, c: &Tensor, trans_a: bool, trans_b: bool, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    product(device, "matmul", a, b, None, c, trans_a, trans_b, opts)
}

#[allow(clippy::too_many_arguments)]
fn product(
    device: &Device,
    kernel: &'static str,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    trans_a: bool,
    trans_b: bool,
    opts: &GemmOptions,
) -> Result<Vec<Dispatch>> {
    let (ar, ac) = matrix(kernel, "a", a)?;
    let (br, bc) = matrix(kernel, "b", b)?;
    let (m, k) = if trans_a { (ac, ar) } else { (ar, ac) };
    let (kb, n) = if trans_b { (bc, br) } else { (br, bc) };
    if k != kb {
        bail!(Shape, "{kernel}: inner sizes differ: a {:?} (trans {trans_a}) and b {:?} (trans {trans_b})", a.shape(), b.shape());
    }
    expect_shape(kernel, "c", c, &[m, n])?;
    if let Some(bias) = bias {
        expect_shape(kernel, "bias", bias, &[n])?;
    }
    let g = Gemm {
        label: kernel,
        m,
        n,
        k,
        a_load: if trans_a { ALoad::Cols } else { ALoad::Rows },
        b_load: if trans_b { BLoad::BlockedT(k) } else { BLoad::Rows },
        conv: None,
        phase: None,
        groups: None,
        a,
        b,
        bias,
        c,
        stats: None,
        a_norm: None,
        join: None,
        flops: 2.0 * m as f64 * n as f64 * k as f64,
    };
    gemm::launch(device, &g, opts)
}

/// `y = x · w + b`, the bias added as the GEMM writes its tile.
///
/// # Shapes
/// x `[batch, in]`, w `[in, out]`, b `[out]`, y `[batch, out]`.
pub fn dense_forward(device: &Device, x: &Tensor, w: &Tensor, b: Option<&Tensor>, y: &Tensor) -> Result<Vec<Dispatch>> {
    dense_forward_with(device, x, w, b, y, &GemmOptions::default())
}

/// [`dense_forward`] with the engine's choices overridden (the mixed policy's products).
pub fn dense_forward_with(device: &Device, x: &Tensor, w: &Tensor, b: Option<&Tensor>, y: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    product(device, "dense_forward", x, w, b, y, false, false, opts)
}

/// Gradients of [`dense_forward`]: `dx = dy · wᵀ`, `dw = xᵀ · dy`, `db = sum over the batch
/// of dy`. Each output given is overwritten; `dx` is skipped for a first layer and `db`
/// without a bias.
///
/// # Shapes
/// x `[batch, in]`, w `[in, out]`, dy `[batch, out]`, dx `[batch, in]`, dw `[in, out]`, db `[out]`.
pub fn dense_backward(
    device: &Device,
    x: &Tensor,
    w: &Tensor,
    dy: &Tensor,
    dx: Option<&Tensor>,
    dw: &Tensor,
    db: Option<&Tensor>,
) -> Result<Vec<Dispatch>> {
    dense_backward_with(device, x, w, dy, dx, dw, db, &GemmOptions::default())
}

/// [`dense_backward`] with the engine's choices overridden (the mixed policy's products).
#[allow(clippy::too_many_arguments)]
pub fn dense_backward_with(
    device: &Device,
    x: &Tensor,
    w: &Tensor,
    dy: &Tensor,
    dx: Option<&Tensor>,
    dw: &Tensor,
    db: Option<&Tensor>,
    opts: &GemmOptions,
) -> Result<Vec<Dispatch>> {
    const K: &str = "dense_backward";
    let (batch, inputs) = matrix(K, "x", x)?;
    let (_, units) = matrix(K, "w", w)?;
    expect_shape(K, "w", w, &[inputs, units])?;
    expect_shape(K, "dy", dy, &[batch, units])?;
    let mut out = Vec::new();
    if let Some(dx) = dx {
        out.extend(product(device, "dense_backward_data", dy, w, None, dx, false, true, opts)?);
    }
    out.extend(product(device, "dense_backward_weights", x, dy, None, dw, true, false, opts)?);
    if let Some(db) = db {
        expect_shape(K, "db", db, &[units])?;
        out.extend(gemm::column_sums(device, "dense_backward_bias", dy, batch, units, db)?);
    }
    Ok(out)
}
