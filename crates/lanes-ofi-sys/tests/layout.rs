//! The Rust side of the boundary agrees with the C side: every constant has the value the
//! headers give it, and the structures that cross have C's sizes, alignments and offsets.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::mem::{align_of, offset_of, size_of};

use lanes_ofi_sys::*;

fn table(get: unsafe extern "C" fn(*mut usize) -> *const lanes_fi_named) -> BTreeMap<String, u64> {
    let mut count = 0usize;
    // SAFETY: the shim's table functions write the entry count and return a pointer to a
    // static array of that many entries, each with a static NUL-terminated name.
    let entries = unsafe { std::slice::from_raw_parts(get(&mut count), count) };
    entries
        .iter()
        .map(|e| {
            // SAFETY: as above, `name` is a static C string literal.
            let name = unsafe { CStr::from_ptr(e.name) }.to_str().expect("ASCII name").to_owned();
            (name, e.value)
        })
        .collect()
}

#[test]
fn constants_match_the_headers() {
    let c = table(lanes_fi_constants);
    let mut mismatches = Vec::new();
    for (name, value) in CONSTANTS {
        match c.get(*name) {
            Some(v) if v == value => {}
            Some(v) => mismatches.push(format!("{name}: Rust {value:#x}, C {v:#x}")),
            None => mismatches.push(format!("{name}: not exported by the shim")),
        }
    }
    for name in c.keys() {
        if name != "FI_VERSION(1,17)" && !CONSTANTS.iter().any(|(n, _)| n == name) {
            mismatches.push(format!("{name}: exported by the shim but missing in Rust"));
        }
    }
    assert!(mismatches.is_empty(), "constants disagree:\n{}", mismatches.join("\n"));
    assert_eq!(c["FI_VERSION(1,17)"], u64::from(LANES_FI_VERSION));
    assert!(CONSTANTS.len() > 100, "the list of constants lost entries");
}

#[test]
fn structures_match_the_headers() {
    let c = table(lanes_fi_layout);
    let rust: &[(&str, usize)] = &[
        ("sizeof(fi_cq_data_entry)", size_of::<fi_cq_data_entry>()),
        ("alignof(fi_cq_data_entry)", align_of::<fi_cq_data_entry>()),
        ("fi_cq_data_entry.op_context", offset_of!(fi_cq_data_entry, op_context)),
        ("fi_cq_data_entry.flags", offset_of!(fi_cq_data_entry, flags)),
        ("fi_cq_data_entry.len", offset_of!(fi_cq_data_entry, len)),
        ("fi_cq_data_entry.buf", offset_of!(fi_cq_data_entry, buf)),
        ("fi_cq_data_entry.data", offset_of!(fi_cq_data_entry, data)),
        ("sizeof(lanes_fi_cq_err)", size_of::<lanes_fi_cq_err>()),
        ("alignof(lanes_fi_cq_err)", align_of::<lanes_fi_cq_err>()),
        ("lanes_fi_cq_err.op_context", offset_of!(lanes_fi_cq_err, op_context)),
        ("lanes_fi_cq_err.flags", offset_of!(lanes_fi_cq_err, flags)),
        ("lanes_fi_cq_err.len", offset_of!(lanes_fi_cq_err, len)),
        ("lanes_fi_cq_err.data", offset_of!(lanes_fi_cq_err, data)),
        ("lanes_fi_cq_err.err", offset_of!(lanes_fi_cq_err, err)),
        ("lanes_fi_cq_err.prov_errno", offset_of!(lanes_fi_cq_err, prov_errno)),
        ("sizeof(fi_context)", size_of::<fi_context>()),
        ("alignof(fi_context)", align_of::<fi_context>()),
        ("sizeof(fi_addr_t)", size_of::<fi_addr_t>()),
    ];
    let mut mismatches = Vec::new();
    for (name, value) in rust {
        match c.get(*name) {
            Some(&v) if v == *value as u64 => {}
            Some(v) => mismatches.push(format!("{name}: Rust {value}, C {v}")),
            None => mismatches.push(format!("{name}: not exported by the shim")),
        }
    }
    assert_eq!(c.len(), rust.len(), "the shim exports layout facts this test does not check");
    assert!(mismatches.is_empty(), "layouts disagree:\n{}", mismatches.join("\n"));
}

#[test]
fn the_runtime_library_is_recent_enough() {
    // SAFETY: fi_version takes no arguments and returns the library's version.
    let v = unsafe { fi_version() };
    assert!(v >= LANES_FI_VERSION, "libfabric {}.{} is older than 1.17", v >> 16, v & 0xffff);
}

#[test]
fn strerror_knows_the_codes() {
    // SAFETY: fi_strerror returns a static string for any code.
    let text = unsafe { CStr::from_ptr(fi_strerror(FI_EAGAIN)) }.to_string_lossy().into_owned();
    assert!(text.contains("again") || text.contains("unavailable"), "fi_strerror(FI_EAGAIN) = {text:?}");
    // SAFETY: as above.
    let text = unsafe { CStr::from_ptr(fi_strerror(FI_EAVAIL)) }.to_string_lossy().into_owned();
    assert!(!text.is_empty());
}
