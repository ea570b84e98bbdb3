//! Rebuilding layers from their saved `{class_name, config}` (Keras' `from_config`).
//!
//! Every size read here is an integer checked against a cap in [`crate::limits`] before any
//! layer is built from it, so that a corrupt file reports the field instead of aborting.

use serde_json::Value;

use crate::kernels::pool::PoolPadding;
use crate::layers::*;
use crate::limits::{MAX_NESTING, MAX_SIDE, MAX_UNITS};
use crate::{bail, Result};

/// A non-negative integer `key` of `class`'s config, at most `cap`. Integral floats (`1e3`)
/// are accepted, as JSON writers may produce them.
fn size(class: &str, v: &Value, key: &str, cap: usize) -> Result<usize> {
    let raw = v.get(key);
    let n = match raw {
        Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => Some(u as f64),
            (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 => Some(f),
            _ => None,
        },
        _ => None,
    };
    match n {
        Some(n) if n <= cap as f64 => Ok(n as usize),
        Some(_) => bail!(Config, "{class} `{key}` is {}, above the cap of {cap}", raw.unwrap()),
        None => bail!(Config, "{class} config needs `{key}` as a non-negative integer, got {raw:?}"),
    }
}

/// Two integers `key` (height, width) of `class`'s config, each at most [`MAX_SIDE`].
fn pair(class: &str, v: &Value, key: &str) -> Result<(usize, usize)> {
    match v.get(key).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>()) {
        Some(a) if a.len() == 2 => {
            if let Some(&big) = a.iter().find(|&&x| x > MAX_SIDE as u64) {
                bail!(Config, "{class} `{key}` {a:?} has a side of {big}, above the cap of {MAX_SIDE}");
            }
            Ok((a[0] as usize, a[1] as usize))
        }
        _ => bail!(Config, "layer config needs `{key}` as two integers, got {:?}", v.get(key)),
    }
}

fn num(v: &Value, key: &str) -> Result<f64> {
    v.get(key).and_then(Value::as_f64).ok_or_else(|| crate::Error::Config(format!("layer config needs number `{key}`, got {:?}", v.get(key))))
}

/// An optional number `key` of `class`'s config (absent or `null`: `None`), as an f32 that
/// must stay finite: a value past f32's range would become infinite unnoticed.
fn opt_f32(class: &str, v: &Value, key: &str) -> Result<Option<f32>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => match n.as_f64() {
            Some(f) if (f as f32).is_finite() => Ok(Some(f as f32)),
            _ => bail!(Config, "{class} `{key}` must be a finite f32 number or null, got {n}"),
        },
    }
}

/// A number or a list of at most [`MAX_UNITS`] numbers `key` of `class`'s config (Keras
/// writes a per-channel constant either way), each a finite f32.
fn floats(class: &str, v: &Value, key: &str) -> Result<Vec<f32>> {
    let raw = v.get(key);
    let items: Vec<&Value> = match raw {
        Some(Value::Array(a)) if a.len() <= MAX_UNITS => a.iter().collect(),
        Some(Value::Array(a)) => bail!(Config, "{class} `{key}` has {} values, above the cap of {MAX_UNITS}", a.len()),
        Some(n) => vec![n],
        None => bail!(Config, "{class} config needs `{key}` as a number or a list of numbers"),
    };
    items
        .iter()
        .map(|n| match n.as_f64() {
            Some(f) if (f as f32).is_finite() => Ok(f as f32),
            _ => bail!(Config, "{class} `{key}` must hold finite f32 numbers, got {n} in {}", raw.unwrap_or(&Value::Null)),
        })
        .collect()
}

/// Refuses a value other than `want` of an argument convoy does not implement (absent is
/// fine: the default is `want`).
fn only(class: &str, v: &Value, key: &str, want: Value) -> Result<()> {
    let Some(got) = v.get(key) else { return Ok(()) };
    let same = match (got.as_f64(), want.as_f64()) {
        (Some(g), Some(w)) => g == w,
        _ => got == &want,
    };
    if !same {
        bail!(Config, "{class} `{key}` = {got} is not supported (only {want})");
    }
    Ok(())
}

/// Refuses a `data_format` other than `channels_last` (absent or `null`: Keras' default,
/// channels last).
fn channels_last(class: &str, v: &Value) -> Result<()> {
    match v.get("data_format") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s == "channels_last" => Ok(()),
        Some(other) => bail!(Config, "{class} `data_format` = {other} is not supported (only \"channels_last\": convoy is NHWC)"),
    }
}

/// An optional boolean `key` of `class`'s config, false when absent.
fn flag(class: &str, v: &Value, key: &str) -> Result<bool> {
    match v.get(key) {
        None => Ok(false),
        Some(b) => b.as_bool().ok_or_else(|| crate::Error::Config(format!("{class} `{key}` must be a boolean, got {b}"))),
    }
}

fn chain(v: &Value, key: &str, depth: usize) -> Result<Vec<Box<dyn Layer>>> {
    v.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| crate::Error::Config(format!("residual config needs `{key}`")))?
        .iter()
        .enumerate()
        .map(|(i, l)| {
            // Freezing addresses a model's own layers (`set_trainable`): a flag on a block's
            // sub-layer would be dropped without a word.
            if l.get("config").and_then(|c| c.get("trainable")).is_some_and(|t| t != &Value::Bool(true)) {
                let class = l.get("class_name").and_then(Value::as_str).unwrap_or("?");
                bail!(Config, "residual `{key}` layer {i} ({class}) sets `trainable`: only a whole residual block can be frozen (set `trainable` on the block's config)");
            }
            layer_at(l, depth)
        })
        .collect()
}

/// One layer from its `{class_name, config}`; sizes above the caps of [`crate::limits`] and
/// residual blocks nested deeper than [`MAX_NESTING`] are refused.
pub fn layer_from_config(v: &Value) -> Result<Box<dyn Layer>> {
    layer_at(v, 0)
}

/// `depth` counts the residual blocks around this layer.
fn layer_at(v: &Value, depth: usize) -> Result<Box<dyn Layer>> {
    let class = v.get("class_name").and_then(Value::as_str).unwrap_or("");
    let c = v.get("config").cloned().unwrap_or(Value::Null);
    if let Some(layer) = builtin(class, &c, depth)? {
        return Ok(layer);
    }
    match super::registry::build_registered(class, &c) {
        Some(layer) => layer,
        None => bail!(
            Config,
            "unknown layer class `{class}`: a custom layer must be registered with convoy::register_layer::<L>() before loading (the command line knows only the built-in layers: load such models from Rust)"
        ),
    }
}

/// Whether `class` names a built-in layer (one [`layer_from_config`] knows without
/// registration).
pub fn is_builtin(class: &str) -> bool {
    // Every built-in class either builds from an empty config or reports what it lacks;
    // only an unknown one comes back as `None`.
    !matches!(builtin(class, &Value::Null, 0), Ok(None))
}

/// The built-in layer of `class` built from its config `c`; `None` for a class convoy does
/// not ship.
fn builtin(class: &str, c: &Value, depth: usize) -> Result<Option<Box<dyn Layer>>> {
    let c = c.clone();
    Ok(Some(match class {
        "Conv2D" => {
            let (kh, kw) = pair(class, &c, "kernel_size")?;
            let mut l = Conv2D::new(size(class, &c, "filters", MAX_UNITS)?, kh);
            l.kernel_size = (kh, kw);
            l.strides = pair(class, &c, "strides")?;
            l.padding = padding_from_config(c.get("padding").unwrap_or(&Value::Null))?;
            l.use_bias = c.get("use_bias").and_then(Value::as_bool).unwrap_or(true);
            l.kernel_initializer = if c.get("kernel_initializer").and_then(Value::as_str) == Some("he_normal") { "he_normal" } else { "glorot_uniform" };
            // absent (files from before them): Keras' defaults
            if c.get("dilation_rate").is_some() {
                l.dilation_rate = pair(class, &c, "dilation_rate")?;
            }
            if c.get("groups").is_some() {
                l.groups = size(class, &c, "groups", MAX_UNITS)?;
            }
            Box::new(l)
        }
        "DepthwiseConv2D" => {
            let mut l = DepthwiseConv2D::new(pair(class, &c, "kernel_size")?)
                .strides(pair(class, &c, "strides")?)
                .padding(padding_from_config(c.get("padding").unwrap_or(&Value::Null))?)
                .depth_multiplier(size(class, &c, "depth_multiplier", MAX_UNITS)?)
                .use_bias(c.get("use_bias").and_then(Value::as_bool).unwrap_or(true));
            // absent: Keras' defaults; present, only what the layer knows
            if c.get("dilation_rate").is_some() {
                l = l.dilation_rate(pair(class, &c, "dilation_rate")?);
            }
            l.depthwise_initializer = match c.get("depthwise_initializer") {
                None => "glorot_uniform",
                Some(Value::String(s)) if s == "glorot_uniform" => "glorot_uniform",
                Some(Value::String(s)) if s == "he_normal" => "he_normal",
                Some(other) => bail!(Config, "{class} `depthwise_initializer` must be \"glorot_uniform\" or \"he_normal\", got {other}"),
            };
            Box::new(l)
        }
        "Dense" => Box::new(Dense::new(size(class, &c, "units", MAX_UNITS)?).use_bias(c.get("use_bias").and_then(Value::as_bool).unwrap_or(true))),
        "BatchNormalization" => Box::new(BatchNormalization::new().momentum(num(&c, "momentum")? as f32).epsilon(num(&c, "epsilon")? as f32)),
        "LayerNormalization" => {
            // Keras writes the axis as -1 or as a list of axes.
            match c.get("axis") {
                None => {}
                Some(a) if a.as_i64() == Some(-1) || a.as_array().is_some_and(|v| v.len() == 1 && v[0].as_i64() == Some(-1)) => {}
                Some(a) => bail!(Config, "{class} normalises over the last axis only (axis -1), got axis {a}"),
            }
            only(class, &c, "center", true.into())?;
            only(class, &c, "scale", true.into())?;
            let l = LayerNormalization::new().epsilon(opt_f32(class, &c, "epsilon")?.unwrap_or(1e-3));
            if !(l.epsilon > 0.0) {
                bail!(Config, "{class} `epsilon` must be positive, got {}", l.epsilon);
            }
            Box::new(l)
        }
        // Files written before max_value and negative_slope existed hold `{}`: a plain ReLU.
        "ReLU" => {
            only(class, &c, "threshold", 0.into())?;
            let mut l = ReLU::new().negative_slope(opt_f32(class, &c, "negative_slope")?.unwrap_or(0.0));
            if let Some(m) = opt_f32(class, &c, "max_value")? {
                l = l.max_value(m);
            }
            l.validate()?;
            Box::new(l)
        }
        "LeakyReLU" => {
            // Keras 2 named the slope `alpha`.
            let slope = match opt_f32(class, &c, "negative_slope")? {
                Some(s) => Some(s),
                None => opt_f32(class, &c, "alpha")?,
            };
            let l = LeakyReLU::new().negative_slope(slope.unwrap_or(0.3));
            l.validate()?;
            Box::new(l)
        }
        "Activation" => {
            let name = c.get("activation").and_then(Value::as_str);
            let Some(name) = name else { bail!(Config, "Activation config needs `activation` as a name, got {:?}", c.get("activation")) };
            let approximate = flag(class, &c, "approximate")?;
            match name.parse()? {
                ActivationFn::Gelu { .. } => Box::new(Activation::of(ActivationFn::Gelu { approximate })),
                f if !approximate => Box::new(Activation::of(f)),
                _ => bail!(Config, "Activation `approximate` applies to gelu only, got true for {name:?}"),
            }
        }
        "Softmax" => {
            only(class, &c, "axis", (-1).into())?;
            Box::new(Softmax::new())
        }
        "GlobalMaxPooling2D" => {
            only(class, &c, "data_format", "channels_last".into())?;
            Box::new(GlobalMaxPooling2D::new().keepdims(flag(class, &c, "keepdims")?))
        }
        "Rescaling" => {
            let offset = if c.get("offset").is_some() { floats(class, &c, "offset")? } else { vec![0.0] };
            let l = Rescaling::per_channel(floats(class, &c, "scale")?, offset);
            l.validate()?;
            Box::new(l)
        }
        "Normalization" => {
            only(class, &c, "axis", (-1).into())?;
            let l = Normalization::new(floats(class, &c, "mean")?, floats(class, &c, "variance")?).invert(flag(class, &c, "invert")?);
            l.validate()?;
            Box::new(l)
        }
        "RandomFlip" => {
            channels_last(class, &c)?;
            let mode = match c.get("mode") {
                None => FlipMode::HorizontalAndVertical,
                Some(Value::String(m)) => m.parse()?,
                Some(other) => bail!(Config, "{class} `mode` must be a string, got {other}"),
            };
            Box::new(RandomFlip::new(mode).seed(seed_from_config(class, &c)?))
        }
        "RandomCrop" => {
            channels_last(class, &c)?;
            let (h, w) = (size(class, &c, "height", MAX_SIDE)?, size(class, &c, "width", MAX_SIDE)?);
            if h == 0 || w == 0 {
                bail!(Config, "{class} `height` and `width` must be at least 1, got {h} and {w}");
            }
            Box::new(RandomCrop::new(h, w).seed(seed_from_config(class, &c)?))
        }
        "RandomTranslation" => {
            channels_last(class, &c)?;
            // Keras' default is "bilinear", which moves by fractions of a pixel: not here.
            match c.get("interpolation") {
                None => {}
                Some(Value::String(s)) if s == "nearest" => {}
                Some(other) => bail!(Config, "{class} `interpolation` = {other} is not supported: convoy shifts by whole pixels (\"nearest\")"),
            }
            let (lo_h, hi_h) = factor_from_config("height_factor", &c)?;
            let (lo_w, hi_w) = factor_from_config("width_factor", &c)?;
            let fill_mode = match c.get("fill_mode") {
                None => FillMode::Reflect,
                Some(Value::String(m)) => m.parse()?,
                Some(other) => bail!(Config, "{class} `fill_mode` must be a string, got {other}"),
            };
            let l = RandomTranslation::new(0.0, 0.0)
                .height_range(lo_h, hi_h)
                .width_range(lo_w, hi_w)
                .fill_mode(fill_mode)
                .fill_value(opt_f32(class, &c, "fill_value")?.unwrap_or(0.0))
                .seed(seed_from_config(class, &c)?);
            l.validate()?;
            Box::new(l)
        }
        "Add" => Box::new(Add::new()),
        "Concatenate" => match c.get("axis") {
            None => Box::new(Concatenate::new()),
            Some(a) if a.as_i64() == Some(-1) => Box::new(Concatenate::new()),
            Some(a) => bail!(Config, "Concatenate joins along the last axis only (axis -1), got axis {a}"),
        },
        "Flatten" => Box::new(Flatten::new()),
        "Dropout" => Box::new(Dropout::new(num(&c, "rate")? as f32).seed(num(&c, "seed").unwrap_or(0.0) as u32)),
        "GlobalAveragePooling2D" => Box::new(GlobalAveragePooling2D::new()),
        "MaxPool2D" | "AveragePooling2D" => {
            let (ph, _) = pair(class, &c, "pool_size")?;
            let (sh, _) = pair(class, &c, "strides")?;
            // absent: Keras' default; anything else it cannot read is an error
            let padding = match c.get("padding") {
                None => PoolPadding::Valid,
                Some(v) => PoolPadding::from_config(v).map_err(|e| crate::Error::Config(format!("{class}: {e}")))?,
            };
            if class == "MaxPool2D" {
                Box::new(MaxPool2D::new(ph).strides(sh).padding(padding))
            } else {
                Box::new(AveragePooling2D::new(ph).strides(sh).padding(padding))
            }
        }
        "Residual" => {
            if depth >= MAX_NESTING {
                bail!(Config, "residual blocks are nested more than {MAX_NESTING} deep (the cap)");
            }
            Box::new(Residual::new(chain(&c, "main", depth + 1)?, chain(&c, "shortcut", depth + 1)?))
        }
        _ => return Ok(None),
    }))
}
