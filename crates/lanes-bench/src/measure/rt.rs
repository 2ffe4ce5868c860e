//! Real-time set-up for a measuring process: memory locked, SCHED_FIFO where permitted.
//! Each step reports what it did, or why it could not, rather than failing the run.

/// SCHED_FIFO priority used for both processes of a measurement: above ordinary tasks and
/// below the kernel's own real-time threads (which run at 50 and up on PREEMPT_RT).
pub const FIFO_PRIORITY: i32 = 40;

/// What real-time set-up achieved.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct RtStatus {
    /// Whether `mlockall(MCL_CURRENT | MCL_FUTURE)` succeeded.
    pub mlockall: bool,
    /// Whether the process runs under SCHED_FIFO.
    pub sched_fifo: bool,
    /// Why a step did not happen, if one did not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl RtStatus {
    /// One line for humans.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "mlockall {}, SCHED_FIFO {}",
            if self.mlockall { "on" } else { "off" },
            if self.sched_fifo { format!("on (priority {FIFO_PRIORITY})") } else { "off".into() }
        );
        if !self.notes.is_empty() {
            s.push_str(&format!(" ({})", self.notes.join("; ")));
        }
        s
    }
}

/// Locks memory and asks for SCHED_FIFO. Locking is skipped when the memlock limit is
/// finite and the process lacks the privilege to exceed it: with MCL_FUTURE, every later
/// allocation past the limit would fail.
pub fn enter() -> RtStatus {
    let mut st = RtStatus::default();
    // SAFETY: rlimit is plain data; getrlimit writes it.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `lim` is valid for writes.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY && !root {
        st.notes.push(format!(
            "memory not locked: the memlock limit is {} KiB (raise it with `ulimit -l unlimited`)",
            lim.rlim_cur / 1024
        ));
    } else {
        // SAFETY: mlockall takes flags only.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } == 0 {
            st.mlockall = true;
        } else {
            st.notes.push(format!("mlockall: {}", std::io::Error::last_os_error()));
        }
    }
    let param = libc::sched_param { sched_priority: FIFO_PRIORITY };
    // SAFETY: `param` is a valid sched_param; pid 0 is this thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        st.sched_fifo = true;
    } else {
        let e = std::io::Error::last_os_error();
        st.notes.push(format!("SCHED_FIFO not permitted: {e}"));
    }
    st
}
