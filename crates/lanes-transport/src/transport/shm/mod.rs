//! The shared-memory transport: fabric directory layout, segment files and their header,
//! the layouts of interrupt objects, and `remote`, the transport itself: a peer's object
//! is its file, opened, validated and mapped directly.
//!
//! ```text
//! <fabric dir>/                 0700, private to the user
//!   procs/<node>-<pid>          process record; its lock says the process lives
//!   nodes/<node>/.lock          serialises stale-segment replacement and clean-up
//!   nodes/<node>/seg-<id:08x>   one segment: a header page, then the data
//!   nodes/<node>/int-<no:08x>   one interrupt: the same header, then its doorbell page
//!   nodes/<node>/dint-<no:08x>  one data interrupt: header, doorbell page, per-sender rings
//! ```

pub mod data_interrupt;
#[cfg(not(feature = "ofi"))]
pub mod dma_pipe;
pub mod interrupt;
pub mod layout;
pub mod remote;
pub mod segment_file;

use std::path::{Path, PathBuf};

/// Names of everything in a fabric directory.
#[derive(Clone, Debug)]
pub struct FabricPaths {
    root: PathBuf,
}

impl FabricPaths {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FabricPaths { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn procs(&self) -> PathBuf {
        self.root.join("procs")
    }

    pub fn nodes(&self) -> PathBuf {
        self.root.join("nodes")
    }

    pub fn node_dir(&self, node: u32) -> PathBuf {
        self.nodes().join(node.to_string())
    }

    pub fn node_lock(&self, node: u32) -> PathBuf {
        self.node_dir(node).join(".lock")
    }

    /// The file name of object `id` of `kind` (see [`layout::kind`]).
    pub fn object_file_name(kind: u32, id: u32) -> String {
        format!("{}-{id:08x}", layout::kind::prefix(kind))
    }

    /// The node of a node directory's name: only the spelling `node_dir` writes (`08` or
    /// `+8` would be a second directory for node 8, listed twice).
    pub fn parse_node_dir_name(name: &str) -> Option<u32> {
        name.parse::<u32>().ok().filter(|n| n.to_string() == name)
    }

    /// (kind, id) of an object file name.
    pub fn parse_object_file_name(name: &str) -> Option<(u32, u32)> {
        let (prefix, hex) = name.split_once('-')?;
        let kind = layout::kind::ALL.into_iter().find(|&k| layout::kind::prefix(k) == prefix)?;
        if hex.len() != 8 {
            return None;
        }
        let id = u32::from_str_radix(hex, 16).ok()?;
        // Only the spelling `object_file_name` writes: `+` and upper-case digits parse too,
        // but such a file is a second name for the id (listed as the object, while every
        // open by id reaches the other file).
        (Self::object_file_name(kind, id) == name).then_some((kind, id))
    }

    /// The path of object `id` of `kind` on `node`.
    pub fn object(&self, kind: u32, node: u32, id: u32) -> PathBuf {
        self.node_dir(node).join(Self::object_file_name(kind, id))
    }

    /// The path of segment `segment` on `node`.
    pub fn segment(&self, node: u32, segment: u32) -> PathBuf {
        self.object(layout::kind::SEGMENT, node, segment)
    }
}
