//! The signals `fence run` catches and forwards to its command's process group.
//!
//! Every signal a process may catch and that makes sense to pass on is forwarded: HUP, INT,
//! QUIT, TERM, USR1, USR2, WINCH, ALRM, CONT, TSTP, URG, VTALRM, PROF, XCPU, XFSZ and, on
//! Linux, STKFLT, IO (POLL), PWR and every real-time signal (SIGRTMIN to SIGRTMAX) — each of
//! those would otherwise end `fence run` by its default action, leaving the lease held until
//! it expires. Not forwarded: KILL and STOP (nobody can catch them), the fault signals (SEGV,
//! BUS, FPE, ILL, TRAP, SYS: they concern the process that faults), CHLD (about fence's own
//! children), PIPE (fence writes little and handles a closed pipe as an error), TTIN and TTOU
//! (a caught terminal-stop signal is re-sent on every retry of the read or write that caused
//! it). PWR is also the parent-death signal of the supervising process (fallback) and of
//! the gate (namespace): each tells the two apart by whether `fence run` is still its parent.

use std::fmt;
use std::future::poll_fn;
use std::task::Poll;

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// The forwarded signals.
pub const FORWARDED: &[Signal] = &[
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGALRM,
    Signal::SIGCONT,
    Signal::SIGTSTP,
    Signal::SIGURG,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGXCPU,
    Signal::SIGXFSZ,
];

/// The forwarded signals only Linux has.
#[cfg(target_os = "linux")]
const LINUX_FORWARDED: &[Signal] = &[Signal::SIGSTKFLT, Signal::SIGIO, Signal::SIGPWR];
#[cfg(not(target_os = "linux"))]
const LINUX_FORWARDED: &[Signal] = &[];

/// The real-time signals (Linux: the C library's SIGRTMIN to SIGRTMAX; the few below
/// SIGRTMIN are the C library's own and stay untouched).
fn realtime() -> std::ops::RangeInclusive<i32> {
    #[cfg(target_os = "linux")]
    {
        nix::libc::SIGRTMIN()..=nix::libc::SIGRTMAX()
    }
    #[cfg(not(target_os = "linux"))]
    {
        #[allow(clippy::reversed_empty_ranges)] // empty on purpose: none to catch
        {
            1..=0
        }
    }
}

/// A caught signal, by number: real-time signals have no name in `nix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caught(pub i32);

impl Caught {
    /// Whether this is `signal`.
    pub fn is(self, signal: Signal) -> bool {
        self.0 == signal as i32
    }
}

impl fmt::Display for Caught {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Signal::try_from(self.0) {
            Ok(named) => f.write_str(named.as_str()),
            Err(_) => write!(f, "SIGRTMIN+{}", self.0 - realtime().start()),
        }
    }
}

/// Whether `signal`'s default action ends a process (so `fence` ends when it arrives before
/// there is a command to pass it to). WINCH, URG and CONT do not; TSTP stops; every
/// real-time signal ends it.
pub fn terminates(signal: Caught) -> bool {
    ![
        Signal::SIGWINCH,
        Signal::SIGURG,
        Signal::SIGCONT,
        Signal::SIGTSTP,
    ]
    .iter()
    .any(|&s| signal.is(s))
}

/// Stops this process as a terminal stop would (it resumes on SIGCONT).
pub fn stop_self() {
    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
}

/// Catches a set of signals from now on (replacing their default actions) and hands them out
/// one at a time.
#[derive(Debug)]
pub struct Signals {
    streams: Vec<(i32, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Catches [`FORWARDED`], the Linux-only ones, the real-time signals and `extra` (each
    /// once).
    pub fn install(extra: &[Signal]) -> std::io::Result<Signals> {
        let named = FORWARDED.iter().chain(LINUX_FORWARDED).chain(extra);
        let mut streams: Vec<(i32, tokio::signal::unix::Signal)> = Vec::new();
        for n in named.map(|&s| s as i32).chain(realtime()) {
            if !streams.iter().any(|(have, _)| *have == n) {
                streams.push((n, signal(SignalKind::from_raw(n))?));
            }
        }
        Ok(Signals { streams })
    }

    /// The next caught signal.
    pub async fn recv(&mut self) -> Caught {
        poll_fn(|cx| {
            for (n, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return Poll::Ready(Caught(*n));
                }
            }
            Poll::Pending
        })
        .await
    }
}
