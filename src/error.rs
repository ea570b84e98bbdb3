//! One error type for the whole crate; every message carries the values it received.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
/// Everything that can go wrong in convoy, grouped by where it comes from.
pub enum Error {
    /// No adapter matched, or one could not be opened.
    #[error("device: {0}")]
    Device(String),
    /// A tensor or layer received a shape it cannot work with.
    #[error("shape: {0}")]
    Shape(String),
    /// An argument or configuration value is out of range.
    #[error("invalid argument: {0}")]
    Config(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// What the operating system reported.
        source: std::io::Error,
    },
    /// A data or model file exists but its content is wrong.
    #[error("{}: {msg}", path.display())]
    Format {
        /// The file whose content is wrong.
        path: PathBuf,
        /// What is wrong, with the values read.
        msg: String,
    },
    /// The GPU reported a failure (out of memory, lost device, failed mapping).
    #[error("gpu: {0}")]
    Gpu(String),
    /// A computation disagreed with its reference (`convoy check`).
    #[error("check: {0}")]
    Mismatch(String),
    /// Training across processes under `mpirun` (`crate::distributed`) cannot start or go on.
    #[error("mpi: {0}")]
    Mpi(String),
}

/// The crate's result type, with [`Error`] as its error.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    /// An [`Error::Format`] for `path`, with what was wrong in `msg`.
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Format { path: path.into(), msg: msg.into() }
    }
}

/// `bail!(Shape, "conv2d expects 4-d input, got {:?}", shape)` returns early with that error.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => {
        return Err($crate::Error::$kind(format!($($arg)*)))
    };
}
