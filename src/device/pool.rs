//! A per-device buffer pool. Plans take their buffers at compile time; dropping a plan (or a
//! tensor used for evaluation) returns them here, so the next plan of the same shapes
//! allocates nothing.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
/// Idle buffers by size class, waiting to be reused by the next tensor of that class.
pub struct Pool {
    free: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
}

/// The usages of every pooled buffer: bound as storage, and copied in and out.
pub(crate) const USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

/// Rounds a request up to a size class: 256-byte steps below 4 KiB, then eight classes per
/// power of two, so at most 12.5% is wasted and similar shapes share buffers.
pub fn size_class(bytes: u64) -> u64 {
    let bytes = bytes.max(4);
    if bytes <= 4096 {
        return bytes.div_ceil(256) * 256;
    }
    let step = (1u64 << (63 - bytes.leading_zeros())) / 8;
    bytes.div_ceil(step) * step
}

impl Pool {
    /// A buffer of at least `bytes` bytes. Reused buffers keep stale contents: callers that
    /// need zeros clear them (`Device::zeros`).
    pub fn take(&self, device: &wgpu::Device, bytes: u64) -> (wgpu::Buffer, bool) {
        let class = size_class(bytes);
        if let Some(buffer) = self.free.lock().unwrap().get_mut(&class).and_then(Vec::pop) {
            return (buffer, true);
        }
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("convoy tensor"),
            size: class,
            usage: USAGE,
            mapped_at_creation: false,
        });
        (buffer, false)
    }

    /// Returns a buffer to its size class, for the next [`take`](Self::take).
    pub(crate) fn give_back(&self, buffer: wgpu::Buffer) {
        self.free.lock().unwrap().entry(buffer.size()).or_default().push(buffer);
    }

    /// Frees every idle buffer: after a step that did not fit, its buffers (in the size
    /// classes of that batch) would otherwise hold the memory a smaller batch needs.
    pub fn release_idle(&self) {
        self.free.lock().unwrap().clear();
    }

    /// Bytes held by idle buffers (memory the device has allocated but no tensor uses).
    pub(crate) fn idle_bytes(&self) -> u64 {
        self.free.lock().unwrap().iter().map(|(size, v)| size * v.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;
    #[test]
    fn size_classes_cover_the_request_and_waste_little() {
        for bytes in [1u64, 4, 255, 256, 257, 4096, 4097, 10_000, 1 << 20, (1 << 20) + 1, 123_456_789] {
            let c = size_class(bytes);
            assert!(c >= bytes && c.is_multiple_of(4), "{bytes} -> {c}");
            if bytes > 4096 {
                assert!((c - bytes) as f64 <= bytes as f64 / 8.0, "{bytes} -> {c}");
            }
        }
    }
}
