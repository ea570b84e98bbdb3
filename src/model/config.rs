//! Rebuilding layers from their saved `{class_name, config}` (Keras' `from_config`).

use serde_json::Value;

use crate::kernels::pool::PoolPadding;
use crate::layers::*;
use crate::{bail, Result};

fn pair(v: &Value, key: &str) -> Result<(usize, usize)> {
    match v.get(key).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>()) {
        Some(a) if a.len() == 2 => Ok((a[0] as usize, a[1] as usize)),
        _ => bail!(Config, "layer config needs `{key}` as two integers, got {:?}", v.get(key)),
    }
}

fn num(v: &Value, key: &str) -> Result<f64> {
    v.get(key).and_then(Value::as_f64).ok_or_else(|| crate::Error::Config(format!("layer config needs number `{key}`, got {:?}", v.get(key))))
}

fn chain(v: &Value, key: &str) -> Result<Vec<Box<dyn Layer>>> {
    v.get(key).and_then(Value::as_array).ok_or_else(|| crate::Error::Config(format!("residual config needs `{key}`")))?.iter().map(layer_from_config).collect()
}

pub fn layer_from_config(v: &Value) -> Result<Box<dyn Layer>> {
    let class = v.get("class_name").and_then(Value::as_str).unwrap_or("");
    let c = v.get("config").cloned().unwrap_or(Value::Null);
    Ok(match class {
        "Conv2D" => {
            let (kh, kw) = pair(&c, "kernel_size")?;
            let mut l = Conv2D::new(num(&c, "filters")? as usize, kh);
            l.kernel_size = (kh, kw);
            l.strides = pair(&c, "strides")?;
            l.padding = padding_from_config(c.get("padding").unwrap_or(&Value::Null))?;
            l.use_bias = c.get("use_bias").and_then(Value::as_bool).unwrap_or(true);
            l.kernel_initializer = if c.get("kernel_initializer").and_then(Value::as_str) == Some("he_normal") { "he_normal" } else { "glorot_uniform" };
            Box::new(l)
        }
        "Dense" => Box::new(Dense::new(num(&c, "units")? as usize).use_bias(c.get("use_bias").and_then(Value::as_bool).unwrap_or(true))),
        "BatchNormalization" => Box::new(BatchNormalization::new().momentum(num(&c, "momentum")? as f32).epsilon(num(&c, "epsilon")? as f32)),
        "ReLU" => Box::new(ReLU::new()),
        "Flatten" => Box::new(Flatten::new()),
        "Dropout" => Box::new(Dropout::new(num(&c, "rate")? as f32).seed(num(&c, "seed").unwrap_or(0.0) as u32)),
        "GlobalAveragePooling2D" => Box::new(GlobalAveragePooling2D::new()),
        "MaxPool2D" | "AveragePooling2D" => {
            let (ph, _) = pair(&c, "pool_size")?;
            let (sh, _) = pair(&c, "strides")?;
            let padding = if c.get("padding").and_then(Value::as_str) == Some("same") { PoolPadding::Same } else { PoolPadding::Valid };
            if class == "MaxPool2D" {
                Box::new(MaxPool2D::new(ph).strides(sh).padding(padding))
            } else {
                Box::new(AveragePooling2D::new(ph).strides(sh).padding(padding))
            }
        }
        "Residual" => Box::new(Residual::new(chain(&c, "main")?, chain(&c, "shortcut")?)),
        other => bail!(Config, "unknown layer class `{other}`"),
    })
}
