//! The process-wide registry of live handles.
//!
//! A handle given to C is the address of an `Arc<Handle<T>>`'s contents; each `Handle` starts
//! with its type's magic. Every call looks the address up here first, so a handle that was
//! removed, closed, or never made by this library is refused (`SCI_ERR_ILLEGAL_PARAMETER`)
//! and never dereferenced. A lookup clones the `Arc`, so an object stays alive while any call
//! uses it, even if another thread removes its handle meanwhile.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::consts::SCI_ERR_ILLEGAL_PARAMETER;
use crate::error::{fail, Code, SciResult};

/// A kind of handle.
pub trait Object: Send + Sync + 'static {
    /// The first word of every handle of this kind.
    const MAGIC: u32;
}

/// What a C handle points to.
#[repr(C)]
pub struct Handle<T> {
    magic: u32,
    /// The descriptor (`sci_desc_t`) the object was made through; 0 for descriptors.
    pub desc: usize,
    /// The object this one depends on (a map's segment, a sequence's map); 0 for none.
    pub parent: usize,
    /// The object.
    pub body: T,
}

impl<T> Handle<T> {
    /// The handle's value as C sees it.
    pub fn key(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }
}

struct Entry {
    obj: Arc<dyn Any + Send + Sync>,
    magic: u32,
    desc: usize,
    parent: usize,
}

/// Hashes handle addresses: a multiply of the address is enough (they are distinct heap
/// addresses), and much cheaper than SipHash on a path every call takes.
#[derive(Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, v: usize) {
        self.0 = ((v as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Map = HashMap<usize, Entry, BuildHasherDefault<AddressHasher>>;

/// The registry's contents, under its lock.
pub struct Entries(Map);

static REGISTRY: LazyLock<RwLock<Entries>> = LazyLock::new(|| RwLock::new(Entries(Map::default())));

fn read() -> RwLockReadGuard<'static, Entries> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

/// The registry, locked for a change.
pub fn write() -> RwLockWriteGuard<'static, Entries> {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner())
}

impl Entries {
    /// Looks a handle of kind `T` up.
    pub fn get<T: Object>(&self, p: *const c_void) -> SciResult<Arc<Handle<T>>> {
        let Some(e) = self.0.get(&(p as usize)) else { return fail(SCI_ERR_ILLEGAL_PARAMETER) };
        if e.magic != T::MAGIC {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let h = e.obj.clone().downcast::<Handle<T>>().map_err(|_| Code(SCI_ERR_ILLEGAL_PARAMETER))?;
        debug_assert_eq!(h.magic, T::MAGIC);
        Ok(h)
    }

    /// Removes a handle of kind `T`; the caller drops it after releasing the lock.
    pub fn take<T: Object>(&mut self, p: *const c_void) -> SciResult<Arc<Handle<T>>> {
        let h = self.get::<T>(p)?;
        self.0.remove(&(p as usize));
        Ok(h)
    }

    /// How many live handles depend on `key`.
    pub fn children(&self, key: usize) -> usize {
        self.0.values().filter(|e| e.parent == key).count()
    }

    /// The live handles made through descriptor `desc`.
    pub fn owned_by(&self, desc: usize) -> Vec<usize> {
        self.0.iter().filter(|(_, e)| e.desc == desc).map(|(k, _)| *k).collect()
    }

    /// Removes the handle `key` whatever its kind; returns the object to drop.
    pub fn take_any(&mut self, key: usize) -> Option<Arc<dyn Any + Send + Sync>> {
        self.0.remove(&key).map(|e| e.obj)
    }

    /// Every live handle of kind `T`.
    pub fn all<T: Object>(&self) -> Vec<Arc<Handle<T>>> {
        self.0
            .values()
            .filter(|e| e.magic == T::MAGIC)
            .filter_map(|e| e.obj.clone().downcast::<Handle<T>>().ok())
            .collect()
    }

    /// Empties the registry (`SCITerminate`); returns the objects to drop.
    pub fn clear(&mut self) -> Vec<Arc<dyn Any + Send + Sync>> {
        self.0.drain().map(|(_, e)| e.obj).collect()
    }
}

/// Registers a new object; returns its handle and the object.
pub fn insert<T: Object>(desc: usize, parent: usize, body: T) -> (*mut c_void, Arc<Handle<T>>) {
    let h = Arc::new(Handle { magic: T::MAGIC, desc, parent, body });
    let key = h.key();
    let obj: Arc<dyn Any + Send + Sync> = h.clone();
    write().0.insert(key, Entry { obj, magic: T::MAGIC, desc, parent });
    (key as *mut c_void, h)
}

/// Looks a handle of kind `T` up.
pub fn get<T: Object>(p: *const c_void) -> SciResult<Arc<Handle<T>>> {
    if p.is_null() {
        return fail(SCI_ERR_ILLEGAL_PARAMETER);
    }
    read().get::<T>(p)
}

/// Every live handle of kind `T`.
pub fn all<T: Object>() -> Vec<Arc<Handle<T>>> {
    read().all::<T>()
}
