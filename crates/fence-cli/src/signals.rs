//! The signals `fence run` catches and forwards to its command's process group.
//!
//! Every signal a process may catch and that makes sense to pass on is forwarded: HUP, INT,
//! QUIT, TERM, USR1, USR2, WINCH, ALRM, CONT, TSTP, URG, VTALRM, PROF, XCPU, XFSZ. Not
//! forwarded: KILL and STOP (nobody can catch them), the fault signals (SEGV, BUS, FPE, ILL,
//! TRAP, SYS: they concern the process that faults), CHLD (about fence's own children), PIPE
//! (fence writes little and handles a closed pipe as an error), TTIN and TTOU (a caught
//! terminal-stop signal is re-sent on every retry of the read or write that caused it) and,
//! on Linux, PWR, which the supervising process reserves as its parent-death signal.

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

/// Whether `signal`'s default action ends a process (so `fence` ends when it arrives before
/// there is a command to pass it to). WINCH, URG and CONT do not; TSTP stops.
pub fn terminates(signal: Signal) -> bool {
    !matches!(
        signal,
        Signal::SIGWINCH | Signal::SIGURG | Signal::SIGCONT | Signal::SIGTSTP
    )
}

/// Stops this process as a terminal stop would (it resumes on SIGCONT).
pub fn stop_self() {
    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
}

/// Catches a set of signals from now on (replacing their default actions) and hands them out
/// one at a time.
#[derive(Debug)]
pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Catches [`FORWARDED`] and `extra`.
    pub fn install(extra: &[Signal]) -> std::io::Result<Signals> {
        let mut streams = Vec::new();
        for &s in FORWARDED.iter().chain(extra) {
            streams.push((s, signal(SignalKind::from_raw(s as i32))?));
        }
        Ok(Signals { streams })
    }

    /// The next caught signal.
    pub async fn recv(&mut self) -> Signal {
        poll_fn(|cx| {
            for (s, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return Poll::Ready(*s);
                }
            }
            Poll::Pending
        })
        .await
    }
}
