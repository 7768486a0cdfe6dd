//! The end of the command that no fence process has to be running for: a kernel timer that
//! SIGKILLs the process `fence run` starts — the gate ([`crate::contain`]), or in the
//! fallback the supervising process — at the end of the lease's authority, unless `fence
//! run` moves it on.
//!
//! Everything else that ends the command needs a fence process to run: the supervising
//! process sends the signals, and `fence run`, the gate and the init each watch the others.
//! A stop that catches all of them (SIGSTOP to their process groups, a debugger) leaves
//! nobody to act, and the command, which the stop did not reach, would run on beside the
//! next holder. A POSIX timer (`timer_create` on `CLOCK_BOOTTIME`, notifying with SIGKILL)
//! fires whether or not its process runs, and SIGKILL ends a stopped process as well. In a
//! namespace the gate's death SIGKILLs the init (the init's parent-death signal, which counts
//! for a namespace's init because it comes from the parent namespace), and the init's death
//! ends the namespace. In the fallback the supervising process's death SIGKILLs the command's
//! first process only (its parent-death signal); the others reparent to `fence run`.
//!
//! **Why the gate, not the init.** A PID namespace's init ignores a SIGKILL unless it comes
//! from an ancestor namespace, and the kernel does not count a timer's signal as one (it
//! queues it unforced): a timer in the init fires and does nothing.
//!
//! **What `fence run` says.** Deadlines in whole milliseconds of `CLOCK_BOOTTIME`, one per
//! line on a pipe of their own: the authority's end, less a margin, after every renewal;
//! once `fence run` asks for the command's end, that request's own limit (`--grace` + 1 s).
//! They are instants, not durations, so that a line read late (its reader was stopped) never
//! moves the end later than `fence run` meant. The first one comes in the arguments, and the
//! timer is armed before anything else is started. When `fence run` is gone (the pipe's end,
//! or the parent-death signal), the timer only ever moves earlier: to the orphan limit.

use std::time::Duration;

use fence_core::Clock;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::unix::pipe::Receiver;

/// Milliseconds of `CLOCK_BOOTTIME` (the clock every process of this host shares) `d` from
/// now, rounded up by at most 2 ms; `None` where there is no such clock (not Linux).
pub fn boot_ms_in(d: Duration) -> Option<u64> {
    let clock = Clock::system();
    let at = clock.mono_ms().saturating_add(d.as_millis() as u64);
    clock.host_instant_of(at).map(|i| i.boot_ms)
}

/// The timer, armed, and the deadlines `fence run` sends for it.
#[derive(Debug)]
pub struct KillTimer {
    timer: sys::Timer,
    /// The instant it is armed for (`CLOCK_BOOTTIME` ms).
    at: u64,
    deadlines: Option<Lines<BufReader<Receiver>>>,
    /// Whether `fence run` is gone.
    orphaned: bool,
}

impl KillTimer {
    /// Arms the timer at `at` (`CLOCK_BOOTTIME` ms) and takes the inherited read end
    /// `deadline_fd` of the pipe on which `fence run` moves it. Call before starting anything
    /// the timer must outlive, inside a tokio runtime.
    pub fn arm(at: u64, deadline_fd: i32) -> std::io::Result<KillTimer> {
        let mut timer = sys::Timer::new()?;
        timer.set(at)?;
        let file = crate::reaper::adopt_pipe(deadline_fd, false)?;
        let lines = BufReader::new(Receiver::from_file(file)?).lines();
        Ok(KillTimer {
            timer,
            at,
            deadlines: Some(lines),
            orphaned: false,
        })
    }

    /// Waits for the next line from `fence run` and applies it; at the pipe's end, `fence
    /// run` is gone: the timer moves to at most `orphan_limit` from now. Pending for ever
    /// after that.
    pub async fn follow(&mut self, orphan_limit: Duration) {
        let Some(lines) = self.deadlines.as_mut() else {
            return std::future::pending().await;
        };
        match lines.next_line().await {
            Ok(Some(line)) => {
                if let Ok(at) = line.trim().parse::<u64>() {
                    self.set(at);
                }
            }
            Ok(None) | Err(_) => {
                self.deadlines = None;
                self.orphan(orphan_limit);
            }
        }
    }

    /// `fence run` is gone: the timer fires `limit` from now at the latest. Only the first
    /// call counts.
    pub fn orphan(&mut self, limit: Duration) {
        if std::mem::replace(&mut self.orphaned, true) {
            return;
        }
        if let Some(soon) = boot_ms_in(limit) {
            self.set(soon.min(self.at));
        }
    }

    /// Arms the timer at `at`; once `fence run` is gone, only an earlier instant is taken
    /// (a line it wrote before it died is read after).
    fn set(&mut self, at: u64) {
        let at = if self.orphaned { at.min(self.at) } else { at };
        if self.timer.set(at).is_ok() {
            self.at = at;
        }
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::time::Duration;

    use nix::sys::signal::{SigEvent, SigevNotify, Signal};
    use nix::sys::time::TimeSpec;
    use nix::sys::timer::{Expiration, TimerSetTimeFlags};
    use nix::time::ClockId;

    /// A POSIX timer on `CLOCK_BOOTTIME` that sends this process SIGKILL. It counts time
    /// spent in system suspend, as the lease's wall-clock authority does.
    #[derive(Debug)]
    pub struct Timer(nix::sys::timer::Timer);

    impl Timer {
        pub fn new() -> std::io::Result<Timer> {
            let kill = SigEvent::new(SigevNotify::SigevSignal {
                signal: Signal::SIGKILL,
                si_value: 0,
            });
            Ok(Timer(nix::sys::timer::Timer::new(
                ClockId::CLOCK_BOOTTIME,
                kill,
            )?))
        }

        /// Fires at `boot_ms` (at once if that has passed).
        pub fn set(&mut self, boot_ms: u64) -> std::io::Result<()> {
            // Instant zero would disarm the timer; 1 ms is as long past.
            let at = TimeSpec::from(Duration::from_millis(boot_ms.max(1)));
            let abs = TimerSetTimeFlags::TFD_TIMER_ABSTIME;
            Ok(self.0.set(Expiration::OneShot(at), abs)?)
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    /// No `CLOCK_BOOTTIME` timers here: there is no kill timer.
    #[derive(Debug)]
    pub struct Timer;

    impl Timer {
        pub fn new() -> std::io::Result<Timer> {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "no CLOCK_BOOTTIME timers",
            ))
        }

        pub fn set(&mut self, _boot_ms: u64) -> std::io::Result<()> {
            Ok(())
        }
    }
}
