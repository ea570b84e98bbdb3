//! ModelCheckpoint's file names: the subset of Python's `str.format` that Keras users write,
//! `weights.{epoch:02d}-{val_loss:.4f}.safetensors`.

use std::path::PathBuf;

use super::Logs;
use crate::{Error, Result};

/// A parsed `filepath`: parsed once at train begin so that a malformed template fails before
/// the first epoch has been spent, not after it.
#[derive(Debug)]
pub(crate) struct PathTemplate {
    source: String,
    parts: Vec<Part>,
}

#[derive(Debug)]
enum Part {
    Text(String),
    Field { key: String, spec: Spec },
}

#[derive(Debug)]
enum Spec {
    /// `{key}`: the shortest form that reads back exactly.
    Plain,
    /// `{key:.Nf}`
    Fixed(usize),
    /// `{key:d}`, `{key:3d}`, `{key:03d}`: whole numbers only, like Python.
    Int { width: usize, zero: bool },
}

impl PathTemplate {
    pub(crate) fn parse(source: &str) -> Result<Self> {
        let err = |msg: String| Error::Config(format!("ModelCheckpoint: filepath \"{source}\": {msg}"));
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = source.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '}' => return Err(err("unmatched '}' (write '}}' for a literal brace)".into())),
                '{' => {
                    let mut field = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some('{') | None => {
                                return Err(err("unclosed '{' (write '{{' for a literal brace)".into()));
                            }
                            Some(c) => field.push(c),
                        }
                    }
                    let (key, spec) = field.split_once(':').unwrap_or((&field, ""));
                    if key.is_empty() {
                        return Err(err(format!("empty field name in \"{{{field}}}\"")));
                    }
                    let spec = parse_spec(spec).ok_or_else(|| {
                        err(format!("unsupported format \"{spec}\" in \"{{{field}}}\" (use .Nf, d or 0Nd)"))
                    })?;
                    parts.push(Part::Text(std::mem::take(&mut text)));
                    parts.push(Part::Field { key: key.to_string(), spec });
                }
                c => text.push(c),
            }
        }
        parts.push(Part::Text(text));
        Ok(Self { source: source.to_string(), parts })
    }

    /// Fills the fields from `logs`, with `epoch` counted from 1 as Keras does in file names.
    pub(crate) fn render(&self, epoch: usize, logs: &Logs) -> Result<PathBuf> {
        let mut out = String::new();
        for part in &self.parts {
            let (key, spec) = match part {
                Part::Text(text) => {
                    out.push_str(text);
                    continue;
                }
                Part::Field { key, spec } => (key, spec),
            };
            let value = if key == "epoch" { Some((epoch + 1) as f64) } else { logs.get(key).copied() };
            let Some(value) = value else {
                let keys: Vec<&str> = logs.keys().map(String::as_str).collect();
                return Err(Error::Config(format!(
                    "ModelCheckpoint: filepath \"{}\" uses \"{key}\", which is not in the logs; \
                     available: [epoch, {}]",
                    self.source,
                    keys.join(", ")
                )));
            };
            match *spec {
                Spec::Plain => out.push_str(&value.to_string()),
                Spec::Fixed(digits) => out.push_str(&format!("{value:.digits$}")),
                Spec::Int { width, zero } => {
                    if !value.is_finite() || value.fract() != 0.0 {
                        return Err(Error::Config(format!(
                            "ModelCheckpoint: filepath \"{}\" formats \"{key}\" = {value} as an integer",
                            self.source
                        )));
                    }
                    let n = value as i64;
                    out.push_str(&if zero { format!("{n:0width$}") } else { format!("{n:width$}") });
                }
            }
        }
        Ok(PathBuf::from(out))
    }
}

fn parse_spec(spec: &str) -> Option<Spec> {
    if spec.is_empty() {
        return Some(Spec::Plain);
    }
    if let Some(digits) = spec.strip_prefix('.').and_then(|s| s.strip_suffix('f')) {
        return digits.parse().ok().map(Spec::Fixed);
    }
    let width = spec.strip_suffix('d')?;
    if width.is_empty() {
        return Some(Spec::Int { width: 0, zero: false });
    }
    let zero = width.starts_with('0');
    width.parse().ok().map(|width| Spec::Int { width, zero })
}
