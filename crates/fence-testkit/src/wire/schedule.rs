//! [`WireFault`]s and the seeded [`Schedule`] that picks one per request.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use fence_core::Entropy;

/// What the proxy does with one HTTP request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireFault {
    /// Forward it and pass the server's answer back.
    Forward,
    /// Reset the client's connection (TCP RST) without forwarding: nothing applied, but the
    /// client cannot know.
    ResetBeforeForward,
    /// Answer this status without forwarding: nothing applied.
    AnswerBefore(u16),
    /// Answer `303 See Other` pointing back at the same URL, without forwarding: nothing
    /// applied (a client that follows it turns the write into a read).
    RedirectBefore,
    /// Forward, take the server's answer, then close the client's connection without
    /// answering (TCP FIN): the answer is lost.
    DropAnswer,
    /// Forward, take the server's answer, then reset the client's connection (TCP RST).
    ResetAfterForward,
    /// Forward, then answer this status instead of the server's answer.
    AnswerAfter(u16),
    /// Hold the request this long, then forward it (it lands after a client with a shorter
    /// deadline gave up).
    DelayForward(Duration),
    /// Forward, then hold the server's answer this long before passing it back.
    DelayAnswer(Duration),
}

impl WireFault {
    /// Whether the request reaches the server under this fault.
    pub fn forwards(&self) -> bool {
        !matches!(
            self,
            WireFault::ResetBeforeForward | WireFault::AnswerBefore(_) | WireFault::RedirectBefore
        )
    }
}

impl fmt::Display for WireFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireFault::Forward => f.write_str("forward"),
            WireFault::ResetBeforeForward => f.write_str("reset before forwarding"),
            WireFault::AnswerBefore(s) => write!(f, "{s} before forwarding"),
            WireFault::RedirectBefore => f.write_str("303 to the same URL before forwarding"),
            WireFault::DropAnswer => f.write_str("answer dropped after the server answered"),
            WireFault::ResetAfterForward => f.write_str("reset after the server answered"),
            WireFault::AnswerAfter(s) => write!(f, "{s} after the server answered"),
            WireFault::DelayForward(d) => write!(f, "request held {} ms", d.as_millis()),
            WireFault::DelayAnswer(d) => write!(f, "answer held {} ms", d.as_millis()),
        }
    }
}

/// Probabilities of faults for one kind of request (writes or reads); what is left is
/// [`WireFault::Forward`].
///
/// ```
/// use std::time::Duration;
/// use fence_testkit::wire::{FaultMix, WireFault};
/// let mix = FaultMix::none().with(0.05, WireFault::DropAnswer).with(0.05, WireFault::AnswerAfter(503));
/// assert!((mix.fault_rate() - 0.10).abs() < 1e-9);
/// let writes = FaultMix::writes(Duration::from_secs(1));
/// assert!(writes.fault_rate() > 0.2 && writes.fault_rate() < 0.5);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultMix {
    faults: Vec<(f64, WireFault)>,
}

impl FaultMix {
    /// No faults: every request is forwarded.
    pub fn none() -> Self {
        FaultMix::default()
    }

    /// The same mix, also injecting `fault` with probability `p`.
    #[must_use]
    pub fn with(mut self, p: f64, fault: WireFault) -> Self {
        self.faults.push((p.clamp(0.0, 1.0), fault));
        self
    }

    /// Every fault kind on conditional writes, about 31% of requests. `deadline` is the
    /// adapter's bound of one write: the delays are 1.5 × `deadline`.
    pub fn writes(deadline: Duration) -> Self {
        let late = deadline + deadline / 2;
        FaultMix::none()
            .with(0.04, WireFault::ResetBeforeForward)
            .with(0.02, WireFault::AnswerBefore(503))
            .with(0.02, WireFault::AnswerBefore(429))
            .with(0.02, WireFault::AnswerBefore(409))
            .with(0.02, WireFault::AnswerBefore(500))
            .with(0.01, WireFault::RedirectBefore)
            .with(0.04, WireFault::DropAnswer)
            .with(0.04, WireFault::ResetAfterForward)
            .with(0.02, WireFault::AnswerAfter(503))
            .with(0.02, WireFault::AnswerAfter(500))
            .with(0.02, WireFault::AnswerAfter(429))
            .with(0.02, WireFault::DelayForward(late))
            .with(0.02, WireFault::DelayAnswer(late))
    }

    /// Quick faults for reads, which adapters retry (no delays: a read's deadline is long):
    /// about 10% of requests.
    pub fn reads() -> Self {
        FaultMix::none()
            .with(0.03, WireFault::ResetBeforeForward)
            .with(0.03, WireFault::AnswerBefore(503))
            .with(0.02, WireFault::DropAnswer)
            .with(0.02, WireFault::AnswerAfter(500))
    }

    /// The same faults, each `factor` times as likely.
    #[must_use]
    pub fn scaled(mut self, factor: f64) -> Self {
        for (p, _) in &mut self.faults {
            *p = (*p * factor).clamp(0.0, 1.0);
        }
        self
    }

    /// The probability that a request gets a fault.
    pub fn fault_rate(&self) -> f64 {
        self.faults.iter().map(|(p, _)| p).sum::<f64>().min(1.0)
    }

    fn pick(&self, draw: f64) -> WireFault {
        let mut acc = 0.0;
        for (p, fault) in &self.faults {
            acc += p;
            if draw < acc {
                return *fault;
            }
        }
        WireFault::Forward
    }
}

/// Which fault each request gets: scripted faults first (in order, any request), then a
/// draw from the writes' or the reads' [`FaultMix`], from one seed.
///
/// ```
/// use fence_testkit::wire::{FaultMix, Schedule, WireFault};
/// let schedule = Schedule::seeded(7).with_writes(FaultMix::none().with(1.0, WireFault::DropAnswer));
/// schedule.script([WireFault::AnswerBefore(503)]);
/// assert_eq!(schedule.next(true), WireFault::AnswerBefore(503));
/// assert_eq!(schedule.next(true), WireFault::DropAnswer);
/// assert_eq!(schedule.next(false), WireFault::Forward, "reads have no faults");
/// ```
#[derive(Debug)]
pub struct Schedule {
    entropy: Entropy,
    mixes: Mutex<(FaultMix, FaultMix)>,
    scripted: Mutex<VecDeque<WireFault>>,
}

impl Schedule {
    /// Forwards everything until given a mix or a script; `seed` drives every draw.
    pub fn seeded(seed: u64) -> Self {
        Schedule {
            entropy: Entropy::seeded(seed),
            mixes: Mutex::new((FaultMix::none(), FaultMix::none())),
            scripted: Mutex::new(VecDeque::new()),
        }
    }

    /// The same schedule with `mix` for writes (PUT, POST, PATCH, DELETE).
    #[must_use]
    pub fn with_writes(self, mix: FaultMix) -> Self {
        self.set_writes(mix);
        self
    }

    /// The same schedule with `mix` for reads (GET, HEAD and the rest).
    #[must_use]
    pub fn with_reads(self, mix: FaultMix) -> Self {
        self.set_reads(mix);
        self
    }

    /// Replaces the writes' mix (for instance with [`FaultMix::none`] to stop faults).
    pub fn set_writes(&self, mix: FaultMix) {
        self.mixes.lock().unwrap_or_else(|p| p.into_inner()).0 = mix;
    }

    /// Replaces the reads' mix.
    pub fn set_reads(&self, mix: FaultMix) {
        self.mixes.lock().unwrap_or_else(|p| p.into_inner()).1 = mix;
    }

    /// Faults for the next requests, one each, whatever their kind.
    pub fn script(&self, faults: impl IntoIterator<Item = WireFault>) {
        let mut scripted = self.scripted.lock().unwrap_or_else(|p| p.into_inner());
        scripted.extend(faults);
    }

    /// The fault of the next request (`write`: whether it is a write).
    pub fn next(&self, write: bool) -> WireFault {
        let scripted = self
            .scripted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        if let Some(fault) = scripted {
            return fault;
        }
        let draw = self.entropy.below(1_000_000) as f64 / 1_000_000.0;
        let mixes = self.mixes.lock().unwrap_or_else(|p| p.into_inner());
        if write {
            mixes.0.pick(draw)
        } else {
            mixes.1.pick(draw)
        }
    }
}
