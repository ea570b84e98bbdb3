//! Keras' `model.summary()` table.

use crate::model::layout::Layout;
use crate::model::Sequential;
use crate::Result;

impl Sequential {
    /// The summary table: layer (type), output shape, parameter count, and the totals.
    pub fn summary(&self) -> Result<String> {
        let layout = Layout::new(&self.def.input_shape, &self.def.layers)?;
        let mut rows = vec![("Layer (type)".to_string(), "Output Shape".to_string(), "Param #".to_string())];
        let mut shape = self.def.input_shape.clone();
        let mut flops = 0u64;
        for (i, layer) in self.def.layers.iter().enumerate() {
            let count: usize = layer.params(&shape).iter().map(|p| p.len()).sum();
            // Saturating: a file may declare layers whose counts sum past 64 bits.
        flops = flops.saturating_add(layer.flops(&shape));
            let out = &layout.shapes[i];
            let dims: Vec<String> = std::iter::once("None".to_string()).chain(out.iter().map(|d| d.to_string())).collect();
            rows.push((format!("{} ({})", layout.layer_names[i], layer.class_name()), format!("({})", dims.join(", ")), group(count)));
            shape = out.clone();
        }
        let w = [0, 1, 2].map(|c| rows.iter().map(|r| [&r.0, &r.1, &r.2][c].len()).max().unwrap_or(0) + 2);
        let width = w.iter().sum::<usize>();
        let mut s = String::from("Model: \"sequential\"\n");
        let rule = |ch: char| ch.to_string().repeat(width) + "\n";
        s += &rule('━');
        for (i, r) in rows.iter().enumerate() {
            s += &format!("{:<a$}{:<b$}{:>c$}\n", r.0, r.1, r.2, a = w[0], b = w[1], c = w[2]);
            s += &rule(if i == 0 { '━' } else { '─' });
        }
        let trainable = layout.trainable_count();
        s += &format!(" Total params: {} ({} trainable, {} non-trainable)\n", group(trainable + layout.state_count()), group(trainable), group(layout.state_count()));
        s += &format!(" Forward FLOPs per sample: {}\n", group(flops as usize));
        Ok(s)
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
