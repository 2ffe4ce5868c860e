//! SmartIO (device lending): borrowing PCIe devices of the cluster, connecting to their
//! memory (BARs and device segments) and mapping segments for them.
//!
//! A software fabric has no PCIe device to lend: the device list is empty and borrowing any
//! fabric device id fails with `SCI_ERR_NO_SUCH_FDID`. For testing programs' control flow,
//! `LANES_SISCI_FAKE_DEVICES` describes devices backed by ordinary memory ([`FAKE_DEVICES_ENV`]):
//! such a device belongs to the process, its memory (BAR 0, device segments) is segments of
//! the process's own node, connected through the segment calls (so that `SCIMapRemoteSegment`,
//! sequences, `SCIMemCpy` and DMA work on it as on any remote segment), and mapping a segment
//! "for the device" hands out made-up bus addresses that nothing reads.
//!
//! Also here: PCIe requesters (`SCIRegisterPCIeRequester`), recorded per descriptor.

use std::collections::HashMap;
use std::ffi::{c_char, c_uint, c_ulonglong, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError, Weak};

use lanes::LocalSegment;

use crate::consts::*;
use crate::error::{fail, Code, SciResult};
use crate::ffi::{adapter, call, call_quiet, flags, get_in, need, put};
use crate::node::{desc, Desc};
use crate::registry::{self, Handle, Object};
use crate::segment::{LSeg, RSeg, RemoteSegmentCb};

/// The environment variable that describes fake devices: `FDID[:BAR0_SIZE[:CLASS[:VENDOR[:DEVICE]]]]`,
/// separated by commas (numbers decimal or `0x`-hex; sizes with an optional `K`, `M` or `G`).
pub const FAKE_DEVICES_ENV: &str = "LANES_SISCI_FAKE_DEVICES";

/// The largest BAR 0 a fake device may have (1 GiB).
pub const MAX_FAKE_BAR: u64 = 1 << 30;

/// A device described by [`FAKE_DEVICES_ENV`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeDevice {
    /// Its fabric device id (not 0).
    pub fdid: u32,
    /// The size of its BAR 0 in bytes.
    pub bar0_size: u64,
    /// Its PCI class code (24 bits).
    pub class: u32,
    /// Its PCI vendor id.
    pub vendor: u16,
    /// Its PCI device id.
    pub device: u16,
}

fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    number(digits)?.checked_mul(unit)
}

/// Parses the value of [`FAKE_DEVICES_ENV`].
pub fn parse_fake_devices(text: &str) -> Result<Vec<FakeDevice>, String> {
    let mut devices: Vec<FakeDevice> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let fields: Vec<&str> = entry.split(':').collect();
        if fields.len() > 5 {
            return Err(format!("{entry:?}: more than FDID:BAR0_SIZE:CLASS:VENDOR:DEVICE"));
        }
        let field = |i: usize| fields.get(i).copied().filter(|f| !f.trim().is_empty());
        let fdid = number(fields[0])
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n != 0)
            .ok_or_else(|| format!("{entry:?}: the fabric device id must be a number from 1 to 0xFFFFFFFF"))?;
        let bar0_size = match field(1) {
            None => 4096,
            Some(f) => size(f)
                .filter(|&s| s > 0 && s <= MAX_FAKE_BAR)
                .ok_or_else(|| format!("{entry:?}: BAR 0 size {f:?} is not a size from 1 byte to 1G"))?,
        };
        let class = match field(2) {
            None => 0,
            Some(f) => number(f)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n <= 0xFF_FFFF)
                .ok_or_else(|| format!("{entry:?}: class {f:?} is not a 24-bit number"))?,
        };
        let id16 = |i: usize, what: &str| -> Result<u16, String> {
            match field(i) {
                None => Ok(0),
                Some(f) => number(f)
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| format!("{entry:?}: {what} {f:?} is not a 16-bit number")),
            }
        };
        let (vendor, device) = (id16(3, "vendor id")?, id16(4, "device id")?);
        if devices.iter().any(|d| d.fdid == fdid) {
            return Err(format!("fabric device id {fdid:#x} is described twice"));
        }
        devices.push(FakeDevice { fdid, bar0_size, class, vendor, device });
    }
    Ok(devices)
}

/// The fake devices of this process (the environment is read once).
fn fake_devices() -> SciResult<&'static [FakeDevice]> {
    static PARSED: OnceLock<Result<Vec<FakeDevice>, String>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| match std::env::var(FAKE_DEVICES_ENV) {
        Ok(text) => parse_fake_devices(&text),
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(_)) => Err("not UTF-8".into()),
    });
    match parsed {
        Ok(devices) => Ok(devices),
        Err(message) => Err(lanes::Error::Config { path: FAKE_DEVICES_ENV.into(), message: message.clone() }.into()),
    }
}

/// `sci_smartio_device_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceInfo {
    pub fdid: u64,
    pub pci_device_id: u16,
    pub pci_vendor_id: u16,
    pub pci_class: u32,
    pub pci_subsystem_device_id: u16,
    pub pci_subsystem_vendor_id: u16,
    pub pci_serial_number: u64,
    pub remote_bdf: u16,
    pub local_bdf: u16,
    pub adapter: u32,
    pub nodeid: u32,
    pub physical_slot: i32,
    pub user_name: [c_char; 64],
    pub uuid: [c_char; 37],
}

/// `sci_smartio_query_device_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QueryDevice {
    pub fdid: u64,
    pub subcommand: c_uint,
    pub data: *mut c_void,
}

impl FakeDevice {
    fn info(&self, node: u32) -> DeviceInfo {
        let mut user_name = [0 as c_char; 64];
        let name = format!("lanes-fake-device-{:#x}", self.fdid);
        for (d, s) in user_name.iter_mut().zip(name.bytes().take(63)) {
            *d = s as c_char;
        }
        DeviceInfo {
            fdid: u64::from(self.fdid),
            pci_device_id: self.device,
            pci_vendor_id: self.vendor,
            pci_class: self.class,
            pci_subsystem_device_id: 0,
            pci_subsystem_vendor_id: 0,
            pci_serial_number: u64::from(self.fdid),
            remote_bdf: 0,
            local_bdf: 0,
            adapter: 0,
            nodeid: node,
            physical_slot: -1,
            user_name,
            uuid: [0; 37],
        }
    }

    /// Whether the device passes `filter` (members left 0 match every device).
    fn matches(&self, f: &DeviceInfo) -> bool {
        let eq = |want: u64, have: u64| want == 0 || want == have;
        eq(f.fdid, u64::from(self.fdid))
            && eq(f.pci_device_id.into(), self.device.into())
            && eq(f.pci_vendor_id.into(), self.vendor.into())
            && eq(f.pci_class.into(), self.class.into())
            && f.pci_subsystem_device_id == 0
            && f.pci_subsystem_vendor_id == 0
    }
}

/// A fake device's state in this process: who borrowed it, and its memory.
struct DevState {
    spec: FakeDevice,
    borrowers: usize,
    exclusive: bool,
    /// Its memory, by (memory type, segment id): segments of this process's node.
    segments: HashMap<(u32, u32), LocalSegment>,
}

static DEVICES: LazyLock<Mutex<HashMap<u32, DevState>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn devices() -> std::sync::MutexGuard<'static, HashMap<u32, DevState>> {
    DEVICES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A borrowed device (`sci_smartio_device_t`).
pub struct Dev {
    fdid: u32,
    exclusive: AtomicBool,
    /// The device segments this handle connected (to refuse returning it while they are).
    conns: Mutex<Vec<Weak<Handle<RSeg>>>>,
    /// Segments mapped for the device: (segment handle, is local) -> bus address.
    io: Mutex<HashMap<(usize, bool), u64>>,
}

impl Object for Dev {
    const MAGIC: u32 = 0x4F49_4D53; // "SMIO"
}

impl Drop for Dev {
    /// Returning the device (or closing its descriptor): the last borrower's return removes
    /// the device's memory.
    fn drop(&mut self) {
        let removed = {
            let mut all = devices();
            let Some(st) = all.get_mut(&self.fdid) else { return };
            st.borrowers = st.borrowers.saturating_sub(1);
            if *self.exclusive.get_mut() {
                st.exclusive = false;
            }
            if st.borrowers == 0 {
                std::mem::take(&mut st.segments)
            } else {
                HashMap::new()
            }
        };
        drop(removed);
    }
}

impl Dev {
    /// How many of the device segments this handle connected are still connected.
    fn connected(&self, reg: &registry::Entries) -> usize {
        // A Weak keeps its allocation, so a handle still registered at that address is the
        // connection itself, not a later one.
        let mut conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        conns.retain(|w| reg.get::<RSeg>(w.as_ptr().cast()).is_ok());
        conns.len()
    }
}

/// The bus addresses handed out by the `Map...ForDevice` calls: a 64 GiB window each, at an
/// address no real device uses here.
fn next_io_window() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    0x4000_0000_0000 + NEXT.fetch_add(1, Ordering::Relaxed) % 0x4000 * 0x10_0000_0000
}

fn clear(out: *mut *mut c_void) {
    if !out.is_null() {
        // SAFETY: the API's contract: a non-NULL out-handle points to a writable handle.
        unsafe { out.write_unaligned(std::ptr::null_mut()) };
    }
}

fn this_node(d: &Desc) -> u32 {
    d.fabric.node_id().get()
}

pub(crate) fn get_device_list(
    sd: *mut c_void,
    fdids: *mut c_uint,
    length: usize,
    filter: *const DeviceInfo,
    fl: c_uint,
    error: *mut SciError,
) -> usize {
    call(error, 0, || {
        desc(sd)?;
        flags(fl, 0)?;
        if fdids.is_null() && length > 0 {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let filter = if filter.is_null() { None } else { Some(get_in(filter)?) };
        let mut n = 0;
        for dev in fake_devices()?.iter().filter(|d| filter.as_ref().is_none_or(|f| d.matches(f))) {
            if n == length {
                break;
            }
            // SAFETY: the API's contract: `fdids` holds `length` writable entries; n < length.
            unsafe { fdids.add(n).write_unaligned(dev.fdid) };
            n += 1;
        }
        Ok(n)
    })
}

pub(crate) fn borrow_device(
    sd: *mut c_void,
    device: *mut *mut c_void,
    fdid: c_ulonglong,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        clear(device);
        let d = desc(sd)?;
        need(device)?;
        flags(fl, SCI_FLAG_EXCLUSIVE)?;
        // Fabric device ids are 32-bit (SCIGetDeviceList lists them so); the upper half of
        // the argument is not looked at, whichever width the caller passed.
        let fdid = (fdid & 0xFFFF_FFFF) as u32;
        let spec = fake_devices()?.iter().find(|f| f.fdid == fdid).ok_or(Code(SCI_ERR_NO_SUCH_FDID))?;
        let exclusive = fl & SCI_FLAG_EXCLUSIVE != 0;
        {
            let mut all = devices();
            let st = all.entry(fdid).or_insert_with(|| DevState {
                spec: spec.clone(),
                borrowers: 0,
                exclusive: false,
                segments: HashMap::new(),
            });
            if st.exclusive || (exclusive && st.borrowers > 0) {
                return fail(SCI_ERR_NOT_AVAILABLE);
            }
            st.borrowers += 1;
            st.exclusive = exclusive;
        }
        let body = Dev {
            fdid,
            exclusive: AtomicBool::new(exclusive),
            conns: Mutex::new(Vec::new()),
            io: Mutex::new(HashMap::new()),
        };
        let (p, _) = registry::insert(d.key(), 0, body);
        put(device, p)
    })
}

pub(crate) fn return_device(device: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let taken = {
            let mut reg = registry::write();
            let h = reg.get::<Dev>(device)?;
            if h.body.connected(&reg) > 0 {
                return fail(SCI_ERR_BUSY);
            }
            reg.take::<Dev>(device)?
        };
        drop(taken);
        Ok(())
    })
}

pub(crate) fn release_exclusive_borrow(device: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<Dev>(device)?;
        flags(fl, 0)?;
        if !h.body.exclusive.swap(false, Ordering::AcqRel) {
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        if let Some(st) = devices().get_mut(&h.body.fdid) {
            st.exclusive = false;
        }
        Ok(())
    })
}

/// `SCIGetFabricDeviceId`; 0 for a handle that is not a borrowed device. Returned as 64 bits
/// (zero-extended), which a caller declaring it `unsigned int` reads as well.
pub(crate) fn get_fabric_device_id(device: *mut c_void) -> u64 {
    call_quiet(0, || registry::get::<Dev>(device).map_or(0, |h| u64::from(h.body.fdid)))
}

/// `SCIQuery(SCI_Q_DEVICE, ...)`.
pub(crate) fn query(q: *mut QueryDevice, fl: c_uint) -> SciResult<()> {
    flags(fl, 0)?;
    let v = get_in(q)?;
    match v.subcommand {
        SCI_Q_DEVICE_INFO => {
            need(v.data)?;
            let spec = fake_devices()?.iter().find(|f| u64::from(f.fdid) == v.fdid);
            let spec = spec.ok_or(Code(SCI_ERR_NO_SUCH_FDID))?;
            let node = lanes::FabricConfig::from_env()?.node_id.get();
            put(v.data.cast::<DeviceInfo>(), spec.info(node))
        }
        _ => fail(SCI_ERR_ILLEGAL_QUERY),
    }
}

pub(crate) fn create_device_segment(
    device: *mut c_void,
    segment_id: c_uint,
    size: usize,
    memory_type: c_uint,
    hints: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let h = registry::get::<Dev>(device)?;
        flags(
            fl,
            SCI_FLAG_DEVICE_SIDE_ONLY
                | SCI_FLAG_LOCAL_ONLY
                | SCI_FLAG_DEVICE_PREFER_BANDWIDTH
                | SCI_FLAG_HOST_PREFER_BANDWIDTH,
        )?;
        if !matches!(memory_type, SCI_MEMTYPE_PRIVATE | SCI_MEMTYPE_SHARED) || hints & !0x3F != 0 || size == 0 {
            // A BAR is the device's own, not made; hints are the SCI_MEMACCESS_ bits.
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let d = desc(h.desc as *mut c_void)?;
        let mut all = devices();
        let st = all.get_mut(&h.body.fdid).ok_or(Code(SCI_ERR_NO_SUCH_FDID))?;
        if st.segments.contains_key(&(memory_type, segment_id)) {
            return fail(SCI_ERR_SEGMENTID_USED);
        }
        let seg = d.body.fabric.create_segment_auto_id(size as u64)?;
        seg.prepare()?;
        seg.set_available()?;
        st.segments.insert((memory_type, segment_id), seg);
        Ok(())
    })
}

/// The segment of this node that holds device memory (memory type, segment id); BAR 0 is
/// made at its first connection.
fn device_memory(h: &Handle<Dev>, d: &Handle<Desc>, segment_id: u32, memory_type: u32) -> SciResult<u32> {
    let mut all = devices();
    let st = all.get_mut(&h.body.fdid).ok_or(Code(SCI_ERR_NO_SUCH_FDID))?;
    match memory_type {
        SCI_MEMTYPE_BAR if segment_id == 0 => {
            if let Some(s) = st.segments.get(&(SCI_MEMTYPE_BAR, 0)) {
                return Ok(s.id());
            }
            let seg = d.body.fabric.create_segment_auto_id(st.spec.bar0_size)?;
            seg.prepare()?;
            seg.set_available()?;
            let id = seg.id();
            st.segments.insert((SCI_MEMTYPE_BAR, 0), seg);
            Ok(id)
        }
        SCI_MEMTYPE_BAR | SCI_MEMTYPE_PRIVATE | SCI_MEMTYPE_SHARED => {
            st.segments.get(&(memory_type, segment_id)).map(LocalSegment::id).ok_or(Code(SCI_ERR_NO_SUCH_SEGMENT))
        }
        _ => fail(SCI_ERR_ILLEGAL_PARAMETER),
    }
}

/// Connects to device memory through the segment calls, on the descriptor the device was
/// borrowed through: the connection is an ordinary remote segment handle.
#[allow(clippy::too_many_arguments)]
fn connect(
    device: *mut c_void,
    segment: *mut *mut c_void,
    segment_id: c_uint,
    memory_type: c_uint,
    adapter_no: c_uint,
    callback: RemoteSegmentCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    allowed: c_uint,
    error: *mut SciError,
) {
    let found = call(error, None, || {
        clear(segment);
        let h = registry::get::<Dev>(device)?;
        need(segment)?;
        flags(fl, SCI_FLAG_USE_CALLBACK | allowed)?;
        adapter(adapter_no)?;
        let d = desc(h.desc as *mut c_void)?;
        let id = device_memory(&h, &d, segment_id, memory_type)?;
        Ok(Some((h, d.key(), this_node(&d.body), id)))
    });
    let Some((h, sd, node, id)) = found else { return };
    let mut code = SCI_ERR_OK;
    let fl = fl & SCI_FLAG_USE_CALLBACK;
    crate::segment::connect_segment(sd as *mut c_void, segment, node, id, 0, callback, callback_arg, 0, fl, &mut code);
    call_quiet((), || {
        if code == SCI_ERR_OK {
            // SAFETY: `segment` was checked non-NULL and the connection just wrote it.
            let p = unsafe { segment.read_unaligned() };
            if let Ok(r) = registry::get::<RSeg>(p) {
                h.body.conns.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::downgrade(&r));
            }
        }
        if !error.is_null() {
            // SAFETY: the API's contract: a non-NULL `error` points to a writable sci_error_t.
            unsafe { error.write(code) };
        }
    });
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_device_segment(
    device: *mut c_void,
    segment: *mut *mut c_void,
    segment_id: c_uint,
    memory_type: c_uint,
    callback: RemoteSegmentCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    connect(device, segment, segment_id, memory_type, 0, callback, callback_arg, fl, 0, error);
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_device_segment_path(
    device: *mut c_void,
    segment: *mut *mut c_void,
    segment_id: c_uint,
    memory_type: c_uint,
    adapter_no: c_uint,
    callback: RemoteSegmentCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    let allowed = SCI_FLAG_SPECIFY_PATH | SCI_FLAG_SPECIFY_SLOT;
    connect(device, segment, segment_id, memory_type, adapter_no, callback, callback_arg, fl, allowed, error);
}

/// Records a segment as mapped for the device and gives its bus address.
fn io_map(h: &Handle<Dev>, key: (usize, bool), offset: usize, size: usize, segment_size: u64) -> SciResult<u64> {
    if size == 0 {
        return fail(SCI_ERR_ILLEGAL_PARAMETER);
    }
    if offset.checked_add(size).is_none_or(|end| end as u64 > segment_size) {
        return fail(SCI_ERR_OUT_OF_RANGE);
    }
    let mut io = h.body.io.lock().unwrap_or_else(PoisonError::into_inner);
    let base = *io.entry(key).or_insert_with(next_io_window);
    Ok(base + offset as u64)
}

fn io_unmap(h: &Handle<Dev>, key: (usize, bool)) -> SciResult<()> {
    match h.body.io.lock().unwrap_or_else(PoisonError::into_inner).remove(&key) {
        Some(_) => Ok(()),
        None => fail(SCI_ERR_ILLEGAL_OPERATION),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn map_local_segment_for_device(
    segment: *mut c_void,
    adapter_no: c_uint,
    device: *mut c_void,
    ioaddr: *mut u64,
    offset: usize,
    size: usize,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let l = registry::get::<LSeg>(segment)?;
        let h = registry::get::<Dev>(device)?;
        need(ioaddr)?;
        flags(fl, 0)?;
        adapter(adapter_no)?;
        let seg_size = l.body.live()?.size();
        put(ioaddr, io_map(&h, (segment as usize, true), offset, size, seg_size)?)
    })
}

pub(crate) fn unmap_local_segment_for_device(
    segment: *mut c_void,
    adapter_no: c_uint,
    device: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        registry::get::<LSeg>(segment)?;
        let h = registry::get::<Dev>(device)?;
        flags(fl, 0)?;
        adapter(adapter_no)?;
        io_unmap(&h, (segment as usize, true))
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn map_remote_segment_for_device(
    segment: *mut c_void,
    device: *mut c_void,
    ioaddr: *mut u64,
    offset: usize,
    size: usize,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let r = registry::get::<RSeg>(segment)?;
        let h = registry::get::<Dev>(device)?;
        need(ioaddr)?;
        flags(fl, 0)?;
        put(ioaddr, io_map(&h, (segment as usize, false), offset, size, r.body.size())?)
    })
}

pub(crate) fn unmap_remote_segment_for_device(
    segment: *mut c_void,
    device: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        registry::get::<RSeg>(segment)?;
        let h = registry::get::<Dev>(device)?;
        flags(fl, 0)?;
        io_unmap(&h, (segment as usize, false))
    })
}

/// Registered PCIe requesters: (descriptor, adapter, bus, device/function).
type Requester = (Weak<Handle<Desc>>, u32, u32, u32);

static REQUESTERS: Mutex<Vec<Requester>> = Mutex::new(Vec::new());

/// The requesters of live descriptors (entries of closed ones are dropped).
fn requesters() -> std::sync::MutexGuard<'static, Vec<Requester>> {
    let mut r = REQUESTERS.lock().unwrap_or_else(PoisonError::into_inner);
    r.retain(|(w, ..)| w.strong_count() > 0 && registry::get::<Desc>(w.as_ptr().cast()).is_ok());
    r
}

fn requester_args(adapter_no: u32, bus: u32, devfn: u32) -> SciResult<()> {
    adapter(adapter_no)?;
    if bus > 0xFF || devfn > 0xFF {
        return fail(SCI_ERR_ILLEGAL_PARAMETER);
    }
    Ok(())
}

pub(crate) fn register_pcie_requester(
    sd: *mut c_void,
    adapter_no: c_uint,
    bus: c_uint,
    devfn: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        flags(fl, SCI_FLAG_PCIE_REQUESTER_GLOBAL)?;
        requester_args(adapter_no, bus, devfn)?;
        let mut r = requesters();
        if r.iter().any(|(w, a, b, f)| w.as_ptr() == Arc::as_ptr(&d) && (*a, *b, *f) == (adapter_no, bus, devfn)) {
            return fail(SCI_ERR_BUSY);
        }
        r.push((Arc::downgrade(&d), adapter_no, bus, devfn));
        Ok(())
    })
}

pub(crate) fn unregister_pcie_requester(
    sd: *mut c_void,
    adapter_no: c_uint,
    bus: c_uint,
    devfn: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        flags(fl, SCI_FLAG_PCIE_REQUESTER_GLOBAL)?;
        requester_args(adapter_no, bus, devfn)?;
        let mut r = requesters();
        let found =
            r.iter().position(|(w, a, b, f)| w.as_ptr() == Arc::as_ptr(&d) && (*a, *b, *f) == (adapter_no, bus, devfn));
        match found {
            Some(i) => {
                r.swap_remove(i);
                Ok(())
            }
            None => fail(SCI_ERR_ILLEGAL_OPERATION),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_device_descriptions_parse_and_bad_ones_say_why() {
        let d = parse_fake_devices("0x100:64K:0x010802:0x144d:0xa808, 7").expect("parses");
        assert_eq!(
            d,
            vec![
                FakeDevice { fdid: 0x100, bar0_size: 65536, class: 0x010802, vendor: 0x144d, device: 0xa808 },
                FakeDevice { fdid: 7, bar0_size: 4096, class: 0, vendor: 0, device: 0 },
            ]
        );
        assert_eq!(parse_fake_devices(" , ").expect("empty"), vec![]);
        assert_eq!(parse_fake_devices("5:1M").expect("size")[0].bar0_size, 1 << 20);
        for bad in ["0", "x", "1:0", "1:2G", "1:4K:0x1000000", "1:4K:0:0x10000", "1,1", "1:1:1:1:1:1"] {
            let e = parse_fake_devices(bad).expect_err(bad);
            assert!(!e.is_empty(), "{bad}");
        }
    }

    #[test]
    fn the_device_info_layout_is_the_c_one() {
        assert_eq!(std::mem::size_of::<DeviceInfo>(), 152);
        assert_eq!(std::mem::offset_of!(DeviceInfo, pci_serial_number), 24);
        assert_eq!(std::mem::offset_of!(DeviceInfo, user_name), 48);
        assert_eq!(std::mem::offset_of!(DeviceInfo, uuid), 112);
        assert_eq!(std::mem::size_of::<QueryDevice>(), 24);
    }
}
