//! `convoy summary`: a zoo model's summary without building it on any device.

use clap::Args;
use serde_json::json;

use convoy::model::zoo;
use convoy::Result;

#[derive(Args, Debug)]
#[command(after_help = "FLOPs are 2 x the multiply-adds of the convolutions and dense layers in one image's forward pass \
(BatchNorm, ReLU, pooling and additions are not counted: under 1% on a ResNet). fvcore and ptflops report \
multiply-adds (MACs), half this figure; torchvision's documented GFLOPS (1.81 for resnet18) are multiply-adds too. \
`params` counts as Keras' Total params (trainable + BatchNorm's moving statistics); `trainable_params` is what \
PyTorch's model.parameters() counts.")]
/// `convoy summary`'s arguments.
pub struct SummaryArgs {
    /// A zoo model: resnet20, resnet18_cifar, convnet7 (CIFAR forms), resnet18, resnet34,
    /// resnet50 (torchvision's ImageNet forms), mobilenet_v2 or mlp.
    #[arg(long)]
    pub model: String,
    /// Output classes; 1000 for the ImageNet forms, 10 for the others by default.
    #[arg(long)]
    pub classes: Option<usize>,
    /// Input side in pixels; 224 for the ImageNet forms, 32 for the others by default.
    #[arg(long)]
    pub image_size: Option<usize>,
    #[arg(long)]
    pub json: bool,
}

/// Builds the model on the host only (no device is opened) and prints its summary.
pub fn run(a: SummaryArgs) -> Result<()> {
    let imagenet = !zoo::CIFAR_FORMS.contains(&a.model.as_str()) && a.model != "mlp";
    let classes = a.classes.unwrap_or(if imagenet { 1000 } else { 10 });
    let size = a.image_size.unwrap_or(if imagenet { 224 } else { 32 });
    if classes == 0 || size == 0 {
        convoy::bail!(Config, "--classes and --image-size must be positive (got {classes} and {size})");
    }
    let summary = zoo::by_name(&a.model, &[size, size, 3], classes)?.summarize()?;
    if a.json {
        let mut out = summary.to_json();
        out["model"] = json!(a.model);
        out["classes"] = json!(classes);
        println!("{out}");
    } else {
        print!("{}", summary.table());
    }
    Ok(())
}
