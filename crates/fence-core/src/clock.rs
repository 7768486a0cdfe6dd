//! The one module that reads clocks and entropy. Everything else gets them injected, so the
//! decision core is pure and the runtime can run on virtual time in simulations.
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// Wall-clock milliseconds since the Unix epoch, as this machine's clock says.
///
/// Used for lease expiry times that peers read; never for a process's judgement of its own
/// lease (that uses the monotonic clock).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A process's view of time: a monotonic clock (milliseconds since the clock was made, driven
/// by tokio, so it follows tokio's paused/virtual time in tests) and a wall clock (possibly
/// skewed, for simulating machines that disagree).
///
/// ```
/// use fence_core::Clock;
/// let clock = Clock::system().with_skew_ms(-250);
/// assert!(clock.wall_ms() > 1_600_000_000_000);
/// ```
#[derive(Clone, Debug)]
pub struct Clock {
    origin: tokio::time::Instant,
    wall: Wall,
    skew_ms: i64,
    /// Monotonic time this clock did not see (a suspended machine: Linux's
    /// `CLOCK_MONOTONIC` stops during system suspend while the wall clock jumps).
    lag: Option<Arc<Suspension>>,
    /// A stopped process (SIGSTOP, a paused VM): its timers fire only once it runs again.
    stop: Option<Arc<Stop>>,
}

/// Stops a process, to simulate `SIGSTOP` or a paused VM whose clock keeps running: while
/// stopped, a [`Clock`]'s sleeps and timeouts do not complete; when it continues, whatever
/// became ready meanwhile is seen at once — a timeout and an answer that both arrived
/// during the stop resolve in favour of the answer, as `tokio::time::timeout` does.
#[derive(Debug, Default)]
pub struct Stop {
    stopped: std::sync::atomic::AtomicBool,
    changed: tokio::sync::Notify,
}

impl Stop {
    /// Stops the process.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Lets it run again.
    pub fn resume(&self) {
        self.stopped.store(false, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Whether it is stopped now.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Returns once the process runs.
    pub async fn running(&self) {
        loop {
            let changed = self.changed.notified();
            if !self.is_stopped() {
                return;
            }
            changed.await;
        }
    }
}

/// Makes a [`Clock`]'s monotonic time stand still, to simulate a suspended machine (a laptop
/// lid, a paused VM): the case where a holder's own lease check is wrong and only the store
/// can fence it.
#[derive(Debug, Default)]
pub struct Suspension {
    lost_ms: AtomicU64,
    since: Mutex<Option<tokio::time::Instant>>,
}

impl Suspension {
    /// Starts the suspension (monotonic time stops advancing).
    pub fn suspend(&self) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        since.get_or_insert_with(tokio::time::Instant::now);
    }

    /// Ends it: the time spent suspended is never seen by the clock.
    pub fn resume(&self) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = since.take() {
            let lost = t.elapsed().as_millis() as u64;
            self.lost_ms.fetch_add(lost, Ordering::SeqCst);
        }
    }

    fn lost_at(&self, now: tokio::time::Instant) -> u64 {
        let since = *self.since.lock().unwrap_or_else(|p| p.into_inner());
        let running = since.map_or(0, |t| now.saturating_duration_since(t).as_millis() as u64);
        self.lost_ms.load(Ordering::SeqCst) + running
    }
}

#[derive(Clone, Copy, Debug)]
enum Wall {
    System,
    /// Wall time = `base_ms` + monotonic elapsed: for virtual-time runs.
    Virtual {
        base_ms: u64,
    },
}

impl Clock {
    /// The real clocks of this machine.
    pub fn system() -> Self {
        Clock {
            origin: tokio::time::Instant::now(),
            wall: Wall::System,
            skew_ms: 0,
            lag: None,
            stop: None,
        }
    }

    /// A clock whose wall time starts at `base_ms` and advances with tokio's (possibly
    /// paused) time. Use under `tokio::time::pause()` for deterministic runs.
    pub fn virtual_at(base_ms: u64) -> Self {
        Clock {
            origin: tokio::time::Instant::now(),
            wall: Wall::Virtual { base_ms },
            skew_ms: 0,
            lag: None,
            stop: None,
        }
    }

    /// The real clocks of this machine, with monotonic time counted from the host's boot
    /// (the zero of `CLOCK_MONOTONIC`, which every process of the host shares) instead of
    /// from now: an instant another process of this host saw before this one started has a
    /// place on it, so a [`HostInstant`] that process left behind can be brought onto this
    /// clock ([`Clock::mono_of_host`]). Elsewhere than Linux the same as [`Clock::system`].
    pub fn host() -> Self {
        let now = tokio::time::Instant::now();
        let origin = host::monotonic_since_boot()
            .and_then(|up| {
                // The two reads are a few microseconds apart: step back a little less when
                // the exact figure would lie before the clock's zero.
                now.checked_sub(up)
                    .or_else(|| now.checked_sub(up.saturating_sub(Duration::from_secs(1))))
            })
            .unwrap_or(now);
        Clock {
            origin,
            ..Clock::system()
        }
    }

    /// The same clock with its wall time shifted by `skew_ms` (the monotonic clock is
    /// unaffected).
    #[must_use]
    pub fn with_skew_ms(mut self, skew_ms: i64) -> Self {
        self.skew_ms = skew_ms;
        self
    }

    /// The same clock, whose monotonic time stands still while `suspension` is suspended.
    #[must_use]
    pub fn with_suspension(mut self, suspension: Arc<Suspension>) -> Self {
        self.lag = Some(suspension);
        self
    }

    /// The same clock, whose sleeps and timeouts wait while `stop` is stopped.
    #[must_use]
    pub fn with_stop(mut self, stop: Arc<Stop>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Monotonic milliseconds since this clock was made.
    pub fn mono_ms(&self) -> u64 {
        let now = tokio::time::Instant::now();
        let elapsed = now.saturating_duration_since(self.origin).as_millis() as u64;
        elapsed.saturating_sub(self.lag.as_ref().map_or(0, |l| l.lost_at(now)))
    }

    fn elapsed_ms(&self) -> u64 {
        tokio::time::Instant::now()
            .saturating_duration_since(self.origin)
            .as_millis() as u64
    }

    /// Wall-clock milliseconds since the Unix epoch, with this clock's skew.
    pub fn wall_ms(&self) -> u64 {
        let base = match self.wall {
            Wall::System => now_ms(),
            Wall::Virtual { base_ms } => base_ms + self.elapsed_ms(),
        };
        base.saturating_add_signed(self.skew_ms)
    }

    /// The tokio instant of monotonic time `mono_ms`.
    pub fn instant_at(&self, mono_ms: u64) -> tokio::time::Instant {
        let lag = self
            .lag
            .as_ref()
            .map_or(0, |l| l.lost_at(tokio::time::Instant::now()));
        self.origin + Duration::from_millis(mono_ms + lag)
    }

    /// Sleeps until monotonic time `mono_ms` (and, for a stopped process, until it runs).
    pub async fn sleep_until(&self, mono_ms: u64) {
        tokio::time::sleep_until(self.instant_at(mono_ms)).await;
        self.running().await;
    }

    /// Sleeps for `d` (and, for a stopped process, until it runs).
    pub async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await;
        self.running().await;
    }

    /// Whether this clock's monotonic time is the host's (the system clock, no simulated
    /// suspension), so that it can be related to the host clock.
    fn is_real(&self) -> bool {
        matches!(self.wall, Wall::System) && self.lag.is_none()
    }

    /// Monotonic time `mono_ms` of this clock on the host clock, **never earlier** than the
    /// true instant (rounded up by 2 ms; a suspend since `mono_ms` makes it later still): for
    /// handing a *first sighting* to a later process of this host. `None` where there is no
    /// host clock (not Linux) or this clock is not the system's (virtual time, a simulated
    /// suspension). Meaningless under a paused tokio runtime, which this cannot detect.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// use fence_core::Clock;
    /// let clock = Clock::host();
    /// if let Some(at) = clock.host_instant_of(clock.mono_ms()) {
    ///     // Back on a clock of this host: never earlier than it was.
    ///     assert!(Clock::host().mono_of_host(&at).is_some());
    /// }
    /// assert_eq!(Clock::virtual_at(0).host_instant_of(5), None);
    /// # });
    /// ```
    pub fn host_instant_of(&self, mono_ms: u64) -> Option<HostInstant> {
        if !self.is_real() {
            return None;
        }
        // Mono first, boot second: the offset boot - mono read this way is at least the
        // offset at `mono_ms` (boot time only gains on monotonic time, by suspends).
        let mono = i128::from(self.mono_ms());
        let boot = i128::from(host::boottime_ms()?);
        // Both reads floor to whole ms: 2 ms make up for the two roundings.
        let boot_ms = i128::from(mono_ms) + (boot - mono) + 2;
        Some(HostInstant {
            boot_id: host::boot_id()?,
            boot_ms: u64::try_from(boot_ms).ok()?,
        })
    }

    /// The monotonic time of this clock at host instant `at`, **never earlier** than the true
    /// one (rounded up by 1 ms; a suspend since `at` makes it earlier only by time that
    /// really passed, which the host clock counts). `None` for an instant of another boot, a
    /// future instant (a corrupt one), one before this clock can place it, or where
    /// [`host_instant_of`](Self::host_instant_of) is `None`.
    pub fn mono_of_host(&self, at: &HostInstant) -> Option<u64> {
        if !self.is_real() || at.boot_id != host::boot_id()? {
            return None;
        }
        // Boot first, mono second: the offset read this way is at most the true one now.
        let boot = host::boottime_ms()?;
        let mono = i128::from(self.mono_ms());
        // `host_instant_of` rounds up by 2 ms: an instant just made may lie that far ahead.
        if at.boot_ms > boot.saturating_add(2) {
            return None;
        }
        let mono_ms = i128::from(at.boot_ms) - (i128::from(boot) - mono) + 1;
        u64::try_from(mono_ms).ok()
    }

    async fn running(&self) {
        if let Some(stop) = &self.stop {
            stop.running().await;
        }
    }

    /// Runs `op` for at most `ms` of this clock's time: `None` if the time ran out first.
    /// When both are ready at once, `op` wins.
    pub async fn timeout<T>(&self, ms: u64, op: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            r = op => Some(r),
            _ = self.sleep(Duration::from_millis(ms)) => None,
        }
    }
}

/// An instant on this host's boot clock (`CLOCK_BOOTTIME`): monotonic, counting time spent
/// in suspend, and shared by every process of the host (of one time namespace) until it
/// reboots — `boot_id` (the kernel's `/proc/sys/kernel/random/boot_id`, and the time
/// namespace, whose clocks have offsets of their own) names the boot, so an instant of an
/// earlier boot or of another time namespace is recognised and never placed on this one's
/// clock.
///
/// Made and read only by [`Clock::host_instant_of`] and [`Clock::mono_of_host`], which round
/// so that a first sighting handed from one process to another is never earlier than it was.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostInstant {
    /// The boot this instant belongs to.
    pub boot_id: String,
    /// Milliseconds of the boot clock.
    pub boot_ms: u64,
}

/// The host's own clocks: Linux's `CLOCK_BOOTTIME`, `CLOCK_MONOTONIC` and boot id.
mod host {
    use std::time::Duration;

    #[cfg(target_os = "linux")]
    fn read(id: nix::time::ClockId) -> Option<Duration> {
        let t = nix::time::clock_gettime(id).ok()?;
        let secs = u64::try_from(t.tv_sec()).ok()?;
        let nanos = u32::try_from(t.tv_nsec()).ok()?;
        Some(Duration::new(secs, nanos))
    }

    /// `CLOCK_BOOTTIME` in whole milliseconds (floored).
    pub(super) fn boottime_ms() -> Option<u64> {
        #[cfg(target_os = "linux")]
        {
            u64::try_from(read(nix::time::ClockId::CLOCK_BOOTTIME)?.as_millis()).ok()
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// `CLOCK_MONOTONIC`: the time since its zero (about the host's boot).
    pub(super) fn monotonic_since_boot() -> Option<Duration> {
        #[cfg(target_os = "linux")]
        {
            read(nix::time::ClockId::CLOCK_MONOTONIC)
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// The kernel's id of this boot and of this process's time namespace, read once:
    /// `<boot id>` or `<boot id>/<time namespace>`. A time namespace (Linux 5.6+, used by
    /// containers and checkpoint/restore) gives `CLOCK_BOOTTIME` an offset of its own, so
    /// an instant of another time namespace must not be placed on this one's clock, as one
    /// of another boot must not. `None` (no host clock) if either cannot be read.
    pub(super) fn boot_id() -> Option<String> {
        static ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        ID.get_or_init(|| {
            let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let id = id.trim();
            let plausible = !id.is_empty()
                && id.len() <= 64
                && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
            if !plausible {
                return None;
            }
            Some(match time_namespace()? {
                Some(ns) => format!("{id}/{ns}"),
                None => id.to_owned(),
            })
        })
        .clone()
    }

    /// The inode of this process's time namespace (`/proc/self/ns/time` reads
    /// `time:[4026531834]`); `Some(None)` on a kernel without time namespaces; `None` if
    /// it cannot be told.
    fn time_namespace() -> Option<Option<u64>> {
        match std::fs::read_link("/proc/self/ns/time") {
            Ok(link) => {
                let link = link.to_str()?;
                let inode = link.strip_prefix("time:[")?.strip_suffix(']')?;
                Some(Some(inode.parse().ok()?))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(None),
            Err(_) => None,
        }
    }
}

/// Measures how long something took, on the real monotonic clock (latency metrics; never a
/// decision).
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts now.
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A shared, seedable source of randomness (nonces, jitter).
///
/// ```
/// use fence_core::Entropy;
/// let a = Entropy::seeded(7);
/// let b = Entropy::seeded(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// ```
#[derive(Clone, Debug)]
pub struct Entropy(Arc<Mutex<SmallRng>>);

impl Entropy {
    /// Seeded from the operating system.
    pub fn from_os() -> Self {
        Entropy(Arc::new(Mutex::new(SmallRng::from_entropy())))
    }

    /// Deterministic, for simulations and tests.
    pub fn seeded(seed: u64) -> Self {
        Entropy(Arc::new(Mutex::new(SmallRng::seed_from_u64(seed))))
    }

    /// The next random 64 bits.
    pub fn next_u64(&self) -> u64 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).next_u64()
    }

    /// A random value in `0..n` (0 when `n` is 0).
    pub fn below(&self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

impl Default for Entropy {
    fn default() -> Self {
        Entropy::from_os()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_instant_comes_back_never_earlier_and_only_on_its_own_boot() {
        let Some(id) = host::boot_id() else {
            return; // no host clock here (not Linux)
        };
        let clock = Clock::host();
        let now = clock.mono_ms();
        let at = clock.host_instant_of(now).expect("a host clock");
        assert_eq!(at.boot_id, id);
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        match std::fs::read_link("/proc/self/ns/time") {
            Ok(ns) => {
                let ns = ns.to_str().unwrap().trim_start_matches("time:[");
                assert_eq!(id, format!("{}/{}", boot.trim(), ns.trim_end_matches(']')));
            }
            Err(_) => assert_eq!(id, boot.trim()),
        }
        // Another process's clock of this host places it no earlier than it was.
        let later = Clock::host();
        let back = later.mono_of_host(&at).expect("placed");
        assert!(back >= now, "{back} < {now}");
        // A clock that started after the instant cannot place it before its own start.
        assert!(Clock::system()
            .mono_of_host(&HostInstant {
                boot_ms: 0,
                ..at.clone()
            })
            .is_none());
        let other_boot = HostInstant {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..at.clone()
        };
        assert_eq!(later.mono_of_host(&other_boot), None);
        let future = HostInstant {
            boot_ms: at.boot_ms + 3_600_000,
            ..at
        };
        assert_eq!(later.mono_of_host(&future), None);
    }

    #[test]
    fn simulated_clocks_have_no_host_instant() {
        let suspended = Clock::system().with_suspension(Arc::new(Suspension::default()));
        assert_eq!(suspended.host_instant_of(1), None);
        assert_eq!(Clock::virtual_at(7).host_instant_of(1), None);
    }
}
