//! CsvLogger: one CSV row per epoch, as Keras' `CSVLogger`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use super::{Callback, Context, Logs};
use crate::{Error, Result};

/// Writes `epoch` (counted from 0, as Keras writes it) and every log value of each epoch to a
/// CSV file, flushed after each row so that a crashed run keeps its rows.
///
/// The columns are `epoch` then the first epoch's keys, sorted; a key missing from a later
/// epoch is written as `NA`, a key that first appears later is not written. The file is opened
/// at train begin, so an unwritable path fails before any training: an `Error::Io` naming it.
/// With `append`, rows go after the existing content and the header is written only when the
/// file is empty or new.
///
/// ```
/// use convoy::callbacks::CsvLogger;
/// let log = CsvLogger::new("training.csv").separator(';').append(true);
/// ```
pub struct CsvLogger {
    filename: PathBuf,
    separator: char,
    append: bool,
    file: Option<File>,
    write_header: bool,
    keys: Option<Vec<String>>,
}

impl CsvLogger {
    /// Writes one row per epoch to `filename`, comma-separated, overwriting the file (Keras'
    /// `CSVLogger`).
    pub fn new(filename: impl Into<PathBuf>) -> Self {
        Self { filename: filename.into(), separator: ',', append: false, file: None, write_header: true, keys: None }
    }
    /// The character between columns (Keras' `separator`, `,` by default).
    pub fn separator(mut self, separator: char) -> Self {
        self.separator = separator;
        self
    }
    /// Add to an existing file instead of overwriting it.
    pub fn append(mut self, append: bool) -> Self {
        self.append = append;
        self
    }

    fn open(&mut self) -> Result<()> {
        let io = |e| Error::io(&self.filename, e);
        let file = if self.append {
            OpenOptions::new().append(true).create(true).open(&self.filename).map_err(io)?
        } else {
            File::create(&self.filename).map_err(io)?
        };
        self.write_header = file.metadata().map_err(io)?.len() == 0;
        self.file = Some(file);
        self.keys = None;
        Ok(())
    }

    /// Quotes a field only when it needs it (RFC 4180), so plain metric names stay plain.
    fn field(&self, text: &str) -> String {
        if text.contains([self.separator, '"', '\n', '\r']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text.to_string()
        }
    }
}

impl Callback for CsvLogger {
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        self.open()
    }

    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, _ctx: &mut Context) -> Result<()> {
        if self.file.is_none() {
            self.open()?;
        }
        let keys = self.keys.get_or_insert_with(|| logs.keys().cloned().collect()).clone();
        let sep = self.separator.to_string();
        let mut text = String::new();
        if std::mem::take(&mut self.write_header) {
            let header: Vec<String> =
                std::iter::once("epoch").chain(keys.iter().map(String::as_str)).map(|k| self.field(k)).collect();
            text += &header.join(&sep);
            text.push('\n');
        }
        let mut row = vec![epoch.to_string()];
        row.extend(keys.iter().map(|k| logs.get(k).map_or("NA".to_string(), |v| v.to_string())));
        text += &row.join(&sep);
        text.push('\n');
        let file = self.file.as_mut().expect("opened above");
        file.write_all(text.as_bytes()).and_then(|()| file.flush()).map_err(|e| Error::io(&self.filename, e))
    }

    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        self.file = None;
        Ok(())
    }
}
