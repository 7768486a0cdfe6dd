//! First sightings of lease records, kept on this host between runs of `fence`.
//!
//! A takeover needs the holder's lease record seen unchanged for a whole TTL on the taker's
//! own clock (docs/design.md, "The observation rule"). A `fence run` without `--wait` — a
//! cron job — never stays that long, so each run would start watching afresh and none would
//! ever take over a dead holder. Instead, a run that finds the lease busy leaves what it saw
//! — the record's version and nonce, and when a read first returned it, on the host's boot
//! clock ([`fence_core::HostInstant`]) — in a file, and the next run on this host continues
//! that watch ([`fence_core::runtime::Observer::import`]): its own confirming read, sent a
//! whole TTL after the first sighting, takes over a record that did not change.
//!
//! The files live in a directory only this user can write: `$XDG_RUNTIME_DIR/fence`, else
//! `/run/user/<uid>/fence`, else `<temp dir>/fence-<uid>` (made with mode 0700). A directory
//! or file that is not this user's, is open to others, is a symlink, is too large or does
//! not parse is ignored — a file can only ever make a takeover *later*, never earlier: it is
//! used only for the exact record state it names, its first sighting is placed on this
//! process's clock never earlier than it was, and a sighting of another boot or from the
//! future is dropped. One file per store and lease node, named by a hash of both; the store
//! is named by its URL and the endpoint variables that choose the server behind it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use fence_core::runtime::observer::{HostSighting, SightedState};
use fence_core::{Fence, HostInstant, Version};
use serde::{Deserialize, Serialize};

/// The largest sighting file read.
const MAX_FILE_BYTES: u64 = 4096;

/// Where this host keeps first sightings of one store's leases.
#[derive(Debug, Clone)]
pub struct Sightings {
    /// The directory, or why there is none.
    dir: Result<PathBuf, String>,
    /// The store's identity: its URL and endpoint variables.
    store: String,
}

/// One sighting file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SightingFile {
    v: u32,
    store: String,
    node: String,
    boot_id: String,
    first_seen_boot_ms: u64,
    state: Option<StateFile>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    version: String,
    nonce: String,
}

impl Sightings {
    /// The sightings of the store at `url` (a canonical URL, as [`crate::stores::open`]
    /// gives it). `memory://` keeps none: nothing outlives the process there.
    pub fn open(url: &str) -> Sightings {
        let dir = if url.starts_with("memory://") {
            Err("memory:// is one process's store".to_owned())
        } else {
            private_dir()
        };
        Sightings {
            dir,
            store: store_identity(url),
        }
    }

    /// Sightings kept in `dir` (which must be this user's, mode 0700), for tests.
    pub fn in_dir(dir: &Path, url: &str) -> Sightings {
        Sightings {
            dir: checked_dir(dir.to_path_buf()),
            store: store_identity(url),
        }
    }

    /// Why no sighting can be kept on this host, if none can.
    pub fn unavailable(&self) -> Option<&str> {
        self.dir.as_ref().err().map(String::as_str)
    }

    /// Hands `fence` the first sighting of `node`'s lease an earlier run left; whether one
    /// was taken (see [`fence_core::runtime::Observer::import`]).
    pub fn load_into(&self, fence: &Fence, node: &str) -> bool {
        match self.load(node) {
            Some(sighting) => fence.observer().import(fence.clock(), node, &sighting),
            None => false,
        }
    }

    /// Leaves what `fence` saw of `node`'s lease for the next run on this host (best
    /// effort: a failure only means the next run starts watching afresh).
    pub fn save_from(&self, fence: &Fence, node: &str) {
        let Some(sighting) = fence.observer().export(fence.clock(), node) else {
            return;
        };
        let file = SightingFile {
            v: 1,
            store: self.store.clone(),
            node: node.to_owned(),
            boot_id: sighting.first_seen.boot_id,
            first_seen_boot_ms: sighting.first_seen.boot_ms,
            state: sighting.state.map(|s| StateFile {
                version: s.version.as_str().to_owned(),
                nonce: s.nonce,
            }),
        };
        if let (Ok(path), Ok(body)) = (self.path(node), serde_json::to_vec(&file)) {
            if let Err(e) = write_private(&path, &body) {
                tracing::debug!(path = %path.display(), error = %e, "sighting not kept");
            }
        }
    }

    /// Forgets `node`'s sighting (the lease was taken: it is stale).
    pub fn forget(&self, node: &str) {
        if let Ok(path) = self.path(node) {
            let _ = std::fs::remove_file(path);
        }
    }

    fn path(&self, node: &str) -> Result<PathBuf, ()> {
        let dir = self.dir.as_ref().map_err(|_| ())?;
        let name = format!("{:016x}.json", fnv1a(&format!("{}\n{node}", self.store)));
        Ok(dir.join(name))
    }

    /// The sighting of `node`, if a sound file of this store, node and boot holds one.
    fn load(&self, node: &str) -> Option<HostSighting> {
        let body = read_private(&self.path(node).ok()?)?;
        let file: SightingFile = serde_json::from_slice(&body).ok()?;
        if file.v != 1 || file.store != self.store || file.node != node {
            return None;
        }
        let state = match file.state {
            Some(s) => Some(SightedState {
                version: Version::new(s.version).ok()?,
                nonce: s.nonce,
            }),
            None => None,
        };
        Some(HostSighting {
            state,
            first_seen: HostInstant {
                boot_id: file.boot_id,
                boot_ms: file.first_seen_boot_ms,
            },
        })
    }
}

/// The store `url` and the variables that choose which server answers for it.
fn store_identity(url: &str) -> String {
    const ENDPOINTS: [&str; 7] = [
        "AWS_ENDPOINT",
        "AWS_ENDPOINT_URL",
        "FENCE_GCS_ENDPOINT",
        "STORAGE_EMULATOR_HOST",
        "AZURITE_BLOB_STORAGE_URL",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_USE_EMULATOR",
    ];
    let mut id = url.to_owned();
    for var in ENDPOINTS {
        if let Ok(value) = std::env::var(var) {
            id.push_str(&format!("\n{var}={value}"));
        }
    }
    id
}

/// FNV-1a, 64 bits: a file name per store and node that stays the same across builds (the
/// file itself names both, so a collision is only a missed sighting).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// This user's private directory for what `fence` keeps on this host between runs
/// (sightings, [`crate::holder`] files), made if missing.
pub(crate) fn private_dir() -> Result<PathBuf, String> {
    let uid = nix::unistd::geteuid().as_raw();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d.is_dir())
        .or_else(|| Some(PathBuf::from(format!("/run/user/{uid}"))).filter(|d| d.is_dir()));
    let dir = match runtime {
        Some(base) => base.join("fence"),
        None => std::env::temp_dir().join(format!("fence-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    checked_dir(dir)
}

/// `dir` if it is a real directory of this user that nobody else can write.
pub(crate) fn checked_dir(dir: PathBuf) -> Result<PathBuf, String> {
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let uid = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory of uid {uid} that only it can write",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The bytes of `path` if it is a regular file of this user, not a symlink, not writable by
/// others, and small.
pub(crate) fn read_private(path: &Path) -> Option<Vec<u8>> {
    let mut file = File::options()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let mine = meta.uid() == nix::unistd::geteuid().as_raw();
    if !meta.is_file() || !mine || meta.mode() & 0o022 != 0 || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut body = Vec::new();
    Read::by_ref(&mut file)
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut body)
        .ok()?;
    (body.len() as u64 <= MAX_FILE_BYTES).then_some(body)
}

/// Writes `body` to `path` atomically (a new file of mode 0600, renamed over it).
pub(crate) fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&tmp)
        .and_then(|mut f| f.write_all(body).and_then(|()| f.sync_data()));
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_identity_names_the_endpoint_and_file_names_are_stable() {
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert!(store_identity("s3://b/p").starts_with("s3://b/p"));
    }
}
