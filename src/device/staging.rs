//! Hot-path transfers. A `StagingRing` holds a few MAP_WRITE buffers that stay mapped while
//! idle: the host writes batch k+1 into one while the GPU copies out of another, and a slot
//! is re-mapped as soon as its copy has been submitted. A `Readback` is the MAP_READ twin.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{Error, Result};

struct Slot {
    buffer: wgpu::Buffer,
    mapped: Arc<AtomicBool>,
    last_use: Option<wgpu::SubmissionIndex>,
}

/// A ring of MAP_WRITE buffers for uploading batches while the GPU works on the previous one.
pub struct StagingRing {
    slots: Vec<Slot>,
    next: usize,
    capacity: u64,
}

impl StagingRing {
    /// `depth` slots of `capacity` bytes (rounded up to whole words).
    pub fn new(device: &wgpu::Device, depth: usize, capacity: u64) -> Self {
        let capacity = capacity.max(4).div_ceil(4) * 4;
        let slots = (0..depth.max(1))
            .map(|_| Slot {
                buffer: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("staging"),
                    size: capacity,
                    usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                }),
                mapped: Arc::new(AtomicBool::new(true)),
                last_use: None,
            })
            .collect();
        StagingRing { slots, next: 0, capacity }
    }

    /// Bytes each slot holds.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Writes `parts` (each `(bytes, destination, destination offset)`) into the next free
    /// slot, waiting only for that slot's previous copy, and encodes copies from it to the
    /// destinations. Returns the slot index; call `submitted` with it once `encoder` has been
    /// submitted.
    pub fn stage(
        &mut self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        parts: &[(&[u8], &wgpu::Buffer, u64)],
    ) -> Result<usize> {
        let index = self.acquire(device)?;
        let mut copies = Vec::with_capacity(parts.len());
        let mut offset = 0u64;
        {
            let slot = &self.slots[index];
            let mut view = slot.buffer.get_mapped_range_mut(..).map_err(|e| Error::Gpu(format!("staging map: {e:?}")))?;
            for (bytes, dst, dst_offset) in parts {
                let len = bytes.len();
                let padded = len.div_ceil(4) as u64 * 4;
                if offset + padded > self.capacity {
                    return Err(Error::Gpu(format!("staging slot of {} bytes cannot hold {} bytes", self.capacity, offset + padded)));
                }
                let start = offset as usize;
                view.slice(start..start + len).copy_from_slice(bytes);
                copies.push((offset, padded, *dst, *dst_offset));
                offset += padded;
            }
        }
        self.commit(index, encoder, &copies);
        Ok(index)
    }

    /// Takes the next slot, waiting only for its previous copy; it is mapped for writing
    /// (`slot_buffer(i).get_mapped_range_mut`, from several threads on disjoint ranges)
    /// until `commit`.
    pub fn acquire(&mut self, device: &wgpu::Device) -> Result<usize> {
        let index = self.next;
        self.next = (self.next + 1) % self.slots.len();
        let slot = &self.slots[index];
        if !slot.mapped.load(Ordering::Acquire) {
            let wait = wgpu::PollType::Wait { submission_index: slot.last_use.clone(), timeout: None };
            device.poll(wait).map_err(|e| Error::Gpu(format!("waiting for a staging buffer: {e}")))?;
            while !slot.mapped.load(Ordering::Acquire) {
                device.poll(wgpu::PollType::Poll).map_err(|e| Error::Gpu(format!("staging: {e}")))?;
                std::thread::yield_now();
            }
        }
        Ok(index)
    }

    /// The buffer of slot `index`, mapped for writing once [`acquire`](Self::acquire) has returned
    /// its index.
    pub(crate) fn slot_buffer(&self, index: usize) -> &wgpu::Buffer {
        &self.slots[index].buffer
    }

    /// Unmaps an acquired slot and encodes `copies` (slot offset, bytes, destination,
    /// destination offset) out of it.
    pub fn commit(&mut self, index: usize, encoder: &mut wgpu::CommandEncoder, copies: &[(u64, u64, &wgpu::Buffer, u64)]) {
        self.encode(index, encoder, copies);
        self.release(index);
    }

    /// Encodes `copies` out of an acquired slot that is still mapped: wgpu checks the map
    /// state at submission, so the copies can be recorded before the data is written, as
    /// long as `release` comes before the submission.
    pub fn encode(&self, index: usize, encoder: &mut wgpu::CommandEncoder, copies: &[(u64, u64, &wgpu::Buffer, u64)]) {
        let slot = &self.slots[index];
        for &(at, len, dst, dst_offset) in copies {
            if len > 0 {
                encoder.copy_buffer_to_buffer(&slot.buffer, at, dst, dst_offset, len);
            }
        }
    }

    /// Unmaps an acquired slot once its contents are written.
    pub fn release(&mut self, index: usize) {
        let slot = &self.slots[index];
        slot.buffer.unmap();
        slot.mapped.store(false, Ordering::Release);
    }

    /// Re-maps slot `index` for writing once the GPU is done copying out of it.
    pub fn submitted(&mut self, index: usize, submission: wgpu::SubmissionIndex) {
        let slot = &mut self.slots[index];
        slot.last_use = Some(submission);
        let flag = slot.mapped.clone();
        slot.buffer.map_async(wgpu::MapMode::Write, .., move |r| {
            if r.is_ok() {
                flag.store(true, Ordering::Release);
            }
        });
    }
}

/// A MAP_READ buffer with a pending-map flag, for reading results back without a full
/// device wait (loss sums, gradient buckets).
pub struct Readback {
    /// The MAP_READ buffer the GPU copies into.
    pub buffer: wgpu::Buffer,
    ready: Arc<AtomicBool>,
    pending: Option<wgpu::SubmissionIndex>,
}

impl Readback {
    /// A readback of `size` bytes (rounded up to whole words), not yet mapped.
    pub fn new(device: &wgpu::Device, size: u64) -> Self {
        let size = size.max(4).div_ceil(4) * 4;
        Readback {
            buffer: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            ready: Arc::new(AtomicBool::new(false)),
            pending: None,
        }
    }

    /// Asks for the mapping after `submission`, the one that filled the buffer.
    pub fn request(&mut self, submission: wgpu::SubmissionIndex) {
        self.ready.store(false, Ordering::Release);
        let flag = self.ready.clone();
        self.buffer.map_async(wgpu::MapMode::Read, .., move |r| {
            if r.is_ok() {
                flag.store(true, Ordering::Release);
            }
        });
        self.pending = Some(submission);
    }

    /// Whether a mapping was requested and its data not yet taken.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Waits for the submission that filled it (not for later ones), copies `len` bytes out
    /// and unmaps.
    pub fn take(&mut self, device: &wgpu::Device, len: usize, out: &mut Vec<u8>) -> Result<()> {
        self.wait(device, false)?;
        out.clear();
        out.extend_from_slice(&self.buffer.get_mapped_range(..len as u64).map_err(|e| Error::Gpu(format!("readback map: {e:?}")))?);
        self.finish();
        Ok(())
    }

    /// Waits until the buffer is mapped and leaves it mapped, for reading in place
    /// (`buffer.get_mapped_range`, from several threads) until `finish`. With `spin` it
    /// polls the device in a loop instead of sleeping on the fence: a sleeping thread woke
    /// 100-250 us after an H200 finished a gradient bucket, 3% of a resnet20 step (two-GPU
    /// efficiency 92.3-94.3% sleeping, 96.2-96.3% spinning). Only worth a core where the
    /// device is not the CPU itself.
    pub fn wait(&mut self, device: &wgpu::Device, spin: bool) -> Result<()> {
        let Some(submission) = self.pending.take() else {
            return Err(Error::Gpu("readback taken before it was requested".into()));
        };
        if !spin {
            let wait = wgpu::PollType::Wait { submission_index: Some(submission), timeout: None };
            device.poll(wait).map_err(|e| Error::Gpu(format!("waiting for a readback: {e}")))?;
        }
        while !self.ready.load(Ordering::Acquire) {
            device.poll(wgpu::PollType::Poll).map_err(|e| Error::Gpu(format!("readback: {e}")))?;
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Unmaps after `wait`.
    pub fn finish(&mut self) {
        self.buffer.unmap();
    }
}
