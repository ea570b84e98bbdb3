//! Starting from pretrained weights: PyTorch state dicts (torchvision's or timm's names, saved
//! as safetensors) into convoy models, and convoy models back out to them.
//!
//! ```no_run
//! # fn main() -> convoy::Result<()> {
//! // torch: safetensors.torch.save_file(torchvision.models.resnet50(weights="DEFAULT").state_dict(), "r50.safetensors")
//! let model = convoy::import::torchvision("r50.safetensors", "resnet50")?;
//! model.save("resnet50.safetensors")?; // what `convoy train --init` and `evaluate --load` read
//! # Ok(()) }
//! ```
//!
//! Every tensor is mapped by name and permuted from PyTorch's layout into convoy's
//! (convolution kernels `[filters, in, kh, kw]` -> `[kh, kw, in, filters]`, depthwise
//! `[c, 1, kh, kw]` -> `[kh, kw, c, 1]`, linear `[out, in]` -> `[in, out]`); BatchNorm's
//! running statistics are copied, its epsilon is PyTorch's 1e-5 and its momentum Keras'
//! `1 - 0.1`. `num_batches_tracked` is ignored. F16, BF16 and F64 tensors become f32. A missing,
//! extra, misshapen or non-float tensor is one error naming it and the file. The widths are read
//! from the tensors' shapes, the depth from the model's name, so a narrow network of the same
//! topology (the tests' fixtures) imports through the same code as the real one.
//!
//! The model carries torchvision's preprocessing: 224 px input (validation images resized to
//! 256 and centre-cropped, see [`crate::data::resize_size`]) and ImageNet's mean and std, so
//! `evaluate`, `predict` and `train --init` use it with no flags.
//!
//! Export is a permutation of the same tensors, so import -> export gives every f32 tensor
//! back bit for bit; PyTorch loads the file with `model.load_state_dict(load_file(FILE),
//! strict=False)` (only `num_batches_tracked` is absent).

mod mobilenet_v2;
mod names;
mod resnet;
mod tensors;
mod units;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use serde_json::Value;

use crate::limits::MAX_MODEL_FILE_BYTES;
use crate::model::Sequential;
use crate::{bail, Error, Result};
use names::Shapes;
use units::{pairs, units, Pair};

/// torchvision's ImageNet normalisation (`transforms.Normalize`), on the 0..1 scale.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// See [`IMAGENET_MEAN`].
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];
/// The input side torchvision's classification weights are evaluated at.
pub const IMAGENET_SIZE: usize = 224;

/// Whose tensor names a file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `torchvision.models`: `resnet18`, `resnet34`, `resnet50`, `mobilenet_v2`.
    Torchvision,
    /// timm (`timm.create_model`): `resnet18`, `resnet34`, `resnet50`, `mobilenetv2_100`, with or
    /// without a pretrained tag (`resnet50.a1_in1k`).
    Timm,
}

impl Naming {
    /// `torchvision` or `timm`, as `--from` and `--to` take them.
    pub fn from_name(name: &str) -> Result<Naming> {
        match name {
            "torchvision" => Ok(Naming::Torchvision),
            "timm" => Ok(Naming::Timm),
            other => bail!(Config, "unknown source `{other}` (expected torchvision or timm)"),
        }
    }
    /// The name `from_name` takes.
    pub fn name(self) -> &'static str {
        match self {
            Naming::Torchvision => "torchvision",
            Naming::Timm => "timm",
        }
    }
    /// The models whose names it knows, in its own spelling.
    pub fn models(self) -> &'static [&'static str] {
        match self {
            Naming::Torchvision => &["resnet18", "resnet34", "resnet50", "mobilenet_v2"],
            Naming::Timm => &["resnet18", "resnet34", "resnet50", "mobilenetv2_100"],
        }
    }
}

/// The topologies the names describe.
#[derive(Clone, Copy, Debug)]
enum Arch {
    ResNet { blocks: [usize; 4], bottleneck: bool },
    MobileNetV2,
}

impl Arch {
    fn of(naming: Naming, model: &str) -> Result<Arch> {
        // timm's pretrained tags (`resnet50.a1_in1k`) name weights, not another network.
        let base = if naming == Naming::Timm { model.split('.').next().unwrap_or(model) } else { model };
        if !naming.models().contains(&base) {
            bail!(Config, "unknown {} model `{model}` (expected one of {})", naming.name(), naming.models().join(", "));
        }
        Ok(match base {
            "resnet18" => Arch::ResNet { blocks: [2, 2, 2, 2], bottleneck: false },
            "resnet34" => Arch::ResNet { blocks: [3, 4, 6, 3], bottleneck: false },
            "resnet50" => Arch::ResNet { blocks: [3, 4, 6, 3], bottleneck: true },
            _ => Arch::MobileNetV2,
        })
    }

    fn build(self, naming: Naming, shapes: &Shapes, input: &[usize]) -> Result<Sequential> {
        match self {
            Arch::ResNet { blocks, bottleneck } => resnet::build(blocks, bottleneck, shapes, input),
            Arch::MobileNetV2 => mobilenet_v2::build(naming, shapes, input),
        }
    }

    fn names(self, naming: Naming, units: &[units::Unit]) -> std::result::Result<Vec<String>, String> {
        match self {
            Arch::ResNet { blocks, bottleneck } => resnet::names(blocks, bottleneck, units),
            Arch::MobileNetV2 => mobilenet_v2::names(naming, units),
        }
    }
}

/// [`import`] of torchvision's names: `convoy::import::torchvision("r50.safetensors", "resnet50")`.
pub fn torchvision(path: impl AsRef<Path>, model: &str) -> Result<Sequential> {
    import(path, Naming::Torchvision, model)
}

/// [`import`] of timm's names: `convoy::import::timm("r50.safetensors", "resnet50.a1_in1k")`.
pub fn timm(path: impl AsRef<Path>, model: &str) -> Result<Sequential> {
    import(path, Naming::Timm, model)
}

/// The model `model` (in `naming`'s spelling) with the weights of the PyTorch state dict saved
/// as safetensors at `path`, at [`IMAGENET_SIZE`] with ImageNet's normalisation; not compiled
/// (`compile` puts the weights on the devices, [`Sequential::save`] writes them as they are).
pub fn import(path: impl AsRef<Path>, naming: Naming, model: &str) -> Result<Sequential> {
    let path = path.as_ref();
    let arch = Arch::of(naming, model)?;
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    if len > MAX_MODEL_FILE_BYTES {
        return Err(Error::format(path, format!("file size {len} bytes is above the cap of {MAX_MODEL_FILE_BYTES} for a model")));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| Error::format(path, format!("not a complete safetensors file ({e})")))?;
    let file: HashMap<String, TensorView> = st.tensors().into_iter().collect();
    let what = format!("{}'s {model}", naming.name());
    let shapes = Shapes { shapes: file.iter().map(|(k, t)| (k.clone(), t.shape().to_vec())).collect(), path, what: what.clone() };
    let mut net = arch.build(naming, &shapes, &[IMAGENET_SIZE, IMAGENET_SIZE, 3]).map_err(|e| match e {
        Error::Format { .. } => e,
        other => Error::format(path, format!("its widths do not make {what}: {other}")),
    })?;
    let layout = net.def.build_layout()?;
    let units = units(&net, &layout)?;
    let names = arch.names(naming, &units).map_err(|e| Error::Config(format!("{what}: {e}")))?;
    let (mut params, mut states) = (vec![0.0f32; layout.param_len], vec![0.0f32; layout.state_len]);
    let mut missing = Vec::new();
    for pair in pairs(&units, &names) {
        let entry = if pair.state { &layout.states[pair.index] } else { &layout.params[pair.index] };
        let Some(t) = file.get(&pair.torch) else {
            missing.push(pair.torch);
            continue;
        };
        let expected = pair.torch_shape(&entry.spec.shape);
        if t.shape() != expected {
            return Err(Error::format(path, format!("tensor {} has shape {:?}, expected {expected:?} for {what}", pair.torch, t.shape())));
        }
        let values = tensors::widen(t).ok_or_else(|| Error::format(path, format!("tensor {} is {:?}, expected floats (F32, F16, BF16 or F64)", pair.torch, t.dtype())))?;
        let out = if pair.state { &mut states[entry.range()] } else { &mut params[entry.range()] };
        for (o, &k) in out.iter_mut().zip(&pair.permutation(&entry.spec.shape)) {
            *o = values[k];
        }
    }
    if let Some(first) = missing.first() {
        return Err(Error::format(path, format!("missing tensor {first}{} of {what}", more(missing.len()))));
    }
    let used: HashSet<String> = pairs(&units, &names).into_iter().map(|p| p.torch).collect();
    let mut extra: Vec<&String> = file.keys().filter(|k| !used.contains(*k) && !k.ends_with(".num_batches_tracked")).collect();
    extra.sort();
    if let Some(first) = extra.first() {
        return Err(Error::format(path, format!("unexpected tensor {first}{}: not part of {what}", more(extra.len()))));
    }
    net.set_normalization(IMAGENET_MEAN.to_vec(), IMAGENET_STD.to_vec())?;
    net.pending_weights = Some((params, states, Vec::new()));
    Ok(net)
}

/// ` (and N more)` after the first of `n` names, or nothing.
fn more(n: usize) -> String {
    if n > 1 { format!(" (and {} more)", n - 1) } else { String::new() }
}

/// Writes `model`'s weights as a PyTorch state dict under `naming`'s names (F32 safetensors, no
/// `num_batches_tracked`), when it is one of the models `naming` knows (at any width and
/// number of classes); returns that model's name. Anything else is refused. A model never
/// compiled nor loaded exports its initial weights (seed 0).
pub fn export(model: &Sequential, naming: Naming, path: impl AsRef<Path>) -> Result<&'static str> {
    let path = path.as_ref();
    let layout = model.def.build_layout()?;
    let units = units(model, &layout).map_err(|e| Error::Config(format!("the model has no {} counterpart: {e}", naming.name())))?;
    let mine = strip_trainable(&model.architecture()["layers"]);
    let mut found = None;
    let mut why = Vec::new();
    for &name in naming.models() {
        let arch = Arch::of(naming, name)?;
        let names = match arch.names(naming, &units) {
            Ok(n) => n,
            Err(e) => {
                why.push(format!("{name}: {e}"));
                continue;
            }
        };
        let pairs = pairs(&units, &names);
        let entry = |p: &Pair| if p.state { &layout.states[p.index] } else { &layout.params[p.index] };
        let shapes = Shapes { shapes: pairs.iter().map(|p| (p.torch.clone(), p.torch_shape(&entry(p).spec.shape))).collect(), path, what: name.to_string() };
        // Same names in the same order is not yet the same network: strides, kernels and
        // paddings must be too, so the network those widths make must be this one.
        match arch.build(naming, &shapes, model.input_shape()) {
            Ok(built) if strip_trainable(&built.architecture()["layers"]) == mine => {
                found = Some((name, pairs));
                break;
            }
            Ok(_) => why.push(format!("{name}: its layers' settings differ")),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    let Some((name, pairs)) = found else {
        bail!(Config, "the model is none of the {} models convoy can export ({}): {}", naming.name(), naming.models().join(", "), why.first().map_or("", String::as_str));
    };
    // A model never compiled has its initial weights, as a built Keras model's get_weights.
    let (params, states) = match model.get_weights() {
        Ok((p, s, _)) => (p, s),
        Err(_) if !model.is_compiled() => layout.initial_values(0),
        Err(e) => return Err(e),
    };
    let mut data: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for p in &pairs {
        let (e, from) = if p.state { (&layout.states[p.index], &states) } else { (&layout.params[p.index], &params) };
        let mut out = vec![0.0f32; e.spec.len()];
        for (v, &k) in from[e.range()].iter().zip(&p.permutation(&e.spec.shape)) {
            out[k] = *v;
        }
        data.push((p.torch.clone(), p.torch_shape(&e.spec.shape), out));
    }
    let views: Vec<(String, TensorView)> = data
        .iter()
        .map(|(n, shape, v)| TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(v)).map(|t| (n.clone(), t)).map_err(|e| Error::Config(format!("tensor {n}: {e}"))))
        .collect::<Result<_>>()?;
    // safetensors.torch writes this; PyTorch's readers accept it.
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let bytes = safetensors::tensor::serialize(views, Some(meta)).map_err(|e| Error::Config(format!("serialising {}: {e}", path.display())))?;
    crate::model::write_atomic(path, &bytes)?;
    Ok(name)
}

/// A layer list without Keras' `trainable` flags, which do not change the network.
fn strip_trainable(layers: &Value) -> Value {
    let mut v = layers.clone();
    if let Some(list) = v.as_array_mut() {
        for l in list {
            if let Some(c) = l.get_mut("config").and_then(Value::as_object_mut) {
                c.remove("trainable");
            }
        }
    }
    v
}
