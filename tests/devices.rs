//! Adapters, device selection, opening several devices, tensor round trips and views, and
//! the staging ring, on the software adapter (Mesa's lavapipe) every machine can have.

use std::sync::{Arc, OnceLock};

use convoy::device::{self, AdapterEntry, Readback, StagingRing};
use convoy::kernels::elementwise;
use convoy::{DType, Device, Error};

fn all() -> Vec<AdapterEntry> {
    device::adapters()
}

/// Two replicas on the software adapter, shared by the tests of this binary.
fn pair() -> &'static [Arc<Device>] {
    static PAIR: OnceLock<Vec<Arc<Device>>> = OnceLock::new();
    PAIR.get_or_init(|| device::open("software:2").expect("two software devices"))
}

fn software(all: &[AdapterEntry]) -> &AdapterEntry {
    all.iter().find(|a| a.is_software()).expect("a software adapter (install mesa-vulkan-drivers)")
}

#[test]
fn adapters_include_the_software_one_with_unique_indices() {
    let all = all();
    let soft = software(&all);
    assert_eq!(soft.info.device_type, wgpu::DeviceType::Cpu);
    let indices: Vec<usize> = all.iter().map(|a| a.index).collect();
    assert_eq!(indices, (0..all.len()).collect::<Vec<_>>(), "indices are positions in the list");
    // Hardware is listed first, so `0` is a GPU wherever there is one.
    let first_soft = all.iter().position(|a| a.is_software()).unwrap();
    assert!(all[first_soft..].iter().all(|a| a.is_software()), "a hardware adapter is listed after a software one");
}

#[test]
fn resolve_accepts_every_selection_form() {
    let all = all();
    let soft = software(&all);

    let default = device::resolve("all", &all).unwrap();
    let hardware: Vec<usize> = all.iter().filter(|a| !a.is_software()).map(|a| a.index).collect();
    let picked: Vec<usize> = default.iter().map(|a| a.index).collect();
    if hardware.is_empty() {
        assert_eq!(picked, vec![soft.index], "`all` without hardware is the software adapter");
    } else {
        assert_eq!(picked, hardware, "`all` is every hardware adapter");
    }
    assert_eq!(device::resolve("", &all).unwrap().len(), default.len(), "empty means `all`");

    let one = device::resolve("software", &all).unwrap();
    assert_eq!(one.len(), 1);
    assert!(one[0].is_software());

    let three = device::resolve("software:3", &all).unwrap();
    assert_eq!(three.len(), 3);
    assert!(three.iter().all(|a| a.is_software() && a.index == soft.index));

    let zero = device::resolve("0", &all).unwrap();
    assert_eq!(zero.len(), 1);
    assert_eq!(zero[0].index, 0);

    // A substring of the name, in another case: `llvmpipe (LLVM ...)` answers to `LLVMPIPE`.
    let word = soft.info.name.split_whitespace().next().unwrap().to_uppercase();
    let by_name = device::resolve(&word, &all).unwrap();
    assert!(!by_name.is_empty());
    assert!(by_name.iter().all(|a| a.info.name.to_uppercase().contains(&word)));
    assert!(by_name.iter().any(|a| a.index == soft.index));

    let list = device::resolve(&format!("{0},{0}", soft.index), &all).unwrap();
    assert_eq!(list.len(), 2, "a list picks each entry");

    // `software` and `software:N` inside a list, in order.
    let mixed = device::resolve("0,software", &all).unwrap();
    assert_eq!(mixed.iter().map(|a| a.index).collect::<Vec<_>>(), vec![0, soft.index]);
    let mixed = device::resolve(&format!("software:2, {}", soft.index), &all).unwrap();
    assert_eq!(mixed.len(), 3);
    assert!(mixed.iter().all(|a| a.index == soft.index));
    assert!(device::resolve("0,software:0", &all).is_err());
    assert!(device::resolve("0,softwarex", &all).is_err());
}

#[test]
fn resolve_explains_what_it_refuses() {
    let all = all();
    for (sel, mention) in [
        ("software:0", "software:0"),
        ("software:abc", "software:abc"),
        ("software:65", "1 to 64"),
        ("softwarex", "softwarex"),
        ("99", "99"),
        ("no-such-adapter-name", "no-such-adapter-name"),
    ] {
        match device::resolve(sel, &all) {
            Err(Error::Device(msg)) => assert!(msg.contains(mention), "`{sel}`: message `{msg}` does not mention `{mention}`"),
            other => panic!("`{sel}` should be a device error, got {other:?}"),
        }
    }
    // The unmatched-name error lists what exists, so the user can pick.
    let msg = device::resolve("no-such-adapter-name", &all).unwrap_err().to_string();
    assert!(msg.contains(&software(&all).info.name), "{msg}");
    assert!(matches!(device::resolve("all", &[]), Err(Error::Device(_))), "no adapters at all");
    assert!(device::open("99").is_err(), "open refuses what resolve refuses");
}

#[test]
fn two_software_devices_are_independent_and_round_trip_data() {
    let devices = pair();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices.iter().map(|d| d.ordinal).collect::<Vec<_>>(), vec![0, 1]);
    assert_ne!(devices[0].wgpu(), devices[1].wgpu(), "one wgpu device per replica");

    for (k, d) in devices.iter().enumerate() {
        let f: Vec<f32> = (0..1001).map(|i| i as f32 * 0.5 - 7.0 + k as f32 * 1000.0).collect();
        let tf = d.upload(&[7, 11, 13], &f).unwrap();
        assert_eq!((tf.shape(), tf.dtype()), (&[7, 11, 13][..], DType::F32));
        assert_eq!(d.read(&tf).unwrap(), f);

        let u: Vec<u32> = (0..333).map(|i: u32| i.wrapping_mul(2_654_435_761).wrapping_add(k as u32)).collect();
        let tu = d.upload_u32(&[333], &u).unwrap();
        assert_eq!(d.read_u32(&tu).unwrap(), u);
        assert!(d.read(&tu).is_err(), "a u32 tensor is not read as f32");

        // 3 x 5 x 5 bytes: 75, not a whole number of words; the tail is zero-padded.
        let b: Vec<u8> = (0..75).map(|i| (i * 7 + k * 3) as u8).collect();
        let tb = d.upload_u8(&[3, 5, 5], &b).unwrap();
        let back = d.read_bytes(&tb).unwrap();
        assert_eq!(back.len(), 76);
        assert_eq!(&back[..75], &b[..]);
        assert_eq!(back[75], 0);

        assert!(d.upload(&[2, 3], &[1.0; 5]).is_err(), "element count must match the shape");

        // Each device compiles and runs its own pipelines.
        let out = d.zeros(&[1001]).unwrap();
        d.run(&[elementwise::scale(d, &tf, 2.0, &out).unwrap()]);
        d.sync().unwrap();
        assert_eq!(d.read(&out).unwrap(), f.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    }
}

#[test]
fn tensors_on_one_device_do_not_see_the_other() {
    let [a, b] = pair() else { panic!("two devices") };
    let ta = a.upload(&[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let tb = b.upload(&[4], &[5.0, 6.0, 7.0, 8.0]).unwrap();
    a.write(&ta, &[9.0f32, 9.0, 9.0, 9.0]).unwrap();
    assert_eq!(b.read(&tb).unwrap(), vec![5.0, 6.0, 7.0, 8.0]);
    assert_eq!(a.read(&ta).unwrap(), vec![9.0; 4]);
}

#[test]
fn views_are_aligned_and_in_range() {
    let d = &pair()[0];
    let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let t = d.upload(&[1000], &data).unwrap();

    // 64 f32 = 256 bytes: the binding offset alignment every adapter accepts.
    let v = t.view(128, &[10, 5]).unwrap();
    assert_eq!((v.offset(), v.shape()), (t.offset() + 512, &[10, 5][..]));
    assert!(v.same_storage(&t) && v.overlaps(&t));
    assert_eq!(d.read(&v).unwrap(), data[128..178]);
    let inner = v.view(0, &[3]).unwrap();
    assert_eq!(d.read(&inner).unwrap(), data[128..131]);
    let nested = t.view(64, &[500]).unwrap().view(64, &[10]).unwrap();
    assert_eq!(d.read(&nested).unwrap(), data[128..138], "offsets of views add up");

    assert!(!t.view(0, &[64]).unwrap().overlaps(&t.view(64, &[64]).unwrap()), "adjacent views do not overlap");
    assert!(t.view(896, &[104]).is_ok(), "a view may end exactly at the end");

    for (start, shape) in [(1, vec![4]), (63, vec![1]), (100, vec![2])] {
        let err = t.view(start, &shape).unwrap_err();
        assert!(matches!(err, Error::Shape(_)) && err.to_string().contains("aligned"), "misaligned view at {start}: {err}");
    }
    for (start, shape) in [(0, vec![1001]), (960, vec![41]), (1024, vec![1]), (64, vec![10, 100])] {
        let err = t.view(start, &shape).unwrap_err();
        assert!(matches!(err, Error::Shape(_)) && err.to_string().contains("exceeds"), "view {shape:?} at {start}: {err}");
    }
    // Alignment is of the byte offset in the buffer, the parent view's offset included.
    assert!(t.view(64, &[500]).unwrap().view(1, &[4]).is_err());
    // A u8 view counts bytes: 256 elements are one aligned step.
    let u8s = d.upload_u8(&[600], &[7u8; 600]).unwrap();
    assert!(u8s.view(256, &[100]).is_ok());
    assert!(u8s.view(4, &[100]).is_err());
}

#[test]
fn staging_ring_uploads_more_batches_than_slots() {
    let d = &pair()[1];
    let (slots, batches, n) = (2, 7, 300);
    // Exactly what one batch needs: 300 f32, 37 bytes padded to 40, 100 f32.
    let capacity = (n * 4 + 40 + 400) as u64;
    let mut ring = StagingRing::new(d.wgpu(), slots, capacity);
    assert_eq!(ring.capacity(), capacity);
    let targets: Vec<_> = (0..batches).map(|_| d.zeros(&[n]).unwrap()).collect();
    let last = d.zeros(&[n]).unwrap();
    let labels = d.zeros_of(&[37], DType::U8).unwrap();
    let batch = |k: usize| -> Vec<f32> { (0..n).map(|i| (k * 1000 + i) as f32).collect() };
    let bytes_of = |k: usize| -> Vec<u8> { (0..37).map(|i| (k * 31 + i) as u8).collect() };

    // No wait between batches: slot reuse must wait for its previous copy by itself.
    for k in 0..batches {
        let (b, l) = (batch(k), bytes_of(k));
        let mut enc = d.wgpu().create_command_encoder(&Default::default());
        let parts: [(&[u8], &wgpu::Buffer, u64); 3] = [
            (bytemuck::cast_slice(&b), targets[k].buffer(), targets[k].offset()),
            (&l, labels.buffer(), labels.offset()),
            (bytemuck::cast_slice(&b[..100]), last.buffer(), last.offset()),
        ];
        let slot = ring.stage(d.wgpu(), &mut enc, &parts).unwrap();
        assert_eq!(slot, k % slots, "slots are used in turn");
        let submission = d.queue().submit([enc.finish()]);
        ring.submitted(slot, submission);
    }
    d.sync().unwrap();
    for (k, t) in targets.iter().enumerate() {
        assert_eq!(d.read(t).unwrap(), batch(k), "batch {k}");
    }
    let mut want_last = batch(batches - 1)[..100].to_vec();
    want_last.resize(n, 0.0);
    assert_eq!(d.read(&last).unwrap(), want_last, "later batches overwrite earlier ones");
    assert_eq!(&d.read_bytes(&labels).unwrap()[..37], &bytes_of(batches - 1)[..], "an odd byte count is padded, not lost");

    // A batch that does not fit is an error, not a partial copy.
    let big = vec![0u8; ring.capacity() as usize + 4];
    let mut enc = d.wgpu().create_command_encoder(&Default::default());
    assert!(ring.stage(d.wgpu(), &mut enc, &[(&big, last.buffer(), 0)]).is_err());
}

#[test]
fn readbacks_arrive_whether_waited_on_sleeping_or_spinning() {
    let d = &pair()[0];
    let n = 513;
    let mut readback = Readback::new(d.wgpu(), 4 * n as u64);
    for (round, spin) in [false, true, false, true].into_iter().enumerate() {
        let want: Vec<f32> = (0..n).map(|i| (round * 10_000 + i) as f32).collect();
        let t = d.upload(&[n], &want).unwrap();
        let mut enc = d.wgpu().create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(t.buffer(), t.offset(), &readback.buffer, 0, 4 * n as u64);
        readback.request(d.queue().submit([enc.finish()]));
        readback.wait(d.wgpu(), spin).unwrap();
        let got: Vec<f32> = bytemuck::cast_slice(&readback.buffer.get_mapped_range(..).unwrap()).to_vec();
        readback.finish();
        assert_eq!(got, want, "round {round}, spin {spin}");
    }
    assert!(readback.wait(d.wgpu(), true).is_err(), "a wait without a request is an error, not a hang");
}

#[test]
fn open_with_compiles_shaders_as_asked() {
    use convoy::device::ShaderChecks;
    for checks in [ShaderChecks::Checked, ShaderChecks::Unchecked] {
        let d = device::open_with("software", checks).unwrap().remove(0);
        assert_eq!(d.shader_checks(), checks);
        assert_eq!(d.is_checked(), checks == ShaderChecks::Checked);
        // A kernel runs on either variant and gives the same answer.
        let x = d.upload(&[5], &[-2.0, -0.5, 0.0, 0.5, 2.0]).unwrap();
        let y = d.alloc(&[5], DType::F32).unwrap();
        let dispatch = elementwise::relu_forward(&d, &x, &y).unwrap();
        d.run(&[dispatch]);
        d.sync().unwrap();
        assert_eq!(d.read(&y).unwrap(), vec![0.0, 0.0, 0.0, 0.5, 2.0], "{checks:?}");
    }
}
