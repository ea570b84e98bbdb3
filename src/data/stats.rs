//! Per-channel statistics for input normalisation.

use rayon::prelude::*;

use super::Dataset;
use crate::Result;

/// Per-channel mean and standard deviation of x / 255 over at most `max_samples` samples spread
/// evenly over the dataset; the std is floored at 1e-3 so that dividing by it stays finite on a
/// constant channel.
pub fn channel_stats(ds: &dyn Dataset, max_samples: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    let len = ds.len();
    let n = len.min(max_samples);
    if n == 0 {
        crate::bail!(
            Config,
            "channel statistics need at least one sample ({}: {len} samples, max_samples {max_samples})",
            ds.source()
        );
    }
    let sample = super::checked_sample_bytes(ds)?;
    let channels = ds.image_shape()[2];
    // (sum, sum of squares) per channel, in f64: 50,000 CIFAR images are 150 M terms.
    let (sum, sq) = (0..n)
        .into_par_iter()
        .map_init(
            || vec![0u8; sample],
            |buf, k| -> Result<(Vec<f64>, Vec<f64>)> {
                ds.load(k * len / n, buf)?;
                let (mut s, mut q) = (vec![0u64; channels], vec![0u64; channels]);
                for px in buf.chunks_exact(channels) {
                    for (c, &x) in px.iter().enumerate() {
                        s[c] += x as u64;
                        q[c] += (x as u64) * (x as u64);
                    }
                }
                Ok((s.into_iter().map(|v| v as f64).collect(), q.into_iter().map(|v| v as f64).collect()))
            },
        )
        .try_reduce(
            || (vec![0.0; channels], vec![0.0; channels]),
            |(mut s, mut q), (s2, q2)| {
                s.iter_mut().zip(s2).for_each(|(a, b)| *a += b);
                q.iter_mut().zip(q2).for_each(|(a, b)| *a += b);
                Ok((s, q))
            },
        )?;
    let count = (n * ds.image_shape()[0] * ds.image_shape()[1]) as f64;
    let mean: Vec<f64> = sum.iter().map(|s| s / count / 255.0).collect();
    let std = sq
        .iter()
        .zip(&mean)
        .map(|(q, m)| ((q / count / (255.0 * 255.0) - m * m).max(0.0).sqrt() as f32).max(1e-3))
        .collect();
    Ok((mean.into_iter().map(|m| m as f32).collect(), std))
}
