//! The shared-memory transport: fabric directory layout, segment files and their header.
//!
//! ```text
//! <fabric dir>/                 0700, private to the user
//!   procs/<node>-<pid>          process record; its lock says the process lives
//!   nodes/<node>/.lock          serialises stale-segment replacement and clean-up
//!   nodes/<node>/seg-<id:08x>   one segment: a header page, then the data
//! ```

pub mod layout;
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

    pub fn segment_file_name(segment: u32) -> String {
        format!("seg-{segment:08x}")
    }

    pub fn parse_segment_file_name(name: &str) -> Option<u32> {
        let hex = name.strip_prefix("seg-")?;
        if hex.len() != 8 {
            return None;
        }
        u32::from_str_radix(hex, 16).ok()
    }

    pub fn segment(&self, node: u32, segment: u32) -> PathBuf {
        self.node_dir(node).join(Self::segment_file_name(segment))
    }
}
