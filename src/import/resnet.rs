//! torchvision's ResNets (and timm's, which name their tensors the same): `conv1`, `bn1`,
//! `layer{1-4}.{block}.conv{1-3}` / `bn{1-3}`, `layer{s}.0.downsample.0` (the projection's
//! 1x1 convolution) and `.1` (its BatchNorm), `fc`.

use super::names::{Cursor, Shapes};
use super::units::{Kind, Unit};
use crate::model::zoo::{self, ResNetWidths};
use crate::model::Sequential;
use crate::Result;

/// The widths of the file's network, from its tensors' shapes (so a narrow network of the
/// same topology imports too), and the model built with them.
pub(crate) fn build(blocks: [usize; 4], bottleneck: bool, shapes: &Shapes, input: &[usize]) -> Result<Sequential> {
    let mut widths = ResNetWidths { stem: shapes.dim("conv1.weight", 4, 0)?, inner: [0; 4], out: [0; 4] };
    for s in 0..4 {
        widths.inner[s] = shapes.dim(&format!("layer{}.0.conv1.weight", s + 1), 4, 0)?;
        widths.out[s] = if bottleneck { shapes.dim(&format!("layer{}.0.conv3.weight", s + 1), 4, 0)? } else { widths.inner[s] };
    }
    let classes = shapes.dim("fc.weight", 2, 0)?;
    Ok(zoo::resnet_with(input, blocks, bottleneck, &widths, classes))
}

/// The module name of each unit, or what in the model is not this ResNet.
pub(crate) fn names(blocks: [usize; 4], bottleneck: bool, units: &[Unit]) -> std::result::Result<Vec<String>, String> {
    let mut c = Cursor::new(units);
    c.take(Kind::Conv, "conv1", false)?;
    c.take(Kind::BatchNorm, "bn1", false)?;
    let convs = if bottleneck { 3 } else { 2 };
    for (s, &n) in blocks.iter().enumerate() {
        for b in 0..n {
            let block = format!("layer{}.{b}", s + 1);
            let layer = c.block_start(&block)?;
            for k in 1..=convs {
                c.take_in(Kind::Conv, &format!("{block}.conv{k}"), layer, false)?;
                c.take_in(Kind::BatchNorm, &format!("{block}.bn{k}"), layer, false)?;
            }
            if c.peek().is_some_and(|u| u.layer == layer) {
                c.take_in(Kind::Conv, &format!("{block}.downsample.0"), layer, true)?;
                c.take_in(Kind::BatchNorm, &format!("{block}.downsample.1"), layer, true)?;
            }
        }
    }
    c.take(Kind::Linear, "fc", false)?;
    c.finish()
}
