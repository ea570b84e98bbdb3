//! The benchmark models of design.md (identical to `shared/bench/torch_reference.py`): the
//! CIFAR forms (`resnet20`, `resnet18_cifar`, `convnet7`: a 3x3 stem, no pooling before the
//! stages), torchvision's ImageNet ResNets (`resnet18`, `resnet34`, `resnet50`) layer for
//! layer, MobileNetV2 as torchvision's (built with the functional API), and a small MLP. Convolutions have PyTorch's symmetric padding `kernel / 2` and no
//! bias, each followed by BatchNorm (momentum 0.9, epsilon 1e-5: PyTorch's 0.1 and 1e-5).

use crate::kernels::pool::PoolPadding;
use crate::layers::*;
use crate::model::{Call, Sequential, SymbolicTensor};
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

/// torchvision's ImageNet stem: 7x7 stride-2 conv 3 -> `width` (64; padding 3) + BN + ReLU, then a 3x3
/// stride-2 max pool with padding 1, so the stages start at a quarter of the input side.
fn imagenet_stem(input: &[usize], width: usize) -> Sequential {
    let mut m = Sequential::new(input);
    for l in conv_bn(width, 7, 2) {
        m.add_boxed(l);
    }
    m.add(ReLU::new());
    m.add(MaxPool2D::new(3).strides(2).padding(PoolPadding::Explicit(1, 1)));
    m
}

/// torchvision's Bottleneck (v1.5: the stride on the 3x3): 1x1 -> 3x3 of `width` -> 1x1 to
/// `out_c` (4x `width` in torchvision's), each + BN, ReLU between; a 1x1 projection + BN wherever the shape changes
/// (the first block of every stage, stage 1 included since 64 -> 256 channels); then ReLU.
fn bottleneck_block(model: &mut Sequential, in_c: usize, width: usize, out_c: usize, stride: usize) {
    let mut main = conv_bn(width, 1, 1);
    main.push(Box::new(ReLU::new()));
    main.extend(conv_bn(width, 3, stride));
    main.push(Box::new(ReLU::new()));
    main.extend(conv_bn(out_c, 1, 1));
    let shortcut = if stride != 1 || in_c != out_c { conv_bn(out_c, 1, stride) } else { Vec::new() };
    model.add(Residual::new(main, shortcut));
    model.add(ReLU::new());
}

/// The channel counts of an ImageNet ResNet: torchvision's ([`ResNetWidths::torchvision`]),
/// or those of a file being imported, which [`crate::import`] reads from its tensors' shapes
/// (so that a narrow network of the same topology, as the tests' fixtures, imports through the
/// same code as the real one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResNetWidths {
    /// The stem convolution's filters (64).
    pub stem: usize,
    /// Per stage, the filters of the block's 3x3 convolution (64, 128, 256, 512).
    pub inner: [usize; 4],
    /// Per stage, the block's output channels: `inner` for basic blocks, 4x `inner` for
    /// torchvision's bottlenecks.
    pub out: [usize; 4],
}

impl ResNetWidths {
    /// torchvision's: a stem of 64, stages of 64, 128, 256, 512, times 4 at the output of a
    /// bottleneck.
    pub fn torchvision(bottleneck: bool) -> Self {
        let inner = [64, 128, 256, 512];
        ResNetWidths { stem: 64, inner, out: inner.map(|c| if bottleneck { 4 * c } else { c }) }
    }
}

/// An ImageNet ResNet of `blocks` per stage: the stem, four stages with stride 2 at the start
/// of stages 2-4, global average pool, dense with bias. A basic block's output is its `inner`
/// width (`widths.out` is not read).
pub fn resnet_with(input: &[usize], blocks: [usize; 4], bottleneck: bool, widths: &ResNetWidths, classes: usize) -> Sequential {
    let mut m = imagenet_stem(input, widths.stem);
    let mut c = widths.stem;
    for (s, &n) in blocks.iter().enumerate() {
        for b in 0..n {
            let stride = if s > 0 && b == 0 { 2 } else { 1 };
            if bottleneck {
                bottleneck_block(&mut m, c, widths.inner[s], widths.out[s], stride);
                c = widths.out[s];
            } else {
                basic_block(&mut m, c, widths.inner[s], stride);
                c = widths.inner[s];
            }
        }
    }
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(classes));
    m
}

fn resnet_imagenet(input: &[usize], blocks: [usize; 4], bottleneck: bool, classes: usize) -> Sequential {
    resnet_with(input, blocks, bottleneck, &ResNetWidths::torchvision(bottleneck), classes)
}

/// torchvision's `resnet18`: basic blocks [2, 2, 2, 2]; 11,689,512 parameters at 1000 classes.
pub fn resnet18(input: &[usize], classes: usize) -> Sequential {
    resnet_imagenet(input, [2, 2, 2, 2], false, classes)
}

/// torchvision's `resnet34`: basic blocks [3, 4, 6, 3]; 21,797,672 parameters at 1000 classes.
pub fn resnet34(input: &[usize], classes: usize) -> Sequential {
    resnet_imagenet(input, [3, 4, 6, 3], false, classes)
}

/// torchvision's `resnet50`: bottleneck blocks [3, 4, 6, 3]; 25,557,032 parameters at 1000
/// classes.
pub fn resnet50(input: &[usize], classes: usize) -> Sequential {
    resnet_imagenet(input, [3, 4, 6, 3], true, classes)
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

/// A convolution of torchvision's MobileNetV2 (`Conv2dNormActivation`): no bias, padding
/// `kernel / 2`, BatchNorm, and ReLU6 unless it is a linear projection.
fn mobile_conv(x: &SymbolicTensor, filters: usize, kernel: usize, stride: usize, relu6: bool) -> Result<SymbolicTensor> {
    let pad = kernel / 2;
    let x = Conv2D::new(filters, kernel).strides(stride).padding(Padding::Explicit(pad, pad)).use_bias(false).kernel_initializer("he_normal").call(x)?;
    mobile_bn(&x, relu6)
}

fn mobile_bn(x: &SymbolicTensor, relu6: bool) -> Result<SymbolicTensor> {
    let x = BatchNormalization::new().momentum(0.9).epsilon(1e-5).call(x)?;
    if relu6 { ReLU::new().max_value(6.0).call(&x) } else { Ok(x) }
}

/// MobileNetV2's stages: (expansion t, output channels c, blocks n, first stride s), the
/// paper's Table 2.
pub const MOBILENET_V2_STAGES: [(usize, usize, usize, usize); 7] = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)];

/// The channel counts of a MobileNetV2: torchvision's ([`MobileNetV2Widths::torchvision`]), or
/// those of a file being imported (see [`ResNetWidths`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MobileNetV2Widths {
    /// The stem convolution's filters (32).
    pub stem: usize,
    /// Per inverted residual block (17): the expanded width its depthwise convolution sees
    /// (the block's input width for the first, which has no expansion) and its output width.
    pub blocks: Vec<(usize, usize)>,
    /// The last 1x1 convolution's filters (1280).
    pub last: usize,
}

impl MobileNetV2Widths {
    /// torchvision's at `width_mult` 1.
    pub fn torchvision() -> Self {
        let (mut blocks, mut c) = (Vec::new(), 32);
        for (t, out, n, _) in MOBILENET_V2_STAGES {
            for _ in 0..n {
                blocks.push((c * t, out));
                c = out;
            }
        }
        MobileNetV2Widths { stem: 32, blocks, last: 1280 }
    }
}

/// MobileNetV2 (Sandler et al. 2018) as torchvision builds it, with the functional API: a
/// 3x3 stride-2 stem of 32, seventeen inverted residual blocks (a 1x1 expansion by `t` unless
/// `t` is 1, a 3x3 depthwise convolution with the stride, a linear 1x1 projection, and the
/// input added back when the stride is 1 and the width unchanged), a 1x1 convolution to 1280,
/// global average pooling and the classifier (torchvision's dropout before it is left out).
/// 3,504,872 trainable parameters at 1000 classes, as torchvision's.
pub fn mobilenet_v2(input: &[usize], classes: usize) -> Result<Sequential> {
    mobilenet_v2_with(input, &MobileNetV2Widths::torchvision(), classes)
}

/// [`mobilenet_v2`] with other widths; the first block has no expansion whatever its width.
pub fn mobilenet_v2_with(input: &[usize], widths: &MobileNetV2Widths, classes: usize) -> Result<Sequential> {
    let strides: Vec<usize> = MOBILENET_V2_STAGES.iter().flat_map(|&(_, _, n, s)| (0..n).map(move |b| if b == 0 { s } else { 1 })).collect();
    if widths.blocks.len() != strides.len() {
        bail!(Config, "MobileNetV2 has {} blocks, got widths for {}", strides.len(), widths.blocks.len());
    }
    let inputs = crate::model::input(input);
    let mut x = mobile_conv(&inputs, widths.stem, 3, 2, true)?;
    let mut c = widths.stem;
    for (b, (&(hidden, out), &stride)) in widths.blocks.iter().zip(&strides).enumerate() {
        let mut y = if b == 0 { x.clone() } else { mobile_conv(&x, hidden, 1, 1, true)? };
        y = DepthwiseConv2D::new(3).strides(stride).padding(Padding::Explicit(1, 1)).use_bias(false).depthwise_initializer("he_normal").call(&y)?;
        y = mobile_bn(&y, true)?;
        y = mobile_conv(&y, out, 1, 1, false)?;
        x = if stride == 1 && c == out { Add::new().call_many(&[&x, &y])? } else { y };
        c = out;
    }
    let x = mobile_conv(&x, widths.last, 1, 1, true)?;
    let x = GlobalAveragePooling2D::new().call(&x)?;
    let out = Dense::new(classes).call(&x)?;
    Sequential::functional(&inputs, &out)
}

/// The names [`by_name`] builds.
pub const MODELS: &[&str] = &["resnet20", "resnet18_cifar", "convnet7", "resnet18", "resnet34", "resnet50", "mobilenet_v2", "mlp"];

/// The models built for 32 px images: a 3x3 stride-1 stem and no pooling before the stages.
pub const CIFAR_FORMS: &[&str] = &["resnet20", "resnet18_cifar", "convnet7"];

/// A one-line warning when a CIFAR form is given images above 64 px, `None` otherwise: its
/// 3x3 stride-1 stem without pooling keeps the full side through the first stage where the
/// ImageNet form's stride-2 conv and stride-2 pool divide it by 4, so every activation (and
/// the memory and FLOPs with it) is 16x the ImageNet form's at the same size, and 49x the
/// model's own at the 32 px it was built for when the images are 224 px.
pub fn cifar_form_warning(name: &str, image_size: usize) -> Option<String> {
    (CIFAR_FORMS.contains(&name) && image_size > 64).then(|| {
        format!(
            "warning: {name} is a CIFAR form (3x3 stem, no pooling): at {image_size} px its activations are 16x those of the ImageNet form (stride-2 stem and pool) and {:.0}x its own at 32 px; resnet18, resnet34 and resnet50 are built for this size",
            (image_size as f64 / 32.0).powi(2)
        )
    })
}

/// The zoo model `name` (see [`MODELS`]) for `input` (`[height, width, channels]`) images and
/// `classes` outputs.
pub fn by_name(name: &str, input: &[usize], classes: usize) -> Result<Sequential> {
    Ok(match name {
        "resnet20" => resnet20(input, classes),
        "resnet18_cifar" => resnet18_cifar(input, classes),
        "convnet7" => convnet7(input, classes),
        "resnet18" => resnet18(input, classes),
        "resnet34" => resnet34(input, classes),
        "resnet50" => resnet50(input, classes),
        "mobilenet_v2" => mobilenet_v2(input, classes)?,
        "mlp" => mlp(input, classes),
        other => bail!(Config, "unknown model `{other}` (expected one of {})", MODELS.join(", ")),
    })
}
