//! Keras' `model.summary()`: one row per layer (name, output shape, parameters) and the
//! totals, as a table or as JSON (`convoy summary`).
//!
//! FLOPs are counted once, by the layers ([`crate::layers::Layer::flops`]): a convolution
//! asks the same geometry its kernels report to the profile, so the summary and `convoy bench
//! --profile` agree (tests/models.rs holds them equal). They are 2 x the multiply-adds of the
//! convolutions and dense layers of one sample's forward pass; BatchNorm, ReLU, pooling and
//! additions are not counted (under 1% on a ResNet). fvcore and ptflops report multiply-adds,
//! half this figure, and torchvision's documented "GFLOPS" (1.81 for resnet18) are the same
//! multiply-adds.

use serde::Serialize;
use serde_json::{json, Value};

use crate::model::Sequential;
use crate::Result;

/// One top-level layer of a [`Summary`].
#[derive(Clone, Debug, Serialize)]
pub struct LayerSummary {
    /// Keras-style name: `conv2d_3`.
    pub name: String,
    /// Keras' class name: `Conv2D`.
    pub class_name: String,
    /// Per-sample output shape (the batch dimension left out).
    pub output_shape: Vec<usize>,
    /// Trainable and non-trainable (moving statistics) values, as Keras' `Param #`.
    pub params: usize,
    /// The trainable part of `params`.
    pub trainable_params: usize,
    /// Forward FLOPs of one sample (2 per multiply-add).
    pub flops: u64,
    /// The layers (or `input`) it reads, Keras' "Connected to".
    pub connected_to: Vec<String>,
}

/// What `summary` shows: every layer and the totals.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `(height, width, channels)`.
    pub input_shape: Vec<usize>,
    /// One row per top-level layer (a residual block is one row).
    pub layers: Vec<LayerSummary>,
    /// Keras' "Total params": trainable plus non-trainable.
    pub params: usize,
    /// What PyTorch's `sum(p.numel() for p in model.parameters())` counts.
    pub trainable_params: usize,
    /// BatchNorm's moving statistics (PyTorch's `running_mean` / `running_var` buffers).
    pub non_trainable_params: usize,
    /// Forward FLOPs of one sample, 2 per multiply-add.
    pub flops: u64,
}

impl Summary {
    /// The Keras-style table.
    pub fn table(&self) -> String {
        // A stack reads each layer's predecessor; anything else is a graph, whose table has
        // Keras' "Connected to" column.
        let graph = self.layers.iter().enumerate().any(|(i, l)| l.connected_to != [if i == 0 { "input".to_string() } else { self.layers[i - 1].name.clone() }]);
        let mut rows = vec![["Layer (type)".to_string(), "Output Shape".to_string(), "Param #".to_string(), "  Connected to".to_string()]];
        for l in &self.layers {
            let dims: Vec<String> = std::iter::once("None".to_string()).chain(l.output_shape.iter().map(|d| d.to_string())).collect();
            rows.push([format!("{} ({})", l.name, l.class_name), format!("({})", dims.join(", ")), group(l.params), format!("  {}", l.connected_to.join(", "))]);
        }
        let columns = if graph { 4 } else { 3 };
        let w = [0, 1, 2, 3].map(|c| if c < columns { rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0) + 2 } else { 0 });
        let rule = |ch: char| ch.to_string().repeat(w.iter().sum::<usize>()) + "\n";
        let mut s = format!("Model: \"{}\"\n", if graph { "functional" } else { "sequential" }) + &rule('━');
        for (i, r) in rows.iter().enumerate() {
            let last = if graph { r[3].as_str() } else { "" };
            s += format!("{:<a$}{:<b$}{:>c$}{last}", r[0], r[1], r[2], a = w[0], b = w[1], c = w[2]).trim_end();
            s += "\n";
            s += &rule(if i == 0 { '━' } else { '─' });
        }
        s += &format!(" Total params: {}\n", group(self.params));
        s += &format!(" Trainable params: {}\n", group(self.trainable_params));
        s += &format!(" Non-trainable params: {}\n", group(self.non_trainable_params));
        s += &format!(" Forward FLOPs per sample: {} (2 per multiply-add)\n", group(self.flops as usize));
        s
    }

    /// The summary as one JSON object: `params`, `trainable_params`, `non_trainable_params`,
    /// `flops`, `input_shape` and `layers` (one object per row, with the same keys).
    pub fn to_json(&self) -> Value {
        json!(self)
    }
}

impl Sequential {
    /// Every layer's output shape, parameters and FLOPs, and the totals, checking each layer
    /// against its input.
    pub fn summarize(&self) -> Result<Summary> {
        let layout = self.def.build_layout()?;
        let mut layers = Vec::with_capacity(self.def.layers.len());
        let node_name = |j: usize| if j == 0 { "input".to_string() } else { layout.layer_names[j - 1].clone() };
        for (i, layer) in self.def.layers.iter().enumerate() {
            // Parameters are sized from a layer's first input, as the layout sizes them.
            let first = layout.inbound[i][0];
            let shape = if first == 0 { self.def.input_shape.clone() } else { layout.shapes[first - 1].clone() };
            let count = |specs: Vec<crate::layers::ParamSpec>| specs.iter().map(|p| p.len()).sum::<usize>();
            let weights = count(layer.params(&shape));
            // A frozen layer's parameters count as non-trainable, as in Keras.
            let trainable = if self.def.frozen.contains(&i) { 0 } else { weights };
            layers.push(LayerSummary {
                name: layout.layer_names[i].clone(),
                class_name: layer.class_name().to_string(),
                output_shape: layout.shapes[i].clone(),
                params: weights + count(layer.states(&shape)),
                trainable_params: trainable,
                flops: layer.flops(&shape),
                connected_to: layout.inbound[i].iter().map(|&j| node_name(j)).collect(),
            });
        }
        let (weights, states) = (layout.trainable_count(), layout.state_count());
        let trainable: usize = layers.iter().map(|l| l.trainable_params).sum();
        // Saturating: a file may declare layers whose counts sum past 64 bits.
        let flops = layers.iter().fold(0u64, |a, l| a.saturating_add(l.flops));
        Ok(Summary { input_shape: self.def.input_shape.clone(), layers, params: weights + states, trainable_params: trainable, non_trainable_params: weights + states - trainable, flops })
    }

    /// The summary table (see [`Summary::table`]).
    pub fn summary(&self) -> Result<String> {
        Ok(self.summarize()?.table())
    }
}

/// 1234567 -> "1,234,567".
pub fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
