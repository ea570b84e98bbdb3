//! `convoy import` and `convoy export`: PyTorch state dicts (safetensors) to convoy models and
//! back, on the host only (no device is opened).

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use convoy::import::{self, Naming};
use convoy::model::Sequential;
use convoy::Result;

use super::check_output;

#[derive(Args, Debug)]
#[command(after_help = "FILE is a PyTorch state dict saved as safetensors; convoy does not read .pth pickles. Convert one \
with: python -c \"import torch, safetensors.torch as s; s.save_file(torch.load('model.pth', map_location='cpu'), 'model.safetensors')\"")]
pub struct ImportArgs {
    /// Whose tensor names FILE uses: torchvision or timm.
    #[arg(long = "from", value_name = "SOURCE")]
    pub from: String,
    /// torchvision: resnet18, resnet34, resnet50, mobilenet_v2; timm: resnet18, resnet34,
    /// resnet50, mobilenetv2_100 (a pretrained tag such as .a1_in1k is allowed).
    #[arg(long)]
    pub model: String,
    /// The PyTorch state dict, as safetensors.
    pub file: PathBuf,
    /// Where to write the convoy model.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A convoy model (a zoo model with a torchvision counterpart: resnet18, resnet34,
    /// resnet50, mobilenet_v2, at any number of classes).
    #[arg(long)]
    pub load: PathBuf,
    /// Whose tensor names to write: torchvision or timm.
    #[arg(long, value_name = "NAMES")]
    pub to: String,
    /// Where to write the state dict (safetensors; PyTorch loads it with
    /// load_state_dict(safetensors.torch.load_file(FILE), strict=False)).
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn run_import(a: ImportArgs) -> Result<()> {
    let naming = Naming::from_name(&a.from)?;
    check_output(&Some(a.out.clone()))?;
    let model = import::import(&a.file, naming, &a.model)?;
    model.save(&a.out)?;
    report(&model, &a.model, &a.out, a.json, "imported")
}

pub fn run_export(a: ExportArgs) -> Result<()> {
    let naming = Naming::from_name(&a.to)?;
    check_output(&Some(a.out.clone()))?;
    let (model, _) = Sequential::load(&a.load)?;
    let name = import::export(&model, naming, &a.out)?;
    report(&model, name, &a.out, a.json, "exported")
}

fn report(model: &Sequential, name: &str, out: &std::path::Path, json: bool, verb: &str) -> Result<()> {
    let layout = model.definition().build_layout()?;
    let classes = model.output_shape()?.first().copied().unwrap_or(0);
    if json {
        println!("{}", json!({ "model": name, "classes": classes, "params": layout.trainable_count(), "image_size": model.input_shape()[0], "out": out.display().to_string() }));
    } else {
        println!("{verb} {name} ({classes} classes, {} parameters) to {}", layout.trainable_count(), out.display());
    }
    Ok(())
}
