//! `libsisci.so`: the SISCI C API over the Lanes fabric.
//!
//! Programs written for the vendor's SISCI API build against the headers in `include/`
//! (installed by `lanes sdk install`) and link with `-lsisci`; each call is a thin layer over
//! the Rust fabric API ([`lanes`]). What the C side sees:
//!
//! - Handles are addresses of registered objects; the process-wide registry (`registry.rs`) detects
//!   stale or garbage handles instead of dereferencing them.
//! - Every entry point stops panics at the boundary (`ffi::call`), writes `*error` only if
//!   `error` is not NULL, and refuses NULL out-parameters.
//! - The fabric's errors become `sci_error_t` codes in one function, [`error::code_of`].
//!   Each thread keeps its last failure's full message: `SCIGetErrorString`, asked for that
//!   failure's code, gives it. A failure whose code cannot tell its cause (a corrupt or
//!   hostile file in the fabric directory, a configuration error, a failed system call) is
//!   also reported as one line on stderr (`LANES_SISCI_QUIET=1` silences it;
//!   `LANES_SISCI_DEBUG=1` reports every failed call). Nothing is ever written to stdout.
//! - Callbacks run on library threads.
//! - Each function is exported under its plain name and as `_SISCI_PUBLIC_FUNC_ST_<Name>` and
//!   `_SISCI_PUBLIC_FUNC_MT_<Name>`, the vendor library's names (for `dlsym`); the few the
//!   vendor exports without declaring them ([`UNDECLARED_EXPORTS`]) under their plain names.
//! - The whole vendor API is declared and exported; what Lanes does for each function and
//!   flag (the same, an emulation, or the vendor's error) is in docs/sisci-compat.md.
//!
//! The data path adds nothing: a map's pointer is the fabric's own mapping, so PIO through it
//! is plain CPU loads and stores.

mod compat;
pub mod conditional;
pub mod consts;
mod dma;
pub mod error;
mod ffi;
mod interrupt;
mod map;
mod node;
mod registry;
mod segment;
pub mod smartio;
mod unsupported;

pub use compat::C_LAYOUTS;

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

use consts::SciError;
use interrupt::{DataInterruptCb, InterruptCb};
use segment::{LocalSegmentCb, RemoteSegmentCb};

/// At the process's exit (after its atexit handlers, before the libraries this one depends
/// on are finalized, libfabric among them): the fabric's background threads stop calling
/// the provider, whose destructor would free what they use (as the socket library does).
extern "C" fn at_unload() {
    let _ = std::panic::catch_unwind(lanes::transport::quiesce_for_exit);
}

#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;

/// The C headers, for installers (`lanes sdk install`): (path under `include/`, contents).
pub const HEADERS: &[(&str, &str)] = &[
    ("sisci_api.h", include_str!("../include/sisci_api.h")),
    ("sisci_types.h", include_str!("../include/sisci_types.h")),
    ("sisci_error.h", include_str!("../include/sisci_error.h")),
    ("sisci_api_macros.h", include_str!("../include/sisci_api_macros.h")),
    ("dis_types.h", include_str!("../include/dis_types.h")),
    ("dis/dis_types.h", include_str!("../include/dis/dis_types.h")),
];

/// `sci_dma_queue_t` callbacks (`sci_cb_dma_t`).
pub type DmaCb = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, SciError) -> u32>;

/// Exports each function under its plain name and the two vendor aliases, each a thin
/// wrapper around one implementation.
macro_rules! exports {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)? = $imp:path; )*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`, as declared in `sisci_api.h`.")]
            ///
            /// # Safety
            /// Pointer arguments must be NULL or valid as the SISCI API documents them;
            /// handles are checked against the registry of live handles.
            #[no_mangle]
            #[allow(non_snake_case)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                $imp($($arg),*)
            }
        )*

        /// The `_SISCI_PUBLIC_FUNC_ST_<Name>` exports.
        pub mod st_aliases {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("`_SISCI_PUBLIC_FUNC_ST_", stringify!($name), "`.")]
                ///
                /// # Safety
                /// As for the plain name.
                #[export_name = concat!("_SISCI_PUBLIC_FUNC_ST_", stringify!($name))]
                #[allow(non_snake_case)]
                pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                    $imp($($arg),*)
                }
            )*
        }

        /// The `_SISCI_PUBLIC_FUNC_MT_<Name>` exports.
        pub mod mt_aliases {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("`_SISCI_PUBLIC_FUNC_MT_", stringify!($name), "`.")]
                ///
                /// # Safety
                /// As for the plain name.
                #[export_name = concat!("_SISCI_PUBLIC_FUNC_MT_", stringify!($name))]
                #[allow(non_snake_case)]
                pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                    $imp($($arg),*)
                }
            )*
        }

        /// The name of every exported function (without the vendor prefixes).
        pub const FUNCTIONS: &[&str] = &[$(stringify!($name)),*];

        /// Each implementation's path (`crate::segment::connect_segment`) with the name it is
        /// exported as: how a failure names the function that failed (`error.rs`).
        pub(crate) const IMPLS: &[(&str, &str)] = &[$((stringify!($imp), stringify!($name))),*];
    };
}

exports! {
    // Library and node.
    fn SCIInitialize(flags: c_uint, error: *mut SciError) = crate::node::initialize;
    fn SCITerminate() = crate::node::terminate;
    fn SCIOpen(sd: *mut *mut c_void, flags: c_uint, error: *mut SciError) = crate::node::open;
    fn SCIClose(sd: *mut c_void, flags: c_uint, error: *mut SciError) = crate::node::close;
    fn SCIGetErrorString(code: SciError) -> *const c_char = crate::node::error_string;
    fn SCIGetLocalNodeId(adapter_no: c_uint, node_id: *mut c_uint, flags: c_uint, error: *mut SciError)
        = crate::node::get_local_node_id;
    fn SCIProbeNode(sd: *mut c_void, adapter_no: c_uint, node_id: c_uint, flags: c_uint, error: *mut SciError) -> c_int
        = crate::node::probe_node;
    fn SCIQuery(command: c_uint, data: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::node::query;
    fn SCIGetNodeIdByAdapterName(
        name: *mut c_char,
        list: *mut [c_uint; consts::DIS_MAX_NSCIS],
        kind: *mut c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::node::get_node_id_by_adapter_name;
    fn SCIGetNodeInfoByAdapterName(
        name: *mut c_char,
        adapters: *mut c_uint,
        list: *mut [c_uint; consts::DIS_MAX_NSCIS],
        kind: *mut c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::compat::get_node_info_by_adapter_name;
    fn SCIGetAdapterTypeString(adapter_type: c_uint) -> *const c_char = crate::compat::adapter_type_string;
    fn SCIGetAdapterFamilyString(adapter_type: c_uint) -> *const c_char = crate::compat::adapter_family_string;
    fn SCIGetCSRRegister(sd: *mut c_void, adapter_no: c_uint, node_id: c_uint, offset: c_uint, flags: c_uint, error: *mut SciError) -> c_uint
        = crate::unsupported::get_csr_register;
    fn SCISetCSRRegister(
        sd: *mut c_void,
        adapter_no: c_uint,
        node_id: c_uint,
        offset: c_uint,
        value: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::unsupported::set_csr_register;
    fn SCIGetLocalCSR(sd: *mut c_void, adapter_no: c_uint, offset: c_uint, flags: c_uint, error: *mut SciError) -> c_uint
        = crate::unsupported::get_local_csr;
    fn SCISetLocalCSR(sd: *mut c_void, adapter_no: c_uint, offset: c_uint, value: c_uint, flags: c_uint, error: *mut SciError)
        = crate::unsupported::set_local_csr;

    // Local segments.
    fn SCICreateSegment(
        sd: *mut c_void,
        segment: *mut *mut c_void,
        segment_id: c_uint,
        size: usize,
        callback: LocalSegmentCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::segment::create_segment;
    fn SCIPrepareSegment(segment: *mut c_void, adapter_no: c_uint, flags: c_uint, error: *mut SciError)
        = crate::segment::prepare_segment;
    fn SCISetSegmentAvailable(segment: *mut c_void, adapter_no: c_uint, flags: c_uint, error: *mut SciError)
        = crate::segment::set_segment_available;
    fn SCISetSegmentUnavailable(segment: *mut c_void, adapter_no: c_uint, flags: c_uint, error: *mut SciError)
        = crate::segment::set_segment_unavailable;
    fn SCIRemoveSegment(segment: *mut c_void, flags: c_uint, error: *mut SciError) = crate::segment::remove_segment;
    fn SCIGetLocalSegmentSize(segment: *mut c_void) -> usize = crate::segment::get_local_segment_size;
    fn SCIGetLocalSegmentId(segment: *mut c_void) -> c_uint = crate::segment::get_local_segment_id;
    fn SCIWaitForLocalSegmentEvent(
        segment: *mut c_void,
        source_node_id: *mut c_uint,
        local_adapter_no: *mut c_uint,
        timeout: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) -> u32 = crate::segment::wait_for_local_segment_event;
    fn SCIRegisterSegmentMemory(address: *mut c_void, size: usize, segment: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::segment::register_segment_memory;
    fn SCIAttachPhysicalMemory(
        ioaddr: u64,
        address: *mut c_void,
        bus_no: c_uint,
        size: usize,
        segment: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::unsupported::attach_physical_memory;
    fn SCIAttachLocalSegment(
        sd: *mut c_void,
        segment: *mut *mut c_void,
        segment_id: c_uint,
        size: *mut usize,
        callback: LocalSegmentCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::segment::attach_local_segment;
    fn SCIShareSegment(segment: *mut c_void, flags: c_uint, error: *mut SciError) = crate::segment::share_segment;

    // Remote segments.
    fn SCIConnectSegment(
        sd: *mut c_void,
        segment: *mut *mut c_void,
        node_id: c_uint,
        segment_id: c_uint,
        adapter_no: c_uint,
        callback: RemoteSegmentCb,
        callback_arg: *mut c_void,
        timeout: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::segment::connect_segment;
    fn SCIDisconnectSegment(segment: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::segment::disconnect_segment;
    fn SCIGetRemoteSegmentSize(segment: *mut c_void) -> usize = crate::segment::get_remote_segment_size;
    fn SCIGetRemoteSegmentId(segment: *mut c_void) -> c_uint = crate::segment::get_remote_segment_id;
    fn SCIGetRemoteSegmentNodeId(segment: *mut c_void) -> c_uint = crate::segment::get_remote_segment_node_id;
    fn SCIWaitForRemoteSegmentEvent(
        segment: *mut c_void,
        status: *mut SciError,
        timeout: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) -> u32 = crate::segment::wait_for_remote_segment_event;
    fn SCIConnectSCISpace(
        sd: *mut c_void,
        adapter_no: c_uint,
        segment: *mut *mut c_void,
        address: compat::SciAddress,
        size: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::unsupported::connect_sci_space;

    // Maps and programmed I/O.
    fn SCIMapRemoteSegment(
        segment: *mut c_void,
        map: *mut *mut c_void,
        offset: usize,
        size: usize,
        addr: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) -> *mut c_void = crate::map::map_remote_segment;
    fn SCIMapLocalSegment(
        segment: *mut c_void,
        map: *mut *mut c_void,
        offset: usize,
        size: usize,
        addr: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) -> *mut c_void = crate::map::map_local_segment;
    fn SCIUnmapSegment(map: *mut c_void, flags: c_uint, error: *mut SciError) = crate::map::unmap_segment;
    fn SCIGetMapPointer(map: *mut c_void) -> *mut c_void = crate::map::get_map_pointer;
    fn SCIGetMapPhysAddr(map: *mut c_void) -> u64 = crate::compat::get_map_phys_addr;
    fn SCICreateMapSequence(map: *mut c_void, sequence: *mut *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::map::create_map_sequence;
    fn SCIRemoveSequence(sequence: *mut c_void, flags: c_uint, error: *mut SciError) = crate::map::remove_sequence;
    fn SCIStartSequence(sequence: *mut c_void, flags: c_uint, error: *mut SciError) -> u32
        = crate::map::start_sequence;
    fn SCICheckSequence(sequence: *mut c_void, flags: c_uint, error: *mut SciError) -> u32
        = crate::map::check_sequence;
    fn SCIStoreBarrier(sequence: *mut c_void, flags: c_uint) = crate::map::store_barrier;
    fn SCIFlush(sequence: *mut c_void, flags: c_uint) = crate::map::flush;
    fn SCIMemCpy(
        sequence: *mut c_void,
        mem_addr: *mut c_void,
        remote_map: *mut c_void,
        remote_offset: usize,
        size: usize,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::map::mem_cpy;
    fn SCIMemWrite(mem_addr: *mut c_void, remote_addr: *mut c_void, size: usize, flags: c_uint, error: *mut SciError)
        = crate::map::mem_write;
    fn SCICacheSync(map: *mut c_void, addr: *mut c_void, length: usize, flags: c_uint, error: *mut SciError)
        = crate::map::cache_sync;
    fn SCIMemCpy_dual(
        sequence: *mut c_void,
        mem_addr: *mut c_void,
        remote_map: *mut c_void,
        remote_map2: *mut c_void,
        remote_offset: usize,
        size: usize,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::compat::mem_cpy_dual;

    // DMA.
    fn SCICreateDMAQueue(
        sd: *mut c_void,
        dq: *mut *mut c_void,
        adapter_no: c_uint,
        max_entries: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::dma::create_dma_queue;
    fn SCIRemoveDMAQueue(dq: *mut c_void, flags: c_uint, error: *mut SciError) = crate::dma::remove_dma_queue;
    fn SCIAbortDMAQueue(dq: *mut c_void, flags: c_uint, error: *mut SciError) = crate::dma::abort_dma_queue;
    fn SCIDMAQueueState(dq: *mut c_void) -> u32 = crate::dma::dma_queue_state;
    fn SCIWaitForDMAQueue(dq: *mut c_void, timeout: c_uint, flags: c_uint, error: *mut SciError) -> u32
        = crate::dma::wait_for_dma_queue;
    fn SCIStartDmaTransfer(
        dq: *mut c_void,
        local_segment: *mut c_void,
        remote_segment: *mut c_void,
        local_offset: usize,
        size: usize,
        remote_offset: usize,
        callback: DmaCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::dma::start_dma_transfer;
    fn SCIStartDmaTransferVec(
        dq: *mut c_void,
        local_segment: *mut c_void,
        remote_segment: *mut c_void,
        vec_length: c_uint,
        vec: *mut crate::dma::DisDmaVec,
        callback: DmaCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::dma::start_dma_transfer_vec;
    fn SCIStartDmaTransferMem(
        dq: *mut c_void,
        local_address: *mut c_void,
        remote_segment: *mut c_void,
        size: usize,
        remote_offset: usize,
        callback: DmaCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::dma::start_dma_transfer_mem;
    fn SCIRequestDMAChannel(
        sd: *mut c_void,
        channel: *mut *mut c_void,
        adapter_no: c_uint,
        kind: c_uint,
        channel_id: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::dma::request_dma_channel;
    fn SCIAssignDMAChannel(channel: *mut c_void, dq: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::dma::assign_dma_channel;
    fn SCIReturnDMAChannel(channel: *mut c_void, error: *mut SciError) = crate::dma::return_dma_channel;
    fn SCIPrepareLocalSegmentForDMA(channel: *mut c_void, segment: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::dma::prepare_local_segment_for_dma;
    fn SCIUnprepareLocalSegmentForDMA(channel: *mut c_void, segment: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::dma::unprepare_local_segment_for_dma;
    fn SCIPrepareRemoteSegmentForDMA(channel: *mut c_void, segment: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::dma::prepare_remote_segment_for_dma;
    fn SCIUnprepareRemoteSegmentForDMA(channel: *mut c_void, segment: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::dma::unprepare_remote_segment_for_dma;

    // Interrupts.
    fn SCICreateInterrupt(
        sd: *mut c_void,
        interrupt: *mut *mut c_void,
        adapter_no: c_uint,
        interrupt_no: *mut c_uint,
        callback: InterruptCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::interrupt::create_interrupt;
    fn SCIRemoveInterrupt(interrupt: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::interrupt::remove_interrupt;
    fn SCIWaitForInterrupt(interrupt: *mut c_void, timeout: c_uint, flags: c_uint, error: *mut SciError)
        = crate::interrupt::wait_for_interrupt;
    fn SCIConnectInterrupt(
        sd: *mut c_void,
        interrupt: *mut *mut c_void,
        node_id: c_uint,
        adapter_no: c_uint,
        interrupt_no: c_uint,
        timeout: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::interrupt::connect_interrupt;
    fn SCIDisconnectInterrupt(interrupt: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::interrupt::disconnect_interrupt;
    fn SCITriggerInterrupt(interrupt: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::interrupt::trigger_interrupt;
    fn SCICreateNamedInterrupt(
        sd: *mut c_void,
        interrupt: *mut *mut c_void,
        adapter_no: c_uint,
        interrupt_no: *mut c_uint,
        callback: InterruptCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::compat::create_named_interrupt;

    // Interrupt flags and conditional interrupts.
    fn SCIRegisterInterruptFlag(
        adapter_no: c_uint,
        interrupt: *mut *mut c_void,
        segment: *mut c_void,
        offset: c_uint,
        callback: InterruptCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::conditional::register_interrupt_flag;
    fn SCIEnableConditionalInterrupt(interrupt: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::conditional::enable_conditional_interrupt;
    fn SCIDisableConditionalInterrupt(interrupt: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::conditional::disable_conditional_interrupt;
    fn SCIGetConditionalInterruptTrigCounter(interrupt: *mut c_void, counter: *mut c_uint, flags: c_uint, error: *mut SciError)
        = crate::conditional::get_conditional_interrupt_trig_counter;

    // Data interrupts.
    fn SCICreateDataInterrupt(
        sd: *mut c_void,
        interrupt: *mut *mut c_void,
        adapter_no: c_uint,
        interrupt_no: *mut c_uint,
        callback: DataInterruptCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::interrupt::create_data_interrupt;
    fn SCIRemoveDataInterrupt(interrupt: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::interrupt::remove_data_interrupt;
    fn SCIWaitForDataInterrupt(
        interrupt: *mut c_void,
        data: *mut c_void,
        length: *mut c_uint,
        timeout: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::interrupt::wait_for_data_interrupt;
    fn SCIConnectDataInterrupt(
        sd: *mut c_void,
        interrupt: *mut *mut c_void,
        node_id: c_uint,
        adapter_no: c_uint,
        interrupt_no: c_uint,
        timeout: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::interrupt::connect_data_interrupt;
    fn SCIDisconnectDataInterrupt(interrupt: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::interrupt::disconnect_data_interrupt;
    fn SCITriggerDataInterrupt(interrupt: *mut c_void, data: *mut c_void, length: c_uint, flags: c_uint, error: *mut SciError)
        = crate::interrupt::trigger_data_interrupt;

    // Device lending (SmartIO).
    fn SCIGetDeviceList(
        sd: *mut c_void,
        fdids: *mut c_uint,
        length: usize,
        filter: *const smartio::DeviceInfo,
        flags: c_uint,
        error: *mut SciError,
    ) -> usize = crate::smartio::get_device_list;
    fn SCIBorrowDevice(sd: *mut c_void, device: *mut *mut c_void, fdid: c_ulonglong, flags: c_uint, error: *mut SciError)
        = crate::smartio::borrow_device;
    fn SCIReturnDevice(device: *mut c_void, flags: c_uint, error: *mut SciError) = crate::smartio::return_device;
    fn SCIReleaseExclusiveBorrow(device: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::smartio::release_exclusive_borrow;
    fn SCIGetFabricDeviceId(device: *mut c_void) -> u64 = crate::smartio::get_fabric_device_id;
    fn SCIConnectDeviceSegment(
        device: *mut c_void,
        segment: *mut *mut c_void,
        segment_id: c_uint,
        memory_type: c_uint,
        callback: RemoteSegmentCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::smartio::connect_device_segment;
    fn SCIConnectDeviceSegmentPath(
        device: *mut c_void,
        segment: *mut *mut c_void,
        segment_id: c_uint,
        memory_type: c_uint,
        adapter_no: c_uint,
        callback: RemoteSegmentCb,
        callback_arg: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::smartio::connect_device_segment_path;
    fn SCICreateDeviceSegment(
        device: *mut c_void,
        segment_id: c_uint,
        size: usize,
        memory_type: c_uint,
        hints: c_uint,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::smartio::create_device_segment;
    fn SCIMapLocalSegmentForDevice(
        segment: *mut c_void,
        adapter_no: c_uint,
        device: *mut c_void,
        ioaddr: *mut u64,
        offset: usize,
        size: usize,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::smartio::map_local_segment_for_device;
    fn SCIUnmapLocalSegmentForDevice(
        segment: *mut c_void,
        adapter_no: c_uint,
        device: *mut c_void,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::smartio::unmap_local_segment_for_device;
    fn SCIMapRemoteSegmentForDevice(
        segment: *mut c_void,
        device: *mut c_void,
        ioaddr: *mut u64,
        offset: usize,
        size: usize,
        flags: c_uint,
        error: *mut SciError,
    ) = crate::smartio::map_remote_segment_for_device;
    fn SCIUnmapRemoteSegmentForDevice(segment: *mut c_void, device: *mut c_void, flags: c_uint, error: *mut SciError)
        = crate::smartio::unmap_remote_segment_for_device;
    fn SCIRegisterPCIeRequester(sd: *mut c_void, adapter_no: c_uint, bus: c_uint, devfn: c_uint, flags: c_uint, error: *mut SciError)
        = crate::smartio::register_pcie_requester;
    fn SCIUnregisterPCIeRequester(sd: *mut c_void, adapter_no: c_uint, bus: c_uint, devfn: c_uint, flags: c_uint, error: *mut SciError)
        = crate::smartio::unregister_pcie_requester;
}

/// The functions the vendor library exports without declaring them in its header; libsisci.so
/// exports them under their plain names only (programs call them without a prototype, or
/// with one of their own).
pub const UNDECLARED_EXPORTS: &[&str] =
    &["SetSciMemCopyFunction", "GetSciMemCopyFunction", "DISStartDmaTransfer", "DISStartDmaTransferVec"];

/// `SetSciMemCopyFunction`: which PIO copy routine `SCIMemCpy` uses. Remembered (see
/// [`GetSciMemCopyFunction`]); Lanes has one copy routine, the fabric's.
#[no_mangle]
pub extern "C" fn SetSciMemCopyFunction(function: c_uint) {
    ffi::call_quiet((), || compat::set_sci_mem_copy_function(function))
}

/// `GetSciMemCopyFunction`: the number `SetSciMemCopyFunction` last set (0 before).
#[no_mangle]
pub extern "C" fn GetSciMemCopyFunction() -> c_uint {
    ffi::call_quiet(0, compat::get_sci_mem_copy_function)
}

/// `DISStartDmaTransfer`: `SCIStartDmaTransfer` under another name.
///
/// # Safety
/// As `SCIStartDmaTransfer`.
#[no_mangle]
#[allow(non_snake_case, clippy::too_many_arguments)]
pub unsafe extern "C" fn DISStartDmaTransfer(
    dq: *mut c_void,
    local_segment: *mut c_void,
    remote_segment: *mut c_void,
    local_offset: usize,
    size: usize,
    remote_offset: usize,
    callback: DmaCb,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciError,
) {
    crate::dma::start_dma_transfer(
        dq,
        local_segment,
        remote_segment,
        local_offset,
        size,
        remote_offset,
        callback,
        callback_arg,
        flags,
        error,
    )
}

/// `DISStartDmaTransferVec`: `SCIStartDmaTransferVec` under another name.
///
/// # Safety
/// As `SCIStartDmaTransferVec`.
#[no_mangle]
#[allow(non_snake_case, clippy::too_many_arguments)]
pub unsafe extern "C" fn DISStartDmaTransferVec(
    dq: *mut c_void,
    local_segment: *mut c_void,
    remote_segment: *mut c_void,
    vec_length: c_uint,
    vec: *mut crate::dma::DisDmaVec,
    callback: DmaCb,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciError,
) {
    crate::dma::start_dma_transfer_vec(
        dq,
        local_segment,
        remote_segment,
        vec_length,
        vec,
        callback,
        callback_arg,
        flags,
        error,
    )
}
