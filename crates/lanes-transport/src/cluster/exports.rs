//! Export records: how an owner process tells its host's daemon that one of its objects can
//! be reached over libfabric, and where.
//!
//! An owner that has registered an object's data for remote access writes one record per
//! object, `<fabric dir>/exports/<kind>-<node>-<id as 8 hex>.json` (0600), with its endpoint
//! name, the memory registration's key and address, and a random epoch. The daemon reads the
//! record when a peer on another host connects and hands it to the peer with the grant; it
//! does not interpret the endpoint or the key. A record counts only while it names the
//! object file's current owner (pid and identity): a record left by a dead owner is ignored.
//!
//! Records are written to a temporary file and renamed into place, so a reader sees the
//! whole old record or the whole new one. They are at most [`MAX_RECORD`] bytes; anything
//! larger or not a record is refused with a reason, never a panic.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::proto::ObjectKind;
use crate::platform::files::{ensure_private_dir, open_existing};
use crate::platform::liveness::pid_alive;

/// The directory of export records in a fabric directory.
pub const EXPORTS_DIR: &str = "exports";
/// The largest record read.
pub const MAX_RECORD: u64 = 64 * 1024;

/// What a peer needs to reach an exported object's data over libfabric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportRecord {
    pub kind: ObjectKind,
    pub node: u32,
    pub id: u32,
    pub owner_pid: u32,
    /// `ProcessIdentity::bits()` of the owner.
    pub owner_identity: u64,
    /// The libfabric provider name, e.g. "tcp;ofi_rxm".
    pub provider: String,
    /// The owner's endpoint name (the bytes of `fi_getname`), lower-case hex.
    pub endpoint: String,
    /// The memory registration's key.
    pub key: u64,
    /// The remote address of data offset 0.
    pub base: u64,
    /// Bytes registered (the object's data).
    pub len: u64,
    /// The index in the owner's export table (carried in remote CQ data).
    pub handle: u32,
    /// Random per export: a new export of the same object gets a new one.
    pub epoch: u64,
    /// The owner's cores see the ranges of one write in the order the provider fills them
    /// (`transport::ofi::notify::Publish::owner_may_watch`): it watches for triggers and
    /// messages published in place (written words, no completion data), and a map's release
    /// store may go as the last range of its data's write. Absent in older records: no.
    #[serde(default)]
    pub in_place: bool,
    /// A key per connection slot (docs/design/multi-host.md, "Revocation"): the grant of a
    /// slot claimed at `generation` carries that slot's key, and the owner closes the
    /// registration once the claim is over, so nothing its holder sent can land after the
    /// owner heard it leave. Absent in older records: every grant carries `key`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slot_keys: Vec<SlotKey>,
}

/// The key of one connection slot's next (or current) claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotKey {
    pub slot: u32,
    /// The slot's generation before the claim the key is for (even).
    pub generation: u32,
    pub key: u64,
}

impl ExportRecord {
    /// The key a peer granted `slot`, claimed at `generation` (the slot's generation before
    /// the claim), uses: that slot's key if the owner made it for that claim, `key` in
    /// records without slot keys, None when the owner has not renewed the slot's key since
    /// its last claim (the grant must wait).
    pub fn key_for_claim(&self, slot: usize, generation: u32) -> Option<u64> {
        if self.slot_keys.is_empty() {
            return Some(self.key);
        }
        self.slot_keys.iter().find(|k| k.slot as usize == slot && k.generation == generation).map(|k| k.key)
    }
}

fn kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Segment => "segment",
        ObjectKind::Interrupt => "interrupt",
        ObjectKind::DataInterrupt => "data-interrupt",
        ObjectKind::Reflective => "reflective",
    }
}

/// The record file of object (`kind`, `node`, `id`) in `fabric_dir`.
pub fn record_path(fabric_dir: &Path, kind: ObjectKind, node: u32, id: u32) -> PathBuf {
    fabric_dir.join(EXPORTS_DIR).join(record_name(kind, node, id))
}

/// The file name of the record of object (`kind`, `node`, `id`).
fn record_name(kind: ObjectKind, node: u32, id: u32) -> String {
    format!("{}-{node}-{id:08x}.json", kind_name(kind))
}

/// Publishes `rec` (replacing an earlier record of the same object): written to a temporary
/// file of mode 0600 and renamed into place, so readers never see half a record.
pub fn publish(fabric_dir: &Path, rec: &ExportRecord) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    check(rec).map_err(|reason| io::Error::new(io::ErrorKind::InvalidInput, reason))?;
    let dir = fabric_dir.join(EXPORTS_DIR);
    ensure_private_dir(&dir)?;
    let body = serde_json::to_vec(rec).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if body.len() as u64 > MAX_RECORD {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("export record of {} bytes", body.len())));
    }
    let path = record_path(fabric_dir, rec.kind, rec.node, rec.id);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".tmp-{}-{n}", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&body))
        .and_then(|()| fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Removes the records no live owner stands behind: records whose owner (`node`, identity)
/// `is_alive` denies, files in the records' directory that are not valid records, and
/// temporary files of writers that died. Returns (file name, why) per removal.
pub fn sweep(fabric_dir: &Path, is_alive: impl Fn(u32, u32, u64) -> bool) -> Vec<(String, String)> {
    let dir = fabric_dir.join(EXPORTS_DIR);
    let Ok(entries) = fs::read_dir(&dir) else { return Vec::new() };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let why = if let Some(rest) = name.strip_prefix(".tmp-") {
            // `.tmp-<pid>-<n>`: a writer that died between writing and renaming.
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let gone = pid.is_some_and(|p| !pid_alive(p));
            gone.then(|| "a dead writer's temporary file".to_string())
        } else if !name.ends_with(".json") {
            None
        } else {
            match parse_name(&name).map(|(kind, node, id)| read(fabric_dir, kind, node, id)) {
                None => Some("not a record's name".to_string()),
                Some(Err(reason)) => Some(reason),
                Some(Ok(None)) => None, // gone meanwhile
                Some(Ok(Some(r))) => (!is_alive(r.node, r.owner_pid, r.owner_identity))
                    .then(|| format!("its owner, pid {}, is dead", r.owner_pid)),
            }
        };
        if let Some(why) = why {
            if fs::remove_file(e.path()).is_ok() {
                removed.push((name, why));
            }
        }
    }
    removed.sort();
    removed
}

/// The object a record file's name stands for (see [`record_path`]). Every kind has
/// records (reflective groups too), and only the very name `record_path` gives is one: the
/// numbers also parse from other spellings (`+8`, `08`, upper-case hex), but such a file is
/// not the record `read` reads, so it is swept as a stranger rather than judged by the
/// record of the name it resembles.
fn parse_name(name: &str) -> Option<(ObjectKind, u32, u32)> {
    let stem = name.strip_suffix(".json")?;
    let (rest, id) = stem.rsplit_once('-')?;
    let (kind, node) = rest.rsplit_once('-')?;
    let kind = [ObjectKind::Segment, ObjectKind::Interrupt, ObjectKind::DataInterrupt, ObjectKind::Reflective]
        .into_iter()
        .find(|k| kind_name(*k) == kind)?;
    let parsed = (kind, node.parse().ok()?, u32::from_str_radix(id, 16).ok()?);
    (record_name(parsed.0, parsed.1, parsed.2) == name).then_some(parsed)
}

/// Removes the record of (`kind`, `node`, `id`) if it is still the export of `epoch` (a
/// newer export of the same object stays). Best effort: nothing to report if it is gone.
pub fn withdraw(fabric_dir: &Path, kind: ObjectKind, node: u32, id: u32, epoch: u64) {
    if let Ok(Some(rec)) = read(fabric_dir, kind, node, id) {
        if rec.epoch == epoch {
            let _ = fs::remove_file(record_path(fabric_dir, kind, node, id));
        }
    }
}

/// The record of (`kind`, `node`, `id`): `Ok(None)` if there is none, `Err(reason)` if the
/// file is not a valid record of that object (malformed, larger than [`MAX_RECORD`], not a
/// regular file, or naming another object).
pub fn read(fabric_dir: &Path, kind: ObjectKind, node: u32, id: u32) -> Result<Option<ExportRecord>, String> {
    let path = record_path(fabric_dir, kind, node, id);
    // Never blocks and never follows a link: a FIFO or a link planted here is refused.
    let file = match open_existing(&path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("export record: {e}")),
    };
    let mut body = Vec::new();
    // Read one byte past the limit: a file growing under us is refused too.
    (&*file)
        .take(MAX_RECORD + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("export record {}: {e}", path.display()))?;
    if body.len() as u64 > MAX_RECORD {
        return Err(format!("export record {} exceeds {MAX_RECORD} bytes", path.display()));
    }
    let rec: ExportRecord =
        serde_json::from_slice(&body).map_err(|e| format!("export record {}: {e}", path.display()))?;
    if (rec.kind, rec.node, rec.id) != (kind, node, id) {
        return Err(format!("export record {} names {} {:#x} of node {}", path.display(), rec.kind, rec.id, rec.node));
    }
    check(&rec).map_err(|reason| format!("export record {}: {reason}", path.display()))?;
    Ok(Some(rec))
}

/// What a record must satisfy beyond its shape.
fn check(rec: &ExportRecord) -> Result<(), String> {
    let e = &rec.endpoint;
    if e.is_empty() || e.len() % 2 != 0 || !e.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("endpoint {e:?} is not lower-case hex bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn scratch(name: &str) -> lanes_testkit::TestDir {
        lanes_testkit::TestDir::named("exports", name)
    }

    fn record(epoch: u64) -> ExportRecord {
        ExportRecord {
            kind: ObjectKind::Segment,
            node: 8,
            id: 0x10,
            owner_pid: 1234,
            owner_identity: 0xabcd_0000_04d2,
            provider: "tcp;ofi_rxm".into(),
            endpoint: "0a0b0c0d".into(),
            key: 7,
            base: 0x7f00_0000_0000,
            len: 8192,
            handle: 3,
            epoch,
            in_place: true,
            slot_keys: Vec::new(),
        }
    }

    #[test]
    fn a_record_without_the_in_place_field_reads_as_published_by_completion_data() {
        let mut v = serde_json::to_value(record(5)).unwrap();
        assert_eq!(v["in_place"], serde_json::Value::Bool(true));
        v.as_object_mut().unwrap().remove("in_place");
        let old: ExportRecord = serde_json::from_value(v).unwrap();
        assert_eq!(old, ExportRecord { in_place: false, ..record(5) });
    }

    #[test]
    fn a_claim_gets_its_slots_key_for_its_generation_only() {
        let mut r = record(1);
        assert_eq!(r.key_for_claim(5, 40), Some(7), "without slot keys, the object's key");
        r.slot_keys = vec![SlotKey { slot: 5, generation: 40, key: 9 }, SlotKey { slot: 6, generation: 2, key: 11 }];
        assert_eq!(r.key_for_claim(5, 40), Some(9));
        assert_eq!(r.key_for_claim(5, 42), None, "made for an earlier claim");
        assert_eq!(r.key_for_claim(7, 0), None, "no key for that slot");
        let d = scratch("slotkeys");
        publish(&d, &r).unwrap();
        assert_eq!(read(&d, ObjectKind::Segment, 8, 0x10).unwrap().unwrap(), r);
    }

    #[test]
    fn publish_read_replace_and_withdraw() {
        let d = scratch("cycle");
        assert_eq!(read(&d, ObjectKind::Segment, 8, 0x10), Ok(None));
        publish(&d, &record(1)).unwrap();
        let path = record_path(&d, ObjectKind::Segment, 8, 0x10);
        assert!(path.ends_with("exports/segment-8-00000010.json"), "{}", path.display());
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&d, ObjectKind::Segment, 8, 0x10), Ok(Some(record(1))));
        // Other objects are not this one.
        assert_eq!(read(&d, ObjectKind::Interrupt, 8, 0x10), Ok(None));
        assert_eq!(read(&d, ObjectKind::Segment, 9, 0x10), Ok(None));
        publish(&d, &record(2)).unwrap();
        assert_eq!(read(&d, ObjectKind::Segment, 8, 0x10).unwrap().unwrap().epoch, 2);
        // A withdrawal of the old export leaves the new one.
        withdraw(&d, ObjectKind::Segment, 8, 0x10, 1);
        assert!(path.exists());
        withdraw(&d, ObjectKind::Segment, 8, 0x10, 2);
        assert!(!path.exists());
        withdraw(&d, ObjectKind::Segment, 8, 0x10, 2); // gone: nothing to do
                                                       // No temporary files left behind.
        assert_eq!(fs::read_dir(d.join(EXPORTS_DIR)).unwrap().count(), 0);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn sweep_removes_what_no_live_owner_stands_behind() {
        let d = scratch("sweep");
        let live = record(1); // owner pid 1234, judged alive below
        let mut dead = record(2);
        (dead.kind, dead.id, dead.owner_pid) = (ObjectKind::DataInterrupt, 0x11, 999);
        publish(&d, &live).unwrap();
        publish(&d, &dead).unwrap();
        let dir = d.join(EXPORTS_DIR);
        fs::write(dir.join("segment-8-00000012.json"), b"{ not json").unwrap();
        fs::write(dir.join("interrupt-x-1.json"), b"{}").unwrap();
        fs::write(dir.join("README"), b"left alone").unwrap();
        // A temporary file of a writer that died (a child that exited), and one of ours.
        let child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        let mut child = child;
        child.wait().unwrap();
        fs::write(dir.join(format!(".tmp-{gone}-0")), b"half").unwrap();
        fs::write(dir.join(format!(".tmp-{}-9", std::process::id())), b"in progress").unwrap();

        let removed = sweep(&d, |node, pid, _| node == 8 && pid == 1234);
        let names: Vec<&str> = removed.iter().map(|(n, _)| n.as_str()).collect();
        let tmp = format!(".tmp-{gone}-0");
        assert_eq!(
            names,
            [tmp.as_str(), "data-interrupt-8-00000011.json", "interrupt-x-1.json", "segment-8-00000012.json"],
            "{removed:?}"
        );
        assert!(removed[1].1.contains("pid 999, is dead"), "{removed:?}");
        assert_eq!(read(&d, ObjectKind::Segment, 8, 0x10), Ok(Some(live)));
        assert!(dir.join("README").exists());
        assert!(dir.join(format!(".tmp-{}-9", std::process::id())).exists());
        assert!(sweep(&d, |_, _, _| true).is_empty(), "nothing left to sweep");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_records_are_reasons_not_panics() {
        let d = scratch("bad");
        let mut bad = record(1);
        bad.endpoint = "0A0B".into();
        assert!(publish(&d, &bad).is_err(), "upper-case hex is refused");
        let path = record_path(&d, ObjectKind::Segment, 8, 0x10);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let other = serde_json::to_vec(&ExportRecord { id: 0x11, ..record(1) }).unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{{{".to_vec(), "export record"),
            (b"{\"kind\":\"segment\"}".to_vec(), "missing field"),
            (vec![b' '; MAX_RECORD as usize + 10], "exceeds"),
            (other, "names segment 0x11"),
            (serde_json::to_vec(&bad).unwrap(), "hex"),
        ];
        for (body, says) in cases {
            fs::write(&path, &body).unwrap();
            let got = read(&d, ObjectKind::Segment, 8, 0x10);
            assert!(matches!(&got, Err(r) if r.contains(says)), "{says}: {got:?}");
        }
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert!(read(&d, ObjectKind::Segment, 8, 0x10).is_err());
        let _ = fs::remove_dir_all(&d);
    }
}
