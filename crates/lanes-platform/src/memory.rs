//! Access to memory that another process may write at any time.
//!
//! Never a `&`/`&mut` into such memory: only volatile or atomic accesses through raw
//! pointers, and copies in and out of private buffers (the vm-memory discipline). Bulk
//! copies use `memcpy` for small and medium sizes and non-temporal stores for large ones,
//! which is what a PCIe write-combining PIO path does and spares the cache of both sides.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};

mod sealed {
    pub trait Sealed {}
}

/// Plain scalar types that may be read and written whole with one volatile access.
pub trait Scalar: Copy + sealed::Sealed + 'static {}

macro_rules! scalars {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t {}
    )*};
}
scalars!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// Copies at least this large use non-temporal stores (`LANES_NT_THRESHOLD`, else the size of
/// the last-level cache).
static NONTEMPORAL_THRESHOLD: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The size from which copies into shared memory bypass the cache.
pub fn nontemporal_threshold() -> usize {
    let t = NONTEMPORAL_THRESHOLD.load(Ordering::Relaxed);
    if t != usize::MAX {
        return t;
    }
    let t = std::env::var("LANES_NT_THRESHOLD")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| last_level_cache_bytes().unwrap_or(DEFAULT_NT_THRESHOLD));
    NONTEMPORAL_THRESHOLD.store(t, Ordering::Relaxed);
    t
}

/// DMA transfers from this size use streaming stores: a bulk transfer gains from skipping
/// the read-for-ownership of its destination and from sparing the cache (measured: 16 MiB
/// DMA at 1.55x single-thread memcpy with them, 0.76x without).
pub const DMA_NONTEMPORAL_THRESHOLD: usize = 1 << 20;

/// Used when the cache size cannot be read.
const DEFAULT_NT_THRESHOLD: usize = 32 << 20;

/// The largest cache of CPU 0 (sysfs), e.g. `32768K`. A peer on another core reads what we
/// copy from the shared cache, so streaming stores, which bypass it, pay only for copies
/// larger than the cache (measured: PIO throughput at 1 MiB was 0.5x the floor with them,
/// 1.0x without).
fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|s| parse_cache_size(s.trim()))
        .max()
}

fn parse_cache_size(s: &str) -> Option<usize> {
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult).filter(|&b| b > 0)
}

/// Sets the non-temporal copy threshold for this process.
pub fn set_nontemporal_threshold(bytes: usize) {
    NONTEMPORAL_THRESHOLD.store(bytes.min(usize::MAX - 1), Ordering::Relaxed);
}

/// Reads one scalar.
///
/// # Safety
/// `p` must be valid for reads of `T` and aligned for it.
#[inline(always)]
pub unsafe fn read<T: Scalar>(p: *const T) -> T {
    // SAFETY: guaranteed by the caller; volatile because another process may write it.
    unsafe { p.read_volatile() }
}

/// Writes one scalar.
///
/// # Safety
/// `p` must be valid for writes of `T` and aligned for it.
#[inline(always)]
pub unsafe fn write<T: Scalar>(p: *mut T, v: T) {
    // SAFETY: guaranteed by the caller; volatile so the store is never elided or merged away.
    unsafe { p.write_volatile(v) }
}

/// Acquire load of a 64-bit word (pairs with [`store_release_u64`] in the other process).
///
/// # Safety
/// `p` must be valid, 8-byte aligned, and only ever accessed atomically or volatilely.
#[inline(always)]
pub unsafe fn load_acquire_u64(p: *const u64) -> u64 {
    // SAFETY: guaranteed by the caller; the reference lives for this one atomic load.
    unsafe { AtomicU64::from_ptr(p.cast_mut()) }.load(Ordering::Acquire)
}

/// Release store of a 64-bit word: everything written before it is visible first.
///
/// # Safety
/// As for [`load_acquire_u64`].
#[inline(always)]
pub unsafe fn store_release_u64(p: *mut u64, v: u64) {
    // SAFETY: guaranteed by the caller; the reference lives for this one atomic store.
    unsafe { AtomicU64::from_ptr(p) }.store(v, Ordering::Release)
}

/// Acquire load of a 32-bit word.
///
/// # Safety
/// `p` must be valid, 4-byte aligned, and only ever accessed atomically or volatilely.
#[inline(always)]
pub unsafe fn load_acquire_u32(p: *const u32) -> u32 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(p.cast_mut()) }.load(Ordering::Acquire)
}

/// Release store of a 32-bit word.
///
/// # Safety
/// As for [`load_acquire_u32`].
#[inline(always)]
pub unsafe fn store_release_u32(p: *mut u32, v: u32) {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(p) }.store(v, Ordering::Release)
}

/// Asks the CPU to fetch the cache line at `p` for writing before a store needs it
/// (`PREFETCHW`): a hint, which never faults whatever the address, and does nothing on a
/// CPU without it.
#[inline(always)]
pub fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch changes no memory, register or flag and never faults.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Orders all earlier stores (including non-temporal ones) before all later ones.
#[inline(always)]
pub fn store_barrier() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions (SSE is baseline on x86_64).
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
    fence(Ordering::SeqCst);
}

/// Copies `src` into shared memory at `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes and not overlap `src`.
#[inline]
pub unsafe fn copy_to_shared(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    if n >= nontemporal_threshold() {
        // SAFETY: as guaranteed by the caller.
        unsafe { copy_nontemporal(dst, src.as_ptr(), n) };
    } else {
        // SAFETY: as guaranteed by the caller. memcpy into memory reachable only through raw
        // pointers; a concurrent writer can tear the copy but cannot make it unsound for us.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
    }
}

/// Copies shared memory at `src` into `dst`.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` bytes and not overlap `dst`.
#[inline]
pub unsafe fn copy_from_shared(dst: &mut [u8], src: *const u8) {
    // SAFETY: as guaranteed by the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
}

/// Copies between two shared regions (local segment to remote segment), with streaming
/// stores from `streaming_from` bytes: a PIO copy a peer reads at once wants the cache
/// ([`nontemporal_threshold`]); a DMA engine's bulk transfer does not (see
/// [`DMA_NONTEMPORAL_THRESHOLD`]).
///
/// # Safety
/// Both ranges must be valid for `len` bytes and must not overlap.
#[inline]
pub unsafe fn copy_shared_to_shared(dst: *mut u8, src: *const u8, len: usize, streaming_from: usize) {
    if len >= streaming_from {
        // SAFETY: as guaranteed by the caller.
        unsafe { copy_nontemporal(dst, src, len) };
    } else {
        // SAFETY: as guaranteed by the caller.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
    }
}

/// Copies with streaming stores that bypass the cache, then fences them.
///
/// # Safety
/// `dst` valid for `n` byte writes, `src` for `n` byte reads, no overlap.
unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Head: bring dst to 16-byte alignment with an ordinary copy.
        let head = (dst as usize).wrapping_neg() & 15;
        let head = head.min(n);
        // SAFETY: head <= n, within both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
        let mut off = head;
        while off + 64 <= n {
            // SAFETY: off+64 <= n keeps every access in range; dst+off is 16-byte aligned;
            // loads are unaligned loads; SSE2 is baseline on x86_64.
            unsafe {
                let s = src.add(off).cast::<__m128i>();
                let d = dst.add(off).cast::<__m128i>();
                let a = _mm_loadu_si128(s);
                let b = _mm_loadu_si128(s.add(1));
                let c = _mm_loadu_si128(s.add(2));
                let e = _mm_loadu_si128(s.add(3));
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
            }
            off += 64;
        }
        // SAFETY: the tail lies within both ranges; the fence orders the streaming stores
        // before anything the caller publishes next.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), n - off);
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as guaranteed by the caller.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("8M"), Some(8 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("x"), None);
        assert_eq!(parse_cache_size("0K"), None);
        assert!(nontemporal_threshold() > 0);
    }

    #[test]
    fn nontemporal_copy_matches_memcpy_at_every_alignment() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
        for dst_off in 0..17 {
            for len in [0, 1, 15, 16, 63, 64, 65, 200, 4096 + 7] {
                let mut dst = vec![0xEEu8; len + 40];
                // SAFETY: dst has room for dst_off+len bytes; src has len bytes; no overlap.
                unsafe { copy_nontemporal(dst.as_mut_ptr().add(dst_off), src.as_ptr(), len) };
                assert_eq!(&dst[dst_off..dst_off + len], &src[..len]);
                assert!(dst[..dst_off].iter().all(|&b| b == 0xEE));
                assert!(dst[dst_off + len..].iter().all(|&b| b == 0xEE));
            }
        }
    }
}
