//! The benchmark models of design.md (identical to `shared/bench/torch_reference.py`) and a
//! small MLP. Convolutions are 3x3 with PyTorch's symmetric padding 1 and no bias, each
//! followed by BatchNorm.

use crate::layers::*;
use crate::model::Sequential;
use crate::{bail, Result};

fn conv_bn(filters: usize, kernel: usize, stride: usize) -> Vec<Box<dyn Layer>> {
    let pad = kernel / 2;
    vec![
        Box::new(Conv2D::new(filters, kernel).strides(stride).padding(Padding::Explicit(pad, pad)).use_bias(false).kernel_initializer("he_normal")),
        Box::new(BatchNormalization::new().momentum(0.9).epsilon(1e-5)),
    ]
}

/// A basic block: conv-BN-ReLU-conv-BN plus the shortcut (a 1x1 projection + BN when the
/// shape changes), then ReLU.
fn basic_block(model: &mut Sequential, in_c: usize, filters: usize, stride: usize) {
    let mut main = conv_bn(filters, 3, stride);
    main.push(Box::new(ReLU::new()));
    main.extend(conv_bn(filters, 3, 1));
    let shortcut = if stride != 1 || in_c != filters { conv_bn(filters, 1, stride) } else { Vec::new() };
    model.add(Residual::new(main, shortcut));
    model.add(ReLU::new());
}

fn resnet(input: &[usize], stem: usize, stages: &[usize], blocks: usize, classes: usize) -> Sequential {
    let mut m = Sequential::new(input);
    for l in conv_bn(stem, 3, 1) {
        m.add_boxed(l);
    }
    m.add(ReLU::new());
    let mut c = stem;
    for (s, &filters) in stages.iter().enumerate() {
        for b in 0..blocks {
            basic_block(&mut m, c, filters, if s > 0 && b == 0 { 2 } else { 1 });
            c = filters;
        }
    }
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(classes));
    m
}

/// ResNet-20 for CIFAR (He et al. 2016): about 0.27 M parameters.
pub fn resnet20(input: &[usize], classes: usize) -> Sequential {
    resnet(input, 16, &[16, 32, 64], 3, classes)
}

/// ResNet-18 in its CIFAR form (3x3 stem, no max pool): about 11.2 M parameters.
pub fn resnet18_cifar(input: &[usize], classes: usize) -> Sequential {
    resnet(input, 64, &[64, 128, 256, 512], 2, classes)
}

/// Seven layers: two conv pairs with max pooling, one more conv, pooling, two dense.
pub fn convnet7(input: &[usize], classes: usize) -> Sequential {
    let mut m = Sequential::new(input);
    for (filters, pool) in [(32, false), (32, true), (64, false), (64, true), (128, false)] {
        for l in conv_bn(filters, 3, 1) {
            m.add_boxed(l);
        }
        m.add(ReLU::new());
        if pool {
            m.add(MaxPool2D::new(2));
        }
    }
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(128));
    m.add(ReLU::new());
    m.add(Dense::new(classes));
    m
}

/// A multi-layer perceptron: Flatten, Dense 256 + ReLU, Dense 128 + ReLU, Dense `classes`.
pub fn mlp(input: &[usize], classes: usize) -> Sequential {
    let mut m = Sequential::new(input);
    m.add(Flatten::new());
    m.add(Dense::new(256));
    m.add(ReLU::new());
    m.add(Dense::new(128));
    m.add(ReLU::new());
    m.add(Dense::new(classes));
    m
}

pub const MODELS: &[&str] = &["resnet20", "resnet18_cifar", "convnet7", "mlp"];

pub fn by_name(name: &str, input: &[usize], classes: usize) -> Result<Sequential> {
    Ok(match name {
        "resnet20" => resnet20(input, classes),
        "resnet18_cifar" => resnet18_cifar(input, classes),
        "convnet7" => convnet7(input, classes),
        "mlp" => mlp(input, classes),
        other => bail!(Config, "unknown model `{other}` (expected one of {})", MODELS.join(", ")),
    })
}
