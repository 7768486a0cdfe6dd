//! The proof `fence release` needs before it signals anything: that a process is the holder
//! `fence acquire` started for this script, on this host.
//!
//! A lease record's `addr` (`pid:N@HOST`) is written by whoever can write the store, so it
//! never chooses a process here: a bucket writer can deny service, it cannot act on a host.
//! The holder proves itself locally instead:
//!
//! - once it holds the lease, the holder writes its *holder file* in this user's private
//!   directory (the one [`crate::sightings`] keeps: mode 0700, this user's, checked), a file
//!   of mode 0600 named by its pid and start time: its pid, its start time (field 22 of
//!   `/proc/PID/stat`), the boot and PID namespace it runs in, a random secret (128 bits
//!   from the operating system), the store and lease, and the script it watches;
//! - `fence acquire` exports the *holder token* `PID:START:SECRET` as `FENCE_HOLDER`;
//! - `fence release` acts only when the token names a holder file of this user whose pid,
//!   start time, secret, store and lease all match, and sends SIGTERM only through a pidfd of
//!   process PID opened while it still had that start time on this boot (so a pid reused by
//!   another process is never signalled, not even in a race). Anything else is refused.
//!
//! The file also says how the holder ended ([`Ended`]), so that `fence release` reports the
//! holder's own verdict — also when asked twice, or after the holder ended. A holder whose
//! script ended removes its file; a file whose holder and script are both gone is removed by
//! the next holder this user starts.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::script::{Pinned, Watched};
use crate::sightings::{checked_dir, private_dir, read_private, write_private};

/// What `fence acquire` exports as `FENCE_HOLDER`: `PID:START:SECRET`. Its `Debug` hides the
/// secret.
#[derive(Clone, PartialEq, Eq)]
pub struct HolderToken {
    pid: i32,
    start: u64,
    secret: String,
}

impl HolderToken {
    /// Parses `PID:START:SECRET` (the secret: 32 lowercase hex digits); `None` for anything
    /// else, a bare pid among them.
    ///
    /// ```
    /// use fence_cli::holder::HolderToken;
    /// let token = HolderToken::parse("42:1234:0123456789abcdef0123456789abcdef").unwrap();
    /// assert_eq!(token.pid(), 42);
    /// assert!(!format!("{token:?}").contains("0123456789abcdef"));
    /// assert!(HolderToken::parse("42").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<HolderToken> {
        let mut parts = text.split(':');
        let (pid, start, secret) = (parts.next()?, parts.next()?, parts.next()?);
        let secret_ok = secret.len() == SECRET_HEX
            && secret
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if parts.next().is_some() || !secret_ok {
            return None;
        }
        Some(HolderToken {
            pid: pid.parse().ok().filter(|p| *p > 0)?,
            start: start.parse().ok()?,
            secret: secret.to_owned(),
        })
    }

    /// The holder's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The holder's start time, in clock ticks since boot.
    pub fn start(&self) -> u64 {
        self.start
    }
}

impl fmt::Display for HolderToken {
    /// The token as `FENCE_HOLDER` carries it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.pid, self.start, self.secret)
    }
}

impl fmt::Debug for HolderToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HolderToken({}:{}:…)", self.pid, self.start)
    }
}

/// Hex digits of a token's secret (128 bits).
const SECRET_HEX: usize = 32;

/// How a holder ended, as its file tells `fence release`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "how", content = "why")]
pub enum Ended {
    /// It released the cell and the lease: the section was protected to its end.
    Released,
    /// The lease was lost before it let go (why): the section was not protected to its end.
    Lost(String),
    /// It held the lease to the end but could not release it (the store failed: why); the
    /// lease expires a TTL after its last renewal.
    NotReleased(String),
}

/// The longest reason a holder file keeps: with the store URL and the lease, the file stays
/// well within the 4 KiB a reader accepts (a longer one would be refused as a whole, and
/// `fence release` would say the holder ended without saying how).
const MAX_WHY_CHARS: usize = 1_000;

impl Ended {
    /// This ending with its reason cut to [`MAX_WHY_CHARS`] characters.
    fn cut(self) -> Ended {
        let cut = |why: String| match why.char_indices().nth(MAX_WHY_CHARS) {
            Some((at, _)) => format!("{}…", &why[..at]),
            None => why,
        };
        match self {
            Ended::Released => Ended::Released,
            Ended::Lost(why) => Ended::Lost(cut(why)),
            Ended::NotReleased(why) => Ended::NotReleased(cut(why)),
        }
    }
}

/// A holder file (see the module docs).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HolderFile {
    v: u32,
    pid: i32,
    start: u64,
    secret: String,
    boot_id: String,
    pid_ns: String,
    store: String,
    lease: String,
    script_pid: i32,
    script_start: Option<u64>,
    ended: Option<Ended>,
}

impl HolderFile {
    fn name(pid: i32, start: u64) -> String {
        format!("holder-{pid}-{start}.json")
    }

    /// Whether its holder process runs now: same boot, pid and start time.
    fn holder_runs(&self) -> bool {
        self.boot_id == boot_id() && Watched::exact(self.pid, Some(self.start)).is_some()
    }

    /// Whether the script it holds the lease for runs now.
    fn script_runs(&self) -> bool {
        self.boot_id == boot_id() && Watched::exact(self.script_pid, self.script_start).is_some()
    }
}

/// A holder file and where it is.
struct Located {
    path: PathBuf,
    file: HolderFile,
}

impl fmt::Debug for Located {
    /// The path only: the file holds the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())
    }
}

/// A holder's own file, kept while it holds a lease for a script.
#[derive(Debug)]
pub struct HolderRecord(Located);

impl HolderRecord {
    /// This process as the holder of `lease` on the store `store` (its canonical URL) for
    /// `script`: writes its file in this user's private directory, after removing the files
    /// of holders and scripts that are gone. Returns it and the token for `FENCE_HOLDER`.
    pub fn create(
        store: &str,
        lease: &str,
        script: &Watched,
    ) -> Result<(HolderRecord, HolderToken), String> {
        let dir = private_dir()?;
        let me = Watched::new(std::process::id() as i32)
            .ok_or("this process is not in /proc (fence acquire needs Linux's /proc)")?;
        sweep(&dir);
        HolderRecord::create_in(&dir, &me, store, lease, script)
    }

    /// The file `holder` writes in `dir` (which must be this user's, mode 0700). Tests use it
    /// for a holder whose pid another process has taken since.
    pub fn create_in(
        dir: &Path,
        holder: &Watched,
        store: &str,
        lease: &str,
        script: &Watched,
    ) -> Result<(HolderRecord, HolderToken), String> {
        let dir = checked_dir(dir.to_path_buf())?;
        let (pid, start) = match holder.start() {
            Some(start) => (holder.pid(), start),
            None => return Err("cannot read the holder's start time from /proc (fence acquire needs Linux's /proc)".into()),
        };
        let secret = fresh_secret().map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
        let file = HolderFile {
            v: 1,
            pid,
            start,
            secret: secret.clone(),
            boot_id: boot_id(),
            pid_ns: pid_ns(),
            store: store.to_owned(),
            lease: lease.to_owned(),
            script_pid: script.pid(),
            script_start: script.start(),
            ended: None,
        };
        let record = HolderRecord(Located {
            path: dir.join(HolderFile::name(pid, start)),
            file,
        });
        record.save()?;
        let token = HolderToken { pid, start, secret };
        Ok((record, token))
    }

    /// Records how the holder ended, for `fence release` (best effort: without it, release
    /// reports a holder that ended without saying).
    pub fn finish(mut self, ended: Ended) {
        self.0.file.ended = Some(ended.cut());
        if let Err(why) = self.save() {
            tracing::debug!(path = %self.0.path.display(), why, "holder file not updated");
        }
    }

    /// Removes the file: the script is gone, nobody will ask.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.0.path);
    }

    fn save(&self) -> Result<(), String> {
        let body = serde_json::to_vec(&self.0.file).map_err(|e| e.to_string())?;
        write_private(&self.0.path, &body)
            .map_err(|e| format!("cannot write {}: {e}", self.0.path.display()))
    }
}

/// Removes the holder files in `dir` whose holder and script have both ended (files that
/// do not parse are left alone: they may be another version's).
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("holder-") && name.ends_with(".json")) {
            continue;
        }
        let path = entry.path();
        let file = read_private(&path).and_then(|b| serde_json::from_slice::<HolderFile>(&b).ok());
        if file.is_some_and(|f| !f.holder_runs() && !f.script_runs()) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// What `fence release` found for a token: the holder's file, every field checked.
#[derive(Debug)]
pub struct Found(Located);

impl Found {
    /// The holder file `token` names in this user's private directory, if it proves that
    /// `token` is the holder of `lease` on `store`; else why not, in words.
    pub fn prove(token: &HolderToken, store: &str, lease: &str) -> Result<Found, String> {
        Found::prove_in(&private_dir()?, token, store, lease)
    }

    /// [`prove`](Self::prove) in `dir`.
    pub fn prove_in(
        dir: &Path,
        token: &HolderToken,
        store: &str,
        lease: &str,
    ) -> Result<Found, String> {
        let dir = checked_dir(dir.to_path_buf())?;
        let path = dir.join(HolderFile::name(token.pid, token.start));
        let file = read_file(&path).ok_or_else(|| {
            format!(
                "FENCE_HOLDER names no holder that fence acquire started for this user (no holder file {})",
                path.display()
            )
        })?;
        if (file.v, file.pid, file.start, &file.secret)
            != (1, token.pid, token.start, &token.secret)
        {
            return Err(format!(
                "FENCE_HOLDER does not match the holder file {} (its secret differs)",
                path.display()
            ));
        }
        if (file.store.as_str(), file.lease.as_str()) != (store, lease) {
            return Err(format!(
                "FENCE_HOLDER is the holder of lease {} on {}, not of lease {} on {}",
                crate::exit::shown(&file.lease),
                crate::exit::shown(&file.store),
                crate::exit::shown(lease),
                crate::exit::shown(store)
            ));
        }
        if file.pid_ns != pid_ns() {
            return Err("fence release runs in another PID namespace than its holder: run it where fence acquire ran".into());
        }
        Ok(Found(Located { path, file }))
    }

    /// How the holder ended, if it said.
    pub fn ended(&self) -> Option<&Ended> {
        self.0.file.ended.as_ref()
    }

    /// The holder's pid.
    pub fn pid(&self) -> i32 {
        self.0.file.pid
    }

    /// The file as it is now (the holder writes how it ended before it exits); this one if
    /// it can no longer be read or no longer names the same holder.
    #[must_use]
    pub fn reread(self) -> Found {
        match read_file(&self.0.path) {
            Some(now) if now.secret == self.0.file.secret => Found(Located {
                path: self.0.path,
                file: now,
            }),
            _ => self,
        }
    }

    /// The holder process, if it runs now (same boot, pid and start time), held by a pidfd
    /// ([`Pinned`]).
    pub fn running(&self) -> Option<Pinned> {
        if self.0.file.boot_id != boot_id() {
            return None;
        }
        Pinned::open(self.0.file.pid, Some(self.0.file.start))
    }
}

fn read_file(path: &Path) -> Option<HolderFile> {
    serde_json::from_slice(&read_private(path)?).ok()
}

/// This boot's id (`""` where the system does not say).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The PID namespace this process runs in, as `/proc/self/ns/pid` names it (`""` where the
/// system does not say): pids and start times are judged within one namespace.
fn pid_ns() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// 128 random bits from the operating system, as hex: a holder token's secret.
fn fresh_secret() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; SECRET_HEX / 2];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    fn me() -> Watched {
        Watched::new(std::process::id() as i32).unwrap()
    }

    #[test]
    fn a_token_proves_only_its_own_holder_file_and_lease() {
        let dir = private();
        let me = me();
        let (record, token) =
            HolderRecord::create_in(dir.path(), &me, "file:///s", "jobs", &me).unwrap();
        let found = Found::prove_in(dir.path(), &token, "file:///s", "jobs").unwrap();
        assert_eq!((found.pid(), found.ended()), (me.pid(), None));
        assert!(found.running().is_some(), "this process runs");
        assert!(Found::prove_in(dir.path(), &token, "file:///s", "other").is_err());
        assert!(Found::prove_in(dir.path(), &token, "file:///t", "jobs").is_err());
        let forged = HolderToken {
            secret: "0".repeat(SECRET_HEX),
            ..token.clone()
        };
        assert!(Found::prove_in(dir.path(), &forged, "file:///s", "jobs").is_err());
        let elsewhere = HolderToken {
            pid: token.pid + 1,
            ..token.clone()
        };
        assert!(Found::prove_in(dir.path(), &elsewhere, "file:///s", "jobs").is_err());
        record.finish(Ended::Lost("broken".into()));
        let found = Found::prove_in(dir.path(), &token, "file:///s", "jobs").unwrap();
        assert_eq!(found.ended(), Some(&Ended::Lost("broken".into())));
    }

    /// A store's error of any length still leaves a file `fence release` can read (an
    /// unbounded one made it refuse the whole file and report a loss).
    #[test]
    fn a_long_reason_is_cut_and_the_file_stays_readable() {
        let dir = private();
        let me = me();
        let url = format!("s3://bucket/{}", "p".repeat(900));
        let (record, token) = HolderRecord::create_in(dir.path(), &me, &url, "jobs", &me).unwrap();
        record.finish(Ended::NotReleased("é".repeat(5_000)));
        let found = Found::prove_in(dir.path(), &token, &url, "jobs").unwrap();
        let Some(Ended::NotReleased(why)) = found.ended() else {
            panic!("the ending was not read back: {:?}", found.ended());
        };
        assert_eq!(why.chars().count(), MAX_WHY_CHARS + 1);
    }

    #[test]
    fn a_holder_whose_pid_was_taken_since_is_not_running() {
        let dir = private();
        let me = me();
        // A holder that had this process's pid and started a tick before it.
        let earlier = Watched::at(me.pid(), me.start().map(|s| s - 1));
        let (_record, token) =
            HolderRecord::create_in(dir.path(), &earlier, "s", "jobs", &me).unwrap();
        let found = Found::prove_in(dir.path(), &token, "s", "jobs").unwrap();
        assert!(found.running().is_none());
    }

    #[test]
    fn files_of_ended_holders_and_scripts_are_swept_and_others_kept() {
        let dir = private();
        let me = me();
        let earlier = |ticks| Watched::at(me.pid(), me.start().map(|s| s - ticks));
        let (_, live) = HolderRecord::create_in(dir.path(), &me, "s", "a", &me).unwrap();
        // Holders that had this pid before: one whose script (this process) runs on, one
        // whose script is gone too.
        let (_, asked) = HolderRecord::create_in(dir.path(), &earlier(1), "s", "b", &me).unwrap();
        let (_, gone) =
            HolderRecord::create_in(dir.path(), &earlier(2), "s", "c", &earlier(3)).unwrap();
        sweep(dir.path());
        let exists = |t: &HolderToken| dir.path().join(HolderFile::name(t.pid, t.start)).exists();
        assert!(exists(&live) && exists(&asked));
        assert!(!exists(&gone));
    }
}
