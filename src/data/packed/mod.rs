//! Packed data sets (`convoy pack`, `--data packed:FILE`): every image of a folder decoded once,
//! resized to a short side of S and stored as u8 RGB (HWC) in one file that is memory-mapped,
//! so that an epoch reads memory instead of decoding JPEGs (FFCV's idea). Training takes
//! random-resized crops of the stored images, validation centre crops, at the training size.
//!
//! The layout (all integers little-endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | magic [`PACKED_MAGIC`] |
//! | 8..12 | format version, u32 ([`PACKED_VERSION`]) |
//! | 12..16 | S, the short side of every stored image, u32 |
//! | 16..20 | number of classes, u32 |
//! | 20..24 | zero |
//! | 24..32 | training images, u64 |
//! | 32..40 | validation images, u64 |
//! | 40..48 | bytes of the class names that follow the header, u64 |
//! | 48..56 | offset of the pixel data in the file, u64 |
//! | 56..64 | bytes of pixel data, u64: the file ends where they do |
//! | 64.. | class names in label order, each a u32 length and UTF-8 bytes |
//! | then | the index: one 24-byte entry per image, training images first: offset of its pixels from the start of the pixel data (u64), width (u32), height (u32), label (u32), zero (u32) |
//! | data offset.. | the pixels |
//!
//! Every size is checked against the file's length and `limits.rs` before anything is
//! allocated or sliced from it; a file that fails is one error naming it and the field.

mod read;
mod write;

pub use read::{Packed, packed, packed_from_bytes};
pub use write::{PackReport, pack_folder};

use std::path::Path;

use crate::limits::{MAX_PACKED_CLASSES, MAX_PACKED_IMAGES, MAX_RESIZED_BYTES, MAX_SIDE};
use crate::{Error, Result};

/// The first eight bytes of a packed file.
pub const PACKED_MAGIC: [u8; 8] = *b"CONVOYPK";

/// The layout version this build writes and reads.
pub const PACKED_VERSION: u32 = 1;

const HEADER_BYTES: usize = 64;
const ENTRY_BYTES: usize = 24;

/// One stored image: where its pixels are and what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// From the start of the pixel data.
    offset: u64,
    width: u32,
    height: u32,
    label: u32,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        for v in [self.width, self.height, self.label, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// What the header, names and index of a packed file say, every field checked.
#[derive(Clone, Debug)]
struct Layout {
    short_side: usize,
    classes: Vec<String>,
    train: usize,
    /// Training entries, then validation entries.
    entries: Vec<Entry>,
    data_start: usize,
}

impl Layout {
    /// The header, class names and index, for the writer (`data_start` is where pixels begin).
    fn encode(&self, data_len: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data_start);
        out.extend_from_slice(&PACKED_MAGIC);
        let names: usize = self.classes.iter().map(|c| 4 + c.len()).sum();
        for v in [PACKED_VERSION, self.short_side as u32, self.classes.len() as u32, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let val = self.entries.len() - self.train;
        for v in [self.train as u64, val as u64, names as u64, self.data_start as u64, data_len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for c in &self.classes {
            out.extend_from_slice(&(c.len() as u32).to_le_bytes());
            out.extend_from_slice(c.as_bytes());
        }
        for e in &self.entries {
            e.encode(&mut out);
        }
        out.resize(self.data_start, 0);
        out
    }

    /// Where the pixels start for `classes` and `images`: after the index, rounded up to 64
    /// bytes so that each stored image begins on a cache line.
    fn data_start(classes: &[String], images: usize) -> usize {
        let names: usize = classes.iter().map(|c| 4 + c.len()).sum();
        (HEADER_BYTES + names + images * ENTRY_BYTES).next_multiple_of(64)
    }

    /// Reads and checks the layout of the packed file `bytes` (`path` names it in errors).
    fn parse(bytes: &[u8], path: &Path) -> Result<Self> {
        let bad = |msg: String| Error::format(path, format!("corrupt packed file: {msg}"));
        let len = bytes.len();
        if len < HEADER_BYTES {
            return Err(bad(format!("{len} bytes, shorter than the {HEADER_BYTES}-byte header (truncated?)")));
        }
        if bytes[..8] != PACKED_MAGIC {
            let msg = format!("not a convoy packed file (starts with {:?}, expected {:?}); write one with convoy pack", 
                String::from_utf8_lossy(&bytes[..8]), String::from_utf8_lossy(&PACKED_MAGIC));
            return Err(Error::format(path, msg));
        }
        let mut header = Reader { bytes: &bytes[8..HEADER_BYTES], at: 8, path };
        let version = header.u32("version")?;
        if version != PACKED_VERSION {
            return Err(bad(format!("format version {version}; this convoy reads version {PACKED_VERSION} (pack it again)")));
        }
        let short_side = header.u32("image size")? as usize;
        let classes = header.u32("class count")? as usize;
        header.u32("reserved")?;
        let train = header.size("training image count")?;
        let val = header.size("validation image count")?;
        let names_len = header.size("class names length")?;
        let data_start = header.size("pixel data offset")?;
        let data_len = header.size("pixel data length")?;
        if short_side == 0 || short_side > MAX_SIDE {
            return Err(bad(format!("image size {short_side}, expected 1 to {MAX_SIDE}")));
        }
        if classes == 0 || classes > MAX_PACKED_CLASSES {
            return Err(bad(format!("{classes} classes, expected 1 to {MAX_PACKED_CLASSES}")));
        }
        let images = train.checked_add(val).filter(|&n| n <= MAX_PACKED_IMAGES);
        let Some(images) = images.filter(|_| train > 0 && val > 0) else {
            return Err(bad(format!("{train} training and {val} validation images, expected 1 to {MAX_PACKED_IMAGES} in all and both splits non-empty")));
        };
        // Each section must fit in the file before anything is read or allocated from it.
        let index_start = HEADER_BYTES.checked_add(names_len).filter(|&e| e <= len);
        let Some(index_start) = index_start else {
            return Err(bad(format!("class names of {names_len} bytes run past the end of the file ({len} bytes; truncated?)")));
        };
        let index_end = images.checked_mul(ENTRY_BYTES).and_then(|b| b.checked_add(index_start)).filter(|&e| e <= len);
        let Some(index_end) = index_end else {
            return Err(bad(format!("an index of {images} images ({ENTRY_BYTES} bytes each, from byte {index_start}) runs past the end of the file ({len} bytes; truncated?)")));
        };
        if data_start < index_end || data_start.checked_add(data_len) != Some(len) {
            return Err(bad(format!(
                "pixel data declared at bytes {data_start}..{} after an index ending at {index_end}, but the file has {len} bytes (truncated?)",
                data_start as u128 + data_len as u128
            )));
        }
        let classes = parse_names(&bytes[HEADER_BYTES..index_start], classes, path)?;
        let mut entries = Vec::with_capacity(images);
        let mut index = Reader { bytes: &bytes[index_start..index_end], at: index_start, path };
        for i in 0..images {
            let (offset, width, height, label) = (index.u64("image offset")?, index.u32("width")?, index.u32("height")?, index.u32("label")?);
            index.u32("reserved")?;
            let e = Entry { offset, width, height, label };
            check_entry(&e, i, short_side, classes.len(), data_len).map_err(bad)?;
            entries.push(e);
        }
        Ok(Layout { short_side, classes, train, entries, data_start })
    }
}

/// An entry's label, sides and extent against the header: `Err` holds the cause.
fn check_entry(e: &Entry, i: usize, short_side: usize, classes: usize, data_len: usize) -> std::result::Result<(), String> {
    if e.label as usize >= classes {
        return Err(format!("image {i} has label {}, but there are {classes} classes", e.label));
    }
    let (w, h) = (e.width as usize, e.height as usize);
    if w.min(h) != short_side || w.max(h) > MAX_RESIZED_BYTES / 3 / short_side {
        return Err(format!("image {i} is {w}x{h}, but images were packed with a short side of {short_side}"));
    }
    let end = (e.offset as usize).checked_add(e.bytes()).filter(|&end| e.offset <= usize::MAX as u64 && end <= data_len);
    if end.is_none() {
        return Err(format!("image {i} ({w}x{h}) at offset {} runs past the {data_len} bytes of pixel data", e.offset));
    }
    Ok(())
}

/// `count` length-prefixed UTF-8 names filling `bytes` exactly.
fn parse_names(bytes: &[u8], count: usize, path: &Path) -> Result<Vec<String>> {
    let bad = |msg: String| Error::format(path, format!("corrupt packed file: {msg}"));
    let mut names = Vec::new();
    let mut r = Reader { bytes, at: HEADER_BYTES, path };
    while names.len() < count {
        let n = r.u32("class name length")? as usize;
        let raw = r.take(n, "class name")?;
        let name = std::str::from_utf8(raw).map_err(|_| bad(format!("class name {} is not UTF-8", names.len())))?;
        names.push(name.to_string());
    }
    if !r.bytes.is_empty() {
        return Err(bad(format!("{} bytes left after the {count} class names", r.bytes.len())));
    }
    Ok(names)
}

/// Little-endian fields from a slice whose length was checked against the file; running out is
/// an error naming the field and its offset.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.bytes.len() {
            let msg = format!("corrupt packed file: {what} at byte {} needs {n} bytes, {} are left in its section", self.at, self.bytes.len());
            return Err(Error::format(self.path, msg));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        self.at += n;
        Ok(head)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    /// A u64 that must also be a usize (32-bit hosts).
    fn size(&mut self, what: &str) -> Result<usize> {
        let v = self.u64(what)?;
        usize::try_from(v).map_err(|_| Error::format(self.path, format!("corrupt packed file: {what} {v} does not fit this machine's memory")))
    }
}
