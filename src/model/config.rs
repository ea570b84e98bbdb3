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

fn chain(v: &Value, key: &str, depth: usize) -> Result<Vec<Box<dyn Layer>>> {
    v.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| crate::Error::Config(format!("residual config needs `{key}`")))?
        .iter()
        .map(|l| layer_at(l, depth))
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
    Ok(match class {
        "Conv2D" => {
            let (kh, kw) = pair(class, &c, "kernel_size")?;
            let mut l = Conv2D::new(size(class, &c, "filters", MAX_UNITS)?, kh);
            l.kernel_size = (kh, kw);
            l.strides = pair(class, &c, "strides")?;
            l.padding = padding_from_config(c.get("padding").unwrap_or(&Value::Null))?;
            l.use_bias = c.get("use_bias").and_then(Value::as_bool).unwrap_or(true);
            l.kernel_initializer = if c.get("kernel_initializer").and_then(Value::as_str) == Some("he_normal") { "he_normal" } else { "glorot_uniform" };
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
        "ReLU" => Box::new(ReLU::new()),
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
        other => bail!(Config, "unknown layer class `{other}`"),
    })
}
