//! Host states as this daemon sees each other host, and when this daemon's own restart is
//! reconciled: a state machine without I/O and without a clock. Its inputs are what
//! happened (a hello, a frame, a connection that ended, a heartbeat tick), each with the
//! time it happened; its outputs are [`Action`]s that the daemon carries out (close a
//! link, release a lost host's grants, fail the questions waiting on it, tell subscribers).
//!
//! A host is Unknown until its daemon's first hello, Operational at a hello, Suspect after
//! `suspect_after` without a frame or at once when its connection fails or stalls, Lost
//! after `lost_after` without a frame or when its daemon says hello with a new boot value
//! and another (or no) host epoch: the host restarted. A connection its host closed or
//! reset (the daemon died, the host lives) leaves it Operational but *away*: kept so while
//! the host answers connects, Lost if its daemon is not back within `lost_after`. A new
//! boot value with the same host epoch is a daemon restart: kept Operational, its grants
//! reconciled by `Holding`.
//!
//! Only hellos that passed the handshake reach [`Membership::on_hello`]: an impostor, a
//! replay or a peer that cannot prove the cluster secret is refused before, and
//! [`Membership::on_refused`] only decides whether to log it, so it never changes what is
//! known of the real host.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::cluster::config::ClusterConfig;
use crate::cluster::proto::HostState;

/// What the daemon does because of a change of host states. Actions come in the order the
/// daemon carries them out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Host `peer` went from `previous` to `state`, because of `reason` (for the log).
    Changed { peer: usize, previous: HostState, state: HostState, reason: String },
    /// Close the host's connection (it left Operational): the dialler redials with a
    /// fresh connect, which beats TCP's retransmission back-off on the old one.
    CloseLink { peer: usize },
    /// The host is lost: release the slots held for its processes, forget the releases
    /// owed to it and our processes' grants there, sweep the proxy slots of its nodes.
    HostLost { peer: usize },
    /// Refuse the questions waiting for the host's answer, saying `why`.
    FailQuestions { peer: usize, why: Unanswered },
    /// Tell the subscribers of the change, one event per node of the host.
    Notify { peer: usize, previous: HostState, state: HostState, reason: String },
    /// Only worth a line in the log.
    Log { message: String },
    /// Tell each connected host which of its grants this host's processes hold.
    SendHoldings,
    /// Release the proxy slots an earlier daemon of this host claimed for local
    /// requesters that nobody registered again.
    SweepOwnOrphans,
}

/// Why questions waiting for a host's answer are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unanswered {
    /// The host is in this state now (it left Operational).
    Host(HostState),
    /// They were asked of a daemon that went away while its host lives: its successor will
    /// not answer them, and the askers ask again.
    DaemonRestarting,
}

/// One other host, as far as liveness goes.
#[derive(Clone, Debug)]
struct Host {
    name: String,
    state: HostState,
    /// When it entered `state`.
    since: Instant,
    /// The last frame (or, while its daemon is away, the last answered connect).
    last_heard: Option<Instant>,
    /// Its daemon's boot value from its last hello.
    boot: Option<u64>,
    /// Its host's epoch from its last hello.
    host_epoch: Option<String>,
    /// Its daemon went away (its connection was closed or reset, so the host's kernel
    /// still answers) while it was Operational: kept Operational while the host keeps
    /// answering connects, as a restarting daemon's host does.
    away: bool,
    /// Since when its daemon is away: past `lost_after` the host is Lost all the same.
    away_since: Instant,
}

/// Every other host's state, and this daemon's own adoption window.
#[derive(Clone, Debug)]
pub(super) struct Membership {
    suspect_after: Duration,
    lost_after: Duration,
    hosts: Vec<Host>,
    /// Until then, processes of an earlier daemon may still be registering their grants
    /// again: no `Holding` is sent and no orphan swept before.
    adopting_until: Instant,
    /// The slots of local requesters that nobody registered again were swept.
    own_swept: bool,
    /// Refused connections by source address and reason: when each was last logged.
    refusals: HashMap<String, Instant>,
}

/// A refused peer connection is logged again (same source and reason) after this long.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

impl Membership {
    /// The hosts `names` (indexed as given), all Unknown at `now`, the daemon started at
    /// `now`.
    pub(super) fn new(cluster: &ClusterConfig, names: impl IntoIterator<Item = String>, now: Instant) -> Membership {
        let hosts = names
            .into_iter()
            .map(|name| Host {
                name,
                state: HostState::Unknown,
                since: now,
                last_heard: None,
                boot: None,
                host_epoch: None,
                away: false,
                away_since: now,
            })
            .collect();
        Membership {
            suspect_after: cluster.suspect_after,
            lost_after: cluster.lost_after,
            hosts,
            adopting_until: now + adoption_window(cluster),
            own_swept: false,
            refusals: HashMap::new(),
        }
    }

    pub(super) fn state(&self, peer: usize) -> HostState {
        self.hosts[peer].state
    }

    /// Whether the host's daemon is away while the host still answers.
    pub(super) fn away(&self, peer: usize) -> bool {
        self.hosts[peer].away
    }

    /// Since when the host is in its state.
    pub(super) fn since(&self, peer: usize) -> Instant {
        self.hosts[peer].since
    }

    pub(super) fn last_heard(&self, peer: usize) -> Option<Instant> {
        self.hosts[peer].last_heard
    }

    /// The host's daemon said hello (`boot`, `host_epoch`) on a new connection that passed
    /// the handshake.
    pub(super) fn on_hello(&mut self, peer: usize, boot: u64, host_epoch: &str, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        let h = &mut self.hosts[peer];
        let old_boot = h.boot.replace(boot);
        let old_epoch = h.host_epoch.replace(host_epoch.to_string());
        h.last_heard = Some(now);
        h.away = false;
        if old_boot.is_some_and(|b| b != boot) {
            if !host_epoch.is_empty() && old_epoch.as_deref() == Some(host_epoch) {
                // Only its daemon restarted: the host's processes, their exports and
                // their connections live on. The grants are reconciled by `Holding`.
                let message = format!("host {}: its daemon restarted (same host epoch): reconciling grants", h.name);
                out.push(Action::Log { message });
            } else {
                // The host restarted (or says nothing of it): nothing it vouched for
                // before still holds.
                self.change(peer, HostState::Lost, "its host restarted (new boot epoch)", now, &mut out);
            }
        }
        self.change(peer, HostState::Operational, "hello received", now, &mut out);
        out
    }

    /// A frame came from the host.
    pub(super) fn on_frame(&mut self, peer: usize, now: Instant) {
        self.hosts[peer].last_heard = Some(now);
    }

    /// The host answered a connect (refused or accepted): while its daemon is away, a sign
    /// of life.
    pub(super) fn on_host_answered(&mut self, peer: usize, now: Instant) {
        let h = &mut self.hosts[peer];
        if h.away && h.state == HostState::Operational {
            h.last_heard = Some(now);
        }
    }

    /// The host's current connection ended (`reason`); `host_answers`: its host closed or
    /// reset it, so the host lives and only its daemon went away.
    pub(super) fn on_link_ended(&mut self, peer: usize, host_answers: bool, reason: &str, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        let h = &mut self.hosts[peer];
        if h.state == HostState::Operational && host_answers {
            // Its daemon died (or restarts) on a host whose kernel still closed the
            // connection: the host's processes and the data between them live on. The host
            // stays Operational while it keeps answering connects, Suspect after
            // `suspect_after` of silence as ever.
            h.away = true;
            h.away_since = now;
            h.last_heard = Some(now);
            let message = format!("host {}: host daemon restarting? ({reason}); its host still answers", h.name);
            out.push(Action::Log { message });
            out.push(Action::FailQuestions { peer, why: Unanswered::DaemonRestarting });
        } else if h.state == HostState::Operational {
            self.change(peer, HostState::Suspect, reason, now, &mut out);
        } else {
            out.push(Action::Log { message: format!("host {}: connection ended: {reason}", h.name) });
        }
        out
    }

    /// A heartbeat towards the host could not be queued: its connection is stalled.
    pub(super) fn on_link_stalled(&mut self, peer: usize, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        self.change(peer, HostState::Suspect, "its connection is stalled", now, &mut out);
        out
    }

    /// A connection from `from` was refused before its hello was admitted (`reason`): an
    /// impostor, a replay, a stranger, a wrong secret. It changes nothing of any host; it is
    /// logged once per source and reason every [`REFUSAL_LOG_EVERY`], so that a peer
    /// redialling every heartbeat does not flood the log.
    pub(super) fn on_refused(&mut self, from: SocketAddr, reason: &str, now: Instant) -> Vec<Action> {
        let key = format!("{} {reason}", from.ip());
        if self.refusals.len() > 1024 {
            self.refusals.retain(|_, t| now.saturating_duration_since(*t) < REFUSAL_LOG_EVERY);
        }
        match self.refusals.get(&key) {
            Some(t) if now.saturating_duration_since(*t) < REFUSAL_LOG_EVERY => Vec::new(),
            _ => {
                self.refusals.insert(key, now);
                vec![Action::Log { message: format!("refused a connection from {from}: {reason}") }]
            }
        }
    }

    /// Every heartbeat: silent hosts to Suspect, then Lost; a daemon away for too long
    /// makes its host Lost.
    pub(super) fn on_tick(&mut self, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        for peer in 0..self.hosts.len() {
            let h = &self.hosts[peer];
            let Some(heard) = h.last_heard else { continue };
            let silent = now.saturating_duration_since(heard);
            let away = now.saturating_duration_since(h.away_since);
            if h.state == HostState::Operational && h.away && away >= self.lost_after {
                // Not back within lost_after: what it held is given up, as for a silent
                // host.
                let why = format!("its daemon did not come back within {} ms", millis(away));
                self.change(peer, HostState::Lost, &why, now, &mut out);
            } else if h.state == HostState::Operational && silent >= self.suspect_after {
                let why = format!("no heartbeat for {} ms", millis(silent));
                self.change(peer, HostState::Suspect, &why, now, &mut out);
            } else if h.state == HostState::Suspect && silent >= self.lost_after {
                let why = format!("silent for {} ms", millis(silent));
                self.change(peer, HostState::Lost, &why, now, &mut out);
            }
        }
        out
    }

    /// Every heartbeat, after [`Membership::on_tick`]: once this daemon's adoption window
    /// is over, `Holding` goes to every host (each connection once, which the links keep
    /// track of), and the first time the orphans of this host's requesters are swept.
    pub(super) fn on_adoption_tick(&mut self, now: Instant) -> Vec<Action> {
        if now < self.adopting_until {
            return Vec::new();
        }
        let mut out = vec![Action::SendHoldings];
        if !std::mem::replace(&mut self.own_swept, true) {
            out.push(Action::SweepOwnOrphans);
        }
        out
    }

    /// Moves host `peer` to `new` at `now`, with what that entails. Leaving Operational
    /// closes its connection and fails the questions waiting on it.
    fn change(&mut self, peer: usize, new: HostState, reason: &str, now: Instant, out: &mut Vec<Action>) {
        let h = &mut self.hosts[peer];
        let previous = h.state;
        if previous == new {
            return;
        }
        h.state = new;
        h.since = now;
        out.push(Action::Changed { peer, previous, state: new, reason: reason.to_string() });
        if new != HostState::Operational {
            h.away = false;
            out.push(Action::CloseLink { peer });
            if new == HostState::Lost {
                out.push(Action::HostLost { peer });
            }
            out.push(Action::FailQuestions { peer, why: Unanswered::Host(new) });
        }
        out.push(Action::Notify { peer, previous, state: new, reason: reason.to_string() });
    }
}

/// How long a restarted daemon waits for its processes to register their grants again
/// before it tells the other hosts what they hold (and sweeps what nobody claims): the
/// processes' node watches retry every 100 ms.
fn adoption_window(cluster: &ClusterConfig) -> Duration {
    cluster.suspect_after.max(Duration::from_secs(1))
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The state machine alone, on a fake clock: every `Instant` is `t0` plus what the test
/// says, and nothing sleeps.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::config::ClusterSection;
    use crate::config::NodeEntry;

    const SUSPECT: Duration = Duration::from_millis(500);
    const LOST: Duration = Duration::from_millis(10_000);
    const B: usize = 0;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Host a's view of hosts b and c: heartbeat 100 ms, suspect after 500, lost after 10 s.
    fn membership(t0: Instant) -> Membership {
        let section = ClusterSection {
            heartbeat_ms: Some(100),
            suspect_after_ms: Some(SUSPECT.as_millis() as u64),
            lost_after_ms: Some(LOST.as_millis() as u64),
            ..Default::default()
        };
        let node = |id: u32, host: &str, port: u16| NodeEntry {
            id,
            host: host.into(),
            address: Some(format!("127.0.0.1:{port}")),
            public_key: None,
        };
        let nodes = [node(8, "a", 7470), node(12, "b", 7471), node(16, "c", 7472)];
        let cluster = ClusterConfig::build(&section, &nodes).unwrap();
        Membership::new(&cluster, ["b".to_string(), "c".to_string()], t0)
    }

    /// The transitions among `actions`: (host, previous, new).
    fn changes(actions: &[Action]) -> Vec<(usize, HostState, HostState)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Changed { peer, previous, state, .. } => Some((*peer, *previous, *state)),
                _ => None,
            })
            .collect()
    }

    fn reason_of(actions: &[Action]) -> &str {
        actions
            .iter()
            .find_map(|a| match a {
                Action::Changed { reason, .. } => Some(reason.as_str()),
                _ => None,
            })
            .expect("a transition")
    }

    /// What leaving Operational for `to` entails, in the order the daemon does it.
    fn leaving(peer: usize, from: HostState, to: HostState, reason: &str) -> Vec<Action> {
        let reason = reason.to_string();
        let mut out = vec![Action::Changed { peer, previous: from, state: to, reason: reason.clone() }];
        out.push(Action::CloseLink { peer });
        if to == HostState::Lost {
            out.push(Action::HostLost { peer });
        }
        out.push(Action::FailQuestions { peer, why: Unanswered::Host(to) });
        out.push(Action::Notify { peer, previous: from, state: to, reason });
        out
    }

    #[test]
    fn a_host_is_unknown_until_its_hello_and_operational_at_it() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        assert_eq!(m.state(B), HostState::Unknown);
        // Never heard of: no silence to count, however long.
        assert!(m.on_tick(t0 + LOST * 3).is_empty());
        assert_eq!(m.state(B), HostState::Unknown);
        let t1 = t0 + ms(50);
        let actions = m.on_hello(B, 1, "k/1", t1);
        let reason = "hello received".to_string();
        let (previous, state) = (HostState::Unknown, HostState::Operational);
        assert_eq!(
            actions,
            vec![
                Action::Changed { peer: B, previous, state, reason: reason.clone() },
                Action::Notify { peer: B, previous, state, reason },
            ]
        );
        assert_eq!((m.state(B), m.since(B), m.last_heard(B)), (HostState::Operational, t1, Some(t1)));
        assert_eq!(m.state(1), HostState::Unknown, "c is another host");
    }

    #[test]
    fn a_silent_host_is_suspect_after_the_heartbeat_bound_then_lost_after_the_lost_bound() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        let heard = t0 + ms(300);
        m.on_frame(B, heard);
        assert!(m.on_tick(heard + SUSPECT - ms(1)).is_empty(), "one ms early");
        assert_eq!(m.state(B), HostState::Operational);
        let t = heard + SUSPECT;
        let actions = m.on_tick(t);
        assert_eq!(actions, leaving(B, HostState::Operational, HostState::Suspect, "no heartbeat for 500 ms"));
        assert_eq!((m.state(B), m.since(B)), (HostState::Suspect, t));
        // Suspect counts towards Lost from the last frame, not from becoming Suspect.
        assert!(m.on_tick(heard + LOST - ms(1)).is_empty());
        let t = heard + LOST;
        let actions = m.on_tick(t);
        assert_eq!(actions, leaving(B, HostState::Suspect, HostState::Lost, "silent for 10000 ms"));
        assert_eq!((m.state(B), m.since(B)), (HostState::Lost, t));
        assert!(m.on_tick(t + LOST).is_empty(), "Lost stays Lost until a hello");
    }

    #[test]
    fn frames_keep_a_host_operational() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        for k in 1..=200 {
            let t = t0 + ms(100 * k);
            m.on_frame(B, t);
            assert!(m.on_tick(t + ms(50)).is_empty(), "tick {k}");
        }
        assert_eq!((m.state(B), m.since(B)), (HostState::Operational, t0));
    }

    #[test]
    fn a_suspect_host_recovers_at_its_next_hello() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        m.on_tick(t0 + SUSPECT);
        assert_eq!(m.state(B), HostState::Suspect);
        // A late frame of the closed connection is a sign of life, not a return.
        m.on_frame(B, t0 + ms(600));
        assert_eq!(m.state(B), HostState::Suspect);
        assert!(m.on_tick(t0 + ms(600) + LOST - ms(1)).is_empty());
        // The dialler's fresh connection says hello again: same daemon, same host.
        let t = t0 + ms(2_000);
        let actions = m.on_hello(B, 1, "k/1", t);
        assert_eq!(changes(&actions), vec![(B, HostState::Suspect, HostState::Operational)]);
        assert!(!actions.iter().any(|a| matches!(a, Action::HostLost { .. } | Action::CloseLink { .. })));
        assert_eq!((m.state(B), m.since(B), m.last_heard(B)), (HostState::Operational, t, Some(t)));
        // And the bounds count from the hello.
        assert!(m.on_tick(t + SUSPECT - ms(1)).is_empty());
        assert_eq!(changes(&m.on_tick(t + SUSPECT)), vec![(B, HostState::Operational, HostState::Suspect)]);
    }

    #[test]
    fn a_lost_host_comes_back_operational_at_its_hello() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        m.on_tick(t0 + SUSPECT);
        m.on_tick(t0 + LOST);
        assert_eq!(m.state(B), HostState::Lost);
        let actions = m.on_hello(B, 1, "k/1", t0 + LOST + ms(1));
        assert_eq!(changes(&actions), vec![(B, HostState::Lost, HostState::Operational)]);
    }

    #[test]
    fn a_failed_or_stalled_connection_makes_an_operational_host_suspect_at_once() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        let t = t0 + ms(10);
        let actions = m.on_link_ended(B, false, "connection failed: timed out", t);
        let why = "connection failed: timed out";
        assert_eq!(actions, leaving(B, HostState::Operational, HostState::Suspect, why));
        assert_eq!((m.state(B), m.since(B)), (HostState::Suspect, t));
        // An ended connection of a host that is not Operational is only logged.
        let actions = m.on_link_ended(B, true, "connection closed by peer", t);
        assert_eq!(
            actions,
            vec![Action::Log { message: "host b: connection ended: connection closed by peer".into() }]
        );
        assert_eq!(m.state(B), HostState::Suspect);

        m.on_hello(B, 1, "k/1", t0 + ms(20));
        let actions = m.on_link_stalled(B, t0 + ms(30));
        assert_eq!(actions, leaving(B, HostState::Operational, HostState::Suspect, "its connection is stalled"));
    }

    #[test]
    fn a_peer_restart_with_a_new_boot_and_host_epoch_is_lost_then_operational() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "kernel1/dir1", t0);
        let t = t0 + ms(100);
        let actions = m.on_hello(B, 2, "kernel2/dir1", t);
        let why = "its host restarted (new boot epoch)";
        let mut want = leaving(B, HostState::Operational, HostState::Lost, why);
        let (previous, state, reason) = (HostState::Lost, HostState::Operational, "hello received".to_string());
        want.push(Action::Changed { peer: B, previous, state, reason: reason.clone() });
        want.push(Action::Notify { peer: B, previous, state, reason });
        assert_eq!(actions, want, "the host's grants are released, then it is back");
        assert_eq!((m.state(B), m.since(B)), (HostState::Operational, t));
        // A daemon that says nothing of its host's epoch is taken as a restarted host too.
        let actions = m.on_hello(B, 3, "", t + ms(100));
        assert_eq!(
            changes(&actions),
            vec![(B, HostState::Operational, HostState::Lost), (B, HostState::Lost, HostState::Operational)]
        );
        // The same boot on a new connection (a redial) is no restart.
        assert!(changes(&m.on_hello(B, 3, "", t + ms(200))).is_empty());
        // Nor is an empty epoch the "same" epoch: a new boot with it again is a new host.
        assert_eq!(
            changes(&m.on_hello(B, 4, "", t + ms(300))),
            vec![(B, HostState::Operational, HostState::Lost), (B, HostState::Lost, HostState::Operational)]
        );
    }

    #[test]
    fn a_daemon_restart_on_a_living_host_keeps_it_operational_and_reconciles() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        // Its daemon dies: the host's kernel closed the connection.
        let gone = t0 + ms(1_000);
        let actions = m.on_link_ended(B, true, "connection closed by peer", gone);
        let message = "host b: host daemon restarting? (connection closed by peer); its host still answers";
        // The questions asked of the dead daemon are answered "restarting" at once (its
        // successor will not answer them; the askers ask again), not left to time out.
        assert_eq!(
            actions,
            vec![
                Action::Log { message: message.into() },
                Action::FailQuestions { peer: B, why: Unanswered::DaemonRestarting }
            ]
        );
        assert!(m.away(B));
        assert_eq!((m.state(B), m.since(B)), (HostState::Operational, t0));
        // The host answers connects every heartbeat: no Suspect, however long the silence.
        for k in 1..=40 {
            let t = gone + ms(100 * k);
            m.on_host_answered(B, t);
            assert!(m.on_tick(t + ms(50)).is_empty(), "tick {k}");
        }
        // Its new daemon says hello: a new boot value, the same host epoch.
        let actions = m.on_hello(B, 2, "k/1", gone + ms(4_100));
        let message = "host b: its daemon restarted (same host epoch): reconciling grants";
        assert_eq!(actions, vec![Action::Log { message: message.into() }], "no transition, no release");
        assert!(!m.away(B));
        assert_eq!((m.state(B), m.since(B)), (HostState::Operational, t0));
        // Answered connects only count while its daemon is away.
        let t = gone + ms(4_100);
        m.on_host_answered(B, t + SUSPECT);
        assert_eq!(changes(&m.on_tick(t + SUSPECT)), vec![(B, HostState::Operational, HostState::Suspect)]);
    }

    #[test]
    fn a_daemon_away_for_the_lost_bound_makes_its_host_lost() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        let gone = t0 + ms(200);
        m.on_link_ended(B, true, "connection reset by peer", gone);
        let mut t = gone;
        while t + ms(100) < gone + LOST {
            t += ms(100);
            m.on_host_answered(B, t);
            assert!(m.on_tick(t).is_empty());
        }
        let t = gone + LOST;
        m.on_host_answered(B, t);
        let actions = m.on_tick(t);
        let why = "its daemon did not come back within 10000 ms";
        assert_eq!(actions, leaving(B, HostState::Operational, HostState::Lost, why));
        assert!(!m.away(B));
    }

    #[test]
    fn a_daemon_away_on_a_silent_host_is_suspect_after_the_heartbeat_bound() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        let gone = t0 + ms(200);
        m.on_link_ended(B, true, "connection closed by peer", gone);
        assert!(m.on_tick(gone + SUSPECT - ms(1)).is_empty());
        let actions = m.on_tick(gone + SUSPECT);
        assert_eq!(actions, leaving(B, HostState::Operational, HostState::Suspect, "no heartbeat for 500 ms"));
        assert!(!m.away(B), "no longer a daemon restarting");
    }

    /// A hello that fails its proof (wrong key, replay, wrong secret, another host's
    /// address) is refused before it is a hello: it changes nothing of the live host it
    /// names, is no sign of life, and is logged once per source and reason every 10 s.
    #[test]
    fn a_refused_hello_never_changes_a_live_peer() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(B, 1, "k/1", t0);
        let heard = t0 + ms(100);
        m.on_frame(B, heard);
        let impostor: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let why = "a daemon calling itself host b proved key 00, not host b's key in lanes.toml";
        let logged = |actions: &[Action]| {
            assert!(actions.iter().all(|a| matches!(a, Action::Log { .. })), "{actions:?}");
            actions.len()
        };
        assert_eq!(logged(&m.on_refused(impostor, why, heard + ms(10))), 1);
        for k in 2..=39 {
            // Redialling every 10 ms: not logged again, nothing changes.
            let t = heard + ms(10 * k);
            assert_eq!(logged(&m.on_refused(impostor, why, t)), 0, "refusal {k}");
            assert_eq!(m.state(B), HostState::Operational);
        }
        // Another reason, or another source, is logged at once.
        assert_eq!(logged(&m.on_refused(impostor, "bad preamble", heard + ms(20))), 1);
        let other: SocketAddr = "127.0.0.2:40000".parse().unwrap();
        assert_eq!(logged(&m.on_refused(other, why, heard + ms(20))), 1);
        assert_eq!((m.state(B), m.since(B), m.last_heard(B)), (HostState::Operational, t0, Some(heard)));
        // The refusals were no sign of life: b is Suspect on the schedule of its last frame.
        assert!(m.on_tick(heard + SUSPECT - ms(1)).is_empty());
        assert_eq!(changes(&m.on_tick(heard + SUSPECT)), vec![(B, HostState::Operational, HostState::Suspect)]);
        // Ten seconds later the same refusal is logged again.
        assert_eq!(logged(&m.on_refused(impostor, why, heard + ms(10) + REFUSAL_LOG_EVERY)), 1);
    }

    /// This daemon's own restart: during the adoption window (`max(suspect_after, 1 s)`)
    /// processes of the earlier daemon register their grants again; only after it do the
    /// `Holding` lists go out, and this host's unclaimed proxy slots are swept, once.
    #[test]
    fn holdings_wait_for_the_adoption_window_and_own_orphans_are_swept_once() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        assert!(m.on_adoption_tick(t0).is_empty());
        assert!(m.on_adoption_tick(t0 + ms(999)).is_empty());
        assert_eq!(m.on_adoption_tick(t0 + ms(1_000)), vec![Action::SendHoldings, Action::SweepOwnOrphans]);
        assert_eq!(m.on_adoption_tick(t0 + ms(1_100)), vec![Action::SendHoldings]);
        assert_eq!(m.on_adoption_tick(t0 + ms(60_000)), vec![Action::SendHoldings]);
    }

    #[test]
    fn hosts_change_state_independently() {
        let t0 = Instant::now();
        let mut m = membership(t0);
        m.on_hello(0, 1, "k/1", t0);
        m.on_hello(1, 1, "k/2", t0 + ms(300));
        assert_eq!(changes(&m.on_tick(t0 + SUSPECT)), vec![(0, HostState::Operational, HostState::Suspect)]);
        assert_eq!(m.state(1), HostState::Operational);
        let actions = m.on_tick(t0 + ms(300) + SUSPECT);
        assert_eq!(changes(&actions), vec![(1, HostState::Operational, HostState::Suspect)]);
        assert_eq!(reason_of(&actions), "no heartbeat for 500 ms");
    }
}
