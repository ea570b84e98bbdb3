//! Finding NaN and infinity in a model's weights and moving statistics, so that a diverged
//! or corrupted model is named when it is loaded or used instead of quietly producing numbers.

use std::path::Path;

use crate::model::Sequential;
use crate::Result;

/// At most this many tensors are named in a warning; the rest are counted, so a fully
/// diverged ResNet still gets one readable line.
const NAMED: usize = 6;

impl Sequential {
    /// `(tensor name, non-finite values, values)` for each parameter and moving-statistics
    /// tensor holding NaN or infinity, in layout order (names as in the saved file, e.g.
    /// `dense/bias`, `batch_normalization/moving_variance`). Reads the weights to the host.
    pub fn non_finite_tensors(&self) -> Result<Vec<(String, usize, usize)>> {
        let (params, states, _) = self.get_weights()?;
        // Computed here: a loaded model gets its layout only when it is compiled.
        let layout = self.def.build_layout()?;
        let count = |data: &[f32]| data.iter().filter(|v| !v.is_finite()).count();
        let mut out = Vec::new();
        for (entries, data) in [(&layout.params, &params), (&layout.states, &states)] {
            for e in entries {
                let bad = count(&data[e.range()]);
                if bad > 0 {
                    out.push((e.name.clone(), bad, e.spec.len()));
                }
            }
        }
        Ok(out)
    }

    /// Prints one warning line on stderr naming the tensors of [`non_finite_tensors`](Self::non_finite_tensors),
    /// if there are any, with `source` (the file) in front; returns them. Evaluating or
    /// predicting with such a model gives NaN, which is correct but says nothing about why.
    pub fn warn_non_finite(&self, source: &Path) -> Result<Vec<(String, usize, usize)>> {
        let bad = self.non_finite_tensors()?;
        if let Some(line) = non_finite_warning(source, &bad) {
            eprintln!("{line}");
        }
        Ok(bad)
    }
}

/// The warning line for `bad` tensors of the model in `source`, or `None` when all are finite:
/// `warning: model.safetensors: non-finite weights in dense/bias (128 of 128 values)`.
pub fn non_finite_warning(source: &Path, bad: &[(String, usize, usize)]) -> Option<String> {
    if bad.is_empty() {
        return None;
    }
    let mut named: Vec<String> = bad.iter().take(NAMED).map(|(name, n, len)| format!("{name} ({n} of {len} values)")).collect();
    if bad.len() > NAMED {
        named.push(format!("and {} more tensors", bad.len() - NAMED));
    }
    Some(format!("warning: {}: non-finite weights in {}", source.display(), named.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_names_each_tensor_and_caps_the_list() {
        let p = Path::new("m.safetensors");
        assert_eq!(non_finite_warning(p, &[]), None);
        let one = [("dense/bias".to_string(), 128, 128)];
        assert_eq!(non_finite_warning(p, &one).unwrap(), "warning: m.safetensors: non-finite weights in dense/bias (128 of 128 values)");
        let many: Vec<_> = (0..9).map(|i| (format!("conv2d_{i}/kernel"), 1, 27)).collect();
        let line = non_finite_warning(p, &many).unwrap();
        assert!(line.contains("conv2d_5/kernel (1 of 27 values), and 3 more tensors"), "{line}");
        assert!(!line.contains("conv2d_6"), "{line}");
    }
}
