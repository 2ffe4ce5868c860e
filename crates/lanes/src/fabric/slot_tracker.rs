//! Following an object's connection slots: who connected, left or died since the last look.
//!
//! Used by a segment's owner (local-segment events) and by reflective-group members
//! (membership events). Each look diffs the slots against what was seen before: the slot's
//! generation counts claims and releases that happened in between, and its last holder names
//! a peer that came and went unseen. A death watch per connected peer rings the object's
//! connection doorbell, so a death is an event within microseconds, without polling.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use super::events::LocalEvent;
use super::FabricInner;
use crate::platform::death_watch::{self, Watch};
use crate::platform::liveness::{self, ProcessIdentity};
use crate::transport::shm::layout::{HeaderView, MAX_CONNECTIONS};

/// Rings the connection doorbell of the tracked object, if it still exists.
pub(crate) type Ringer = Arc<dyn Fn() + Send + Sync>;

#[derive(Clone, Copy, Debug)]
struct SeenPeer {
    id: ProcessIdentity,
    node: u32,
    reported_gone: bool,
    /// A daemon's proxy for a process of another host: gone only when a daemon releases
    /// the slot (its daemon's death is not the peer's: a restarted daemon takes it over).
    proxy: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct SeenSlot {
    generation: u32,
    peer: Option<SeenPeer>,
}

#[derive(Default)]
struct TrackerState {
    seen: Vec<SeenSlot>,
    queue: VecDeque<LocalEvent>,
    watches: HashMap<usize, Watch>,
}

/// The event tracker of one object's connection slots.
pub(crate) struct SlotTracker {
    state: Mutex<TrackerState>,
    /// Identities the death watch reported dead (apart from `state`: a watch may fire
    /// synchronously while `state` is locked).
    died: Arc<Mutex<HashSet<u64>>>,
    /// A holder not to report (a member does not see itself join).
    ignore: Option<ProcessIdentity>,
}

impl std::fmt::Debug for SlotTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotTracker").finish_non_exhaustive()
    }
}

impl SlotTracker {
    pub fn new(ignore: Option<ProcessIdentity>) -> Self {
        SlotTracker {
            state: Mutex::new(TrackerState { seen: vec![SeenSlot::default(); MAX_CONNECTIONS], ..Default::default() }),
            died: Arc::new(Mutex::new(HashSet::new())),
            ignore,
        }
    }

    /// Looks at the slots and returns the next event, if any.
    pub fn next(&self, fabric: &FabricInner, header: &HeaderView, ring: &Ringer) -> Option<LocalEvent> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.refresh(&mut st, fabric, header, ring);
        st.queue.pop_front()
    }

    /// Queues the differences between the slots now and what was seen last: the peer seen
    /// last has left; a peer that came and went between two looks is reported as a pair; the
    /// current holder has connected (and, if already dead, disconnected).
    fn refresh(&self, st: &mut TrackerState, fabric: &FabricInner, header: &HeaderView, ring: &Ringer) {
        let died: HashSet<u64> = self.died.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let gone = |node: u32, id: ProcessIdentity| died.contains(&id.bits()) || !fabric.is_alive(node, id);
        let reportable = |id: ProcessIdentity| Some(id) != self.ignore;
        for i in 0..MAX_CONNECTIONS {
            let Some(now) = header.slot(i) else { continue };
            let seen = st.seen[i];
            if now.generation == seen.generation {
                if let Some(p) = seen.peer.filter(|p| !p.reported_gone && died.contains(&p.id.bits())) {
                    st.queue.push_back(LocalEvent::Disconnected { node: p.node, pid: p.id.pid(), died: true });
                    st.seen[i].peer = Some(SeenPeer { reported_gone: true, ..p });
                    st.watches.remove(&i);
                }
                continue;
            }
            let changes = now.generation.wrapping_sub(seen.generation) / 2;
            let seen_id = seen.peer.map(|p| p.id);
            if let Some(p) = seen.peer {
                if !p.reported_gone {
                    // A holder that released the slot itself disconnected, even if its
                    // process has exited since; one displaced (or unknown) is judged alive.
                    let released = now.last == Some(p.id) && now.last_released;
                    let lost = now.last == Some(p.id) && now.last_lost;
                    let died = lost || (!released && !p.proxy && gone(p.node, p.id));
                    st.queue.push_back(LocalEvent::Disconnected { node: p.node, pid: p.id.pid(), died });
                }
                st.watches.remove(&i);
            }
            if let Some(last) = now.last.filter(|&l| reportable(l)) {
                if changes >= 2 && Some(last) != seen_id && Some(last) != now.holder {
                    let (node, pid) = (now.last_node, last.pid());
                    st.queue.push_back(LocalEvent::Connected { node, pid });
                    let died = now.last_lost || (!now.last_released && gone(node, last));
                    st.queue.push_back(LocalEvent::Disconnected { node, pid, died });
                }
            }
            st.seen[i] = SeenSlot { generation: now.generation, peer: None };
            if let Some(c) = now.holder.filter(|&c| reportable(c)) {
                let alive = now.proxy || fabric.is_alive(now.node, c);
                st.queue.push_back(LocalEvent::Connected { node: now.node, pid: c.pid() });
                if now.proxy {
                    // Watched by the daemons, which release the slot when the peer goes.
                } else if alive {
                    if let Ok(w) = self.watch(fabric, now.node, c, ring) {
                        st.watches.insert(i, w);
                    }
                } else {
                    st.queue.push_back(LocalEvent::Disconnected { node: now.node, pid: c.pid(), died: true });
                }
                st.seen[i].peer = Some(SeenPeer { id: c, node: now.node, reported_gone: !alive, proxy: now.proxy });
            }
        }
    }

    /// Hears of a peer's death: remembers it and rings the connection doorbell.
    fn watch(&self, fabric: &FabricInner, node: u32, id: ProcessIdentity, ring: &Ringer) -> std::io::Result<Watch> {
        let procs = fabric.paths.procs();
        let died = self.died.clone();
        let ring = ring.clone();
        death_watch::watch(
            id.pid(),
            move || liveness::is_alive(&procs, node, id),
            move || {
                died.lock().unwrap_or_else(|e| e.into_inner()).insert(id.bits());
                ring();
            },
        )
    }
}
