//! MobileNetV2 under torchvision's names (`features.0.0` the stem, `features.{1-17}.conv.*` the
//! inverted residual blocks, `features.18.0` the last 1x1 convolution, `classifier.1`) and
//! timm's (`mobilenetv2_100`: `conv_stem`, `bn1`, `blocks.{stage}.{block}.conv_pw` / `conv_dw`
//! / `conv_pwl`, `conv_head`, `bn2`, `classifier`).

use super::names::{Cursor, Shapes};
use super::units::{Kind, Unit};
use super::Naming;
use crate::model::zoo::{self, MobileNetV2Widths, MOBILENET_V2_STAGES};
use crate::model::Sequential;
use crate::Result;

/// The PyTorch module of a block's part (`k` from 0, the first block having no expansion).
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Expand,
    ExpandBn,
    Depthwise,
    DepthwiseBn,
    Project,
    ProjectBn,
}

/// Block `k`'s module name for `part`.
fn block_name(naming: Naming, k: usize, part: Part) -> String {
    match naming {
        Naming::Torchvision => {
            // torchvision's first block is `conv.0` (depthwise, in a Conv2dNormActivation),
            // `conv.1` (projection), `conv.2` (its BatchNorm); the others have the expansion
            // in front.
            let at = if k == 0 { 0 } else { 1 };
            let local = match part {
                Part::Expand => "conv.0.0".to_string(),
                Part::ExpandBn => "conv.0.1".to_string(),
                Part::Depthwise => format!("conv.{}.0", at),
                Part::DepthwiseBn => format!("conv.{}.1", at),
                Part::Project => format!("conv.{}", at + 1),
                Part::ProjectBn => format!("conv.{}", at + 2),
            };
            format!("features.{}.{local}", k + 1)
        }
        Naming::Timm => {
            let (stage, j) = stage_of(k);
            // timm's first block is a DepthwiseSeparable: conv_dw, bn1, conv_pw, bn2.
            let local = match (k, part) {
                (0, Part::Depthwise) => "conv_dw",
                (0, Part::DepthwiseBn) => "bn1",
                (0, Part::Project) => "conv_pw",
                (0, Part::ProjectBn) => "bn2",
                (_, Part::Expand) => "conv_pw",
                (_, Part::ExpandBn) => "bn1",
                (_, Part::Depthwise) => "conv_dw",
                (_, Part::DepthwiseBn) => "bn2",
                (_, Part::Project) => "conv_pwl",
                (_, Part::ProjectBn) => "bn3",
            };
            format!("blocks.{stage}.{j}.{local}")
        }
    }
}

/// The stage of block `k` and its place in it.
fn stage_of(k: usize) -> (usize, usize) {
    let mut first = 0;
    for (s, &(_, _, n, _)) in MOBILENET_V2_STAGES.iter().enumerate() {
        if k < first + n {
            return (s, k - first);
        }
        first += n;
    }
    (MOBILENET_V2_STAGES.len(), 0)
}

/// Blocks in the network: 17.
fn block_count() -> usize {
    MOBILENET_V2_STAGES.iter().map(|s| s.2).sum()
}

/// Names of the stem, the last convolution and the classifier (and their BatchNorms).
fn fixed(naming: Naming) -> [&'static str; 5] {
    match naming {
        Naming::Torchvision => ["features.0.0", "features.0.1", "features.18.0", "features.18.1", "classifier.1"],
        Naming::Timm => ["conv_stem", "bn1", "conv_head", "bn2", "classifier"],
    }
}

/// The widths of the file's network from its tensors' shapes, and the model built with them.
pub(crate) fn build(naming: Naming, shapes: &Shapes, input: &[usize]) -> Result<Sequential> {
    let [stem, _, head, _, classifier] = fixed(naming);
    let stem = shapes.dim(&format!("{stem}.weight"), 4, 0)?;
    let mut blocks = Vec::new();
    let mut c = stem;
    for k in 0..block_count() {
        let hidden = if k == 0 { c } else { shapes.dim(&format!("{}.weight", block_name(naming, k, Part::Expand)), 4, 0)? };
        let out = shapes.dim(&format!("{}.weight", block_name(naming, k, Part::Project)), 4, 0)?;
        blocks.push((hidden, out));
        c = out;
    }
    let last = shapes.dim(&format!("{head}.weight"), 4, 0)?;
    let classes = shapes.dim(&format!("{classifier}.weight"), 2, 0)?;
    zoo::mobilenet_v2_with(input, &MobileNetV2Widths { stem, blocks, last }, classes)
}

/// The module name of each unit, or what in the model is not MobileNetV2.
pub(crate) fn names(naming: Naming, units: &[Unit]) -> std::result::Result<Vec<String>, String> {
    let [stem, stem_bn, head, head_bn, classifier] = fixed(naming);
    let mut c = Cursor::new(units);
    c.take(Kind::Conv, stem, false)?;
    c.take(Kind::BatchNorm, stem_bn, false)?;
    for k in 0..block_count() {
        let parts: &[(Kind, Part)] = if k == 0 {
            &[(Kind::Depthwise, Part::Depthwise), (Kind::BatchNorm, Part::DepthwiseBn), (Kind::Conv, Part::Project), (Kind::BatchNorm, Part::ProjectBn)]
        } else {
            &[
                (Kind::Conv, Part::Expand),
                (Kind::BatchNorm, Part::ExpandBn),
                (Kind::Depthwise, Part::Depthwise),
                (Kind::BatchNorm, Part::DepthwiseBn),
                (Kind::Conv, Part::Project),
                (Kind::BatchNorm, Part::ProjectBn),
            ]
        };
        for &(kind, part) in parts {
            c.take(kind, &block_name(naming, k, part), false)?;
        }
    }
    c.take(Kind::Conv, head, false)?;
    c.take(Kind::BatchNorm, head_bn, false)?;
    c.take(Kind::Linear, classifier, false)?;
    c.finish()
}
