//! Store-level scenarios: the [`ConditionalStore`] contract, one property per function.
//!
//! Each takes the store and the keys it may use (capability differences as parameters) and
//! returns `Err(reason)` when the store breaks the contract or fails.

use std::sync::Arc;

use bytes::Bytes;
use fence_core::{
    CasGuard, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, PutOutcome, Stored, Version,
};
use tokio::sync::Barrier;

/// `Err` with the store error, naming the step.
pub(crate) fn failed(step: &str, e: &Error) -> String {
    format!("{step}: {e}")
}

/// Writes `body` at `key` under `guard`; `Err` unless it is applied.
pub(crate) async fn applied(
    store: &dyn ConditionalStore,
    step: &str,
    key: &Key,
    body: impl Into<Bytes>,
    guard: CasGuard,
) -> Result<Version, String> {
    match store.put(key, body.into(), guard).await {
        Ok(PutOutcome::Applied(v)) => Ok(v),
        Ok(PutOutcome::Rejected) => Err(format!("{step}: rejected, expected applied")),
        Err(e) => Err(failed(step, &e)),
    }
}

/// Writes `body` at `key` under `guard`; `Err` unless it is rejected.
pub(crate) async fn rejected(
    store: &dyn ConditionalStore,
    step: &str,
    key: &Key,
    body: impl Into<Bytes>,
    guard: CasGuard,
) -> Result<(), String> {
    match store.put(key, body.into(), guard).await {
        Ok(PutOutcome::Rejected) => Ok(()),
        Ok(PutOutcome::Applied(_)) => Err(format!("{step}: applied, expected rejected")),
        Err(e) => Err(failed(step, &e)),
    }
}

/// Reads `key`.
pub(crate) async fn read(
    store: &dyn ConditionalStore,
    step: &str,
    key: &Key,
) -> Result<Option<Stored>, String> {
    store.get(key).await.map_err(|e| failed(step, &e))
}

/// Reads `key` and checks it holds exactly `body` at `version`.
async fn expect_stored(
    store: &dyn ConditionalStore,
    step: &str,
    key: &Key,
    body: &[u8],
    version: &Version,
) -> Result<(), String> {
    match read(store, step, key).await? {
        Some(s) if s.body == body && &s.version == version => Ok(()),
        Some(s) if s.body == body => Err(format!(
            "{step}: right body, but version {} instead of {version}",
            s.version
        )),
        Some(s) => Err(format!("{step}: unexpected body ({} bytes)", s.body.len())),
        None => Err(format!("{step}: the object is missing")),
    }
}

/// Create-if-absent applies once; a second create is rejected and changes nothing.
pub async fn create_twice(store: &dyn ConditionalStore, key: &Key) -> Result<(), String> {
    let v1 = applied(store, "first create", key, "first", CasGuard::Absent).await?;
    rejected(store, "second create", key, "second", CasGuard::Absent).await?;
    expect_stored(store, "read after second create", key, b"first", &v1).await
}

/// An update guarded by the current version applies, yields a new version, and is read back.
pub async fn update_current(store: &dyn ConditionalStore, key: &Key) -> Result<(), String> {
    let v1 = applied(store, "create", key, "one", CasGuard::Absent).await?;
    let v2 = applied(store, "update", key, "two", CasGuard::Match(v1.clone())).await?;
    if v2 == v1 {
        return Err(format!("update answered the replaced version {v1}"));
    }
    expect_stored(store, "read after update", key, b"two", &v2).await
}

/// An update guarded by a superseded version is rejected and changes nothing.
pub async fn update_stale(store: &dyn ConditionalStore, key: &Key) -> Result<(), String> {
    let v1 = applied(store, "create", key, "one", CasGuard::Absent).await?;
    let v2 = applied(store, "update", key, "two", CasGuard::Match(v1.clone())).await?;
    rejected(store, "stale update", key, "stale", CasGuard::Match(v1)).await?;
    expect_stored(store, "read after stale update", key, b"two", &v2).await
}

/// An update of a missing key is rejected, even with a real version of another object, and
/// creates nothing. `witness` is a free key to take that version from.
pub async fn update_missing(
    store: &dyn ConditionalStore,
    key: &Key,
    witness: &Key,
) -> Result<(), String> {
    let v = applied(
        store,
        "create witness",
        witness,
        "witness",
        CasGuard::Absent,
    )
    .await?;
    rejected(
        store,
        "update of a missing key",
        key,
        "ghost",
        CasGuard::Match(v),
    )
    .await?;
    match read(store, "read missing key", key).await? {
        None => Ok(()),
        Some(_) => Err("a rejected update of a missing key created it".into()),
    }
}

/// Rewriting identical bytes yields a new version, and the old version no longer matches
/// (no ABA through content-hash versions) — unless the store declares
/// [`Capabilities::content_versions`](fence_core::Capabilities), when a repeated version is
/// allowed (fence keeps every body it writes unique instead).
pub async fn identical_rewrite(
    store: &dyn ConditionalStore,
    key: &Key,
    content_versions: bool,
) -> Result<(), String> {
    let v1 = applied(store, "create", key, "same bytes", CasGuard::Absent).await?;
    let v2 = applied(
        store,
        "rewrite",
        key,
        "same bytes",
        CasGuard::Match(v1.clone()),
    )
    .await?;
    if v2 == v1 && content_versions {
        return expect_stored(store, "read after rewrite", key, b"same bytes", &v1).await;
    }
    if v2 == v1 {
        return Err(format!(
            "rewriting identical bytes kept version {v1}: versions repeat (ABA), and the store \
             does not declare Capabilities::content_versions"
        ));
    }
    rejected(
        store,
        "write with the pre-rewrite version",
        key,
        "x",
        CasGuard::Match(v1),
    )
    .await
}

/// The answers of one race.
struct Race {
    winners: Vec<usize>,
    not_committed: usize,
    ambiguous: Vec<usize>,
}

/// `bodies.len()` racers released together by a barrier, each writing its body under `guard`.
async fn race(
    store: &Arc<dyn ConditionalStore>,
    key: &Key,
    guard: &CasGuard,
    bodies: &[Bytes],
) -> Result<Race, String> {
    let barrier = Arc::new(Barrier::new(bodies.len()));
    let tasks: Vec<_> = bodies
        .iter()
        .map(|body| {
            let (store, key, guard) = (store.clone(), key.clone(), guard.clone());
            let (barrier, body) = (barrier.clone(), body.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.put(&key, body, guard).await
            })
        })
        .collect();
    let mut race = Race {
        winners: Vec::new(),
        not_committed: 0,
        ambiguous: Vec::new(),
    };
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.map_err(|e| format!("racer {i} panicked: {e}"))? {
            Ok(PutOutcome::Applied(_)) => race.winners.push(i),
            Ok(PutOutcome::Rejected) => {}
            Err(e) if e.is_ambiguous() => race.ambiguous.push(i),
            Err(_) => race.not_committed += 1,
        }
    }
    Ok(race)
}

/// Judges one race round: at most one winner, and the stored body is the winner's (or, with
/// no winner, one whose answer was ambiguous).
async fn judge(
    store: &dyn ConditionalStore,
    key: &Key,
    bodies: &[Bytes],
    race: &Race,
    round: &str,
) -> Result<(), String> {
    if race.winners.len() > 1 {
        return Err(format!(
            "{round}: {} of {} racers won (exactly one may)",
            race.winners.len(),
            bodies.len()
        ));
    }
    let stored = read(store, &format!("{round} read-back"), key).await?;
    let stored_body = stored.map(|s| s.body);
    let allowed: Vec<usize> = match race.winners.first() {
        Some(&w) => vec![w],
        None => race.ambiguous.clone(),
    };
    let landed = allowed
        .iter()
        .any(|&i| stored_body.as_ref() == Some(&bodies[i]));
    if !landed && race.winners.is_empty() {
        return Err(format!(
            "{round}: no racer won ({} not committed, {} ambiguous, the rest rejected)",
            race.not_committed,
            race.ambiguous.len()
        ));
    }
    if !landed {
        return Err(format!("{round}: the stored body is not the winner's"));
    }
    Ok(())
}

fn racer_bodies(racers: usize, round: usize, what: &str) -> Vec<Bytes> {
    (0..racers)
        .map(|i| Bytes::from(format!("{what} racer {i} round {round}")))
        .collect()
}

/// `racers` concurrent create-if-absent writes on a fresh key per round, `rounds` times:
/// exactly one winner each round, and it is the one stored.
pub async fn create_race(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    racers: usize,
    rounds: usize,
) -> Result<(), String> {
    for round in 0..rounds {
        let key = prefix
            .join(&format!("create-{round}"))
            .map_err(|e| e.to_string())?;
        let bodies = racer_bodies(racers, round, "create");
        let result = race(&store, &key, &CasGuard::Absent, &bodies).await?;
        judge(&*store, &key, &bodies, &result, &format!("round {round}")).await?;
    }
    Ok(())
}

/// `racers` concurrent updates from one shared version, `rounds` times: exactly one winner.
pub async fn update_race(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    racers: usize,
    rounds: usize,
) -> Result<(), String> {
    for round in 0..rounds {
        let key = prefix
            .join(&format!("update-{round}"))
            .map_err(|e| e.to_string())?;
        let v0 = applied(&*store, "create base", &key, "base", CasGuard::Absent).await?;
        let bodies = racer_bodies(racers, round, "update");
        let result = race(&store, &key, &CasGuard::Match(v0), &bodies).await?;
        judge(&*store, &key, &bodies, &result, &format!("round {round}")).await?;
    }
    Ok(())
}

fn counter_body(n: u64) -> Bytes {
    Bytes::from(format!("count={n}"))
}

fn parse_counter(body: &[u8]) -> Option<u64> {
    std::str::from_utf8(body)
        .ok()?
        .strip_prefix("count=")?
        .parse()
        .ok()
}

/// One worker's increments: read, write `n + 1` guarded by the read version, retry on
/// `Rejected` or a retryable error ([`Error::is_retryable`]); any other error ends the
/// worker. Returns the attempts made.
async fn increment(store: &dyn ConditionalStore, key: &Key, times: usize) -> Result<u64, String> {
    let mut attempts = 0;
    for _ in 0..times {
        loop {
            attempts += 1;
            if attempts > 100_000 {
                return Err("no progress after 100000 attempts".into());
            }
            let stored = read(store, "counter read", key)
                .await?
                .ok_or("counter vanished")?;
            let n = parse_counter(&stored.body).ok_or("counter body unreadable")?;
            // Let the other workers interleave between read and write, even on a store whose
            // operations never suspend.
            tokio::task::yield_now().await;
            match store
                .put(key, counter_body(n + 1), CasGuard::Match(stored.version))
                .await
            {
                Ok(PutOutcome::Applied(_)) => break,
                Ok(PutOutcome::Rejected) => continue,
                Err(e) if e.is_retryable() => continue,
                Err(e) if e.is_ambiguous() => {
                    return Err(failed("counter write (cannot count exactly)", &e))
                }
                Err(e) => return Err(failed("counter write (not retryable)", &e)),
            }
        }
    }
    Ok(attempts)
}

/// `workers` × `increments` compare-and-swap increments of one counter: the final value is
/// exactly their product. Returns the write attempts made (retries included).
pub async fn counter(
    store: Arc<dyn ConditionalStore>,
    key: &Key,
    workers: usize,
    increments: usize,
) -> Result<u64, String> {
    applied(
        &*store,
        "create counter",
        key,
        counter_body(0),
        CasGuard::Absent,
    )
    .await?;
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move { increment(&*store, &key, increments).await })
        })
        .collect();
    let mut attempts = 0;
    for task in tasks {
        attempts += task.await.map_err(|e| format!("worker panicked: {e}"))??;
    }
    let stored = read(&*store, "final read", key)
        .await?
        .ok_or("counter vanished")?;
    let total = parse_counter(&stored.body).ok_or("counter body unreadable")?;
    let want = (workers * increments) as u64;
    if total != want {
        return Err(format!(
            "counter is {total}, expected {workers} × {increments} = {want}"
        ));
    }
    Ok(attempts)
}

/// With conditional delete: a stale version does not delete, the current one does, a second
/// delete is rejected, and a re-created object gets a version different from all earlier ones.
/// Without: `delete` answers [`ErrorKind::Unsupported`] and the object stays.
pub async fn delete_semantics(
    store: &dyn ConditionalStore,
    key: &Key,
    conditional_delete: bool,
) -> Result<(), String> {
    let v1 = applied(store, "create", key, "one", CasGuard::Absent).await?;
    if !conditional_delete {
        return delete_unsupported(store, key, &v1).await;
    }
    let v2 = applied(store, "update", key, "two", CasGuard::Match(v1.clone())).await?;
    expect_delete(
        store,
        "delete with a stale version",
        key,
        &v1,
        DeleteOutcome::Rejected,
    )
    .await?;
    expect_stored(store, "read after stale delete", key, b"two", &v2).await?;
    expect_delete(
        store,
        "delete with the current version",
        key,
        &v2,
        DeleteOutcome::Deleted,
    )
    .await?;
    if read(store, "read after delete", key).await?.is_some() {
        return Err("the object is still there after a delete".into());
    }
    expect_delete(store, "second delete", key, &v2, DeleteOutcome::Rejected).await?;
    rejected(
        store,
        "update of the deleted object",
        key,
        "x",
        CasGuard::Match(v2.clone()),
    )
    .await?;
    let v3 = applied(store, "re-create", key, "one", CasGuard::Absent).await?;
    if v3 == v1 || v3 == v2 {
        return Err(format!("the re-created object reuses version {v3} (ABA)"));
    }
    Ok(())
}

async fn expect_delete(
    store: &dyn ConditionalStore,
    step: &str,
    key: &Key,
    version: &Version,
    want: DeleteOutcome,
) -> Result<(), String> {
    match store.delete(key, version).await {
        Ok(got) if got == want => Ok(()),
        Ok(got) => Err(format!("{step}: {got:?}, expected {want:?}")),
        Err(e) => Err(failed(step, &e)),
    }
}

async fn delete_unsupported(
    store: &dyn ConditionalStore,
    key: &Key,
    v1: &Version,
) -> Result<(), String> {
    match store.delete(key, v1).await {
        Err(e) if e.kind() == ErrorKind::Unsupported => {}
        Err(e) => return Err(failed("delete (expected Unsupported)", &e)),
        Ok(got) => {
            return Err(format!(
                "delete answered {got:?} though the store declares no conditional delete"
            ))
        }
    }
    expect_stored(store, "read after refused delete", key, b"one", v1).await
}

fn keys(prefix: &Key, rels: &[&str]) -> Result<Vec<Key>, String> {
    rels.iter()
        .map(|r| prefix.join(r).map_err(|e| e.to_string()))
        .collect()
}

async fn expect_list(
    store: &dyn ConditionalStore,
    prefix: &Key,
    want: Vec<Key>,
) -> Result<(), String> {
    let got = store
        .list(Some(prefix))
        .await
        .map_err(|e| failed(&format!("list {prefix}"), &e))?;
    if got != want {
        return Err(format!(
            "list {prefix}: got {got:?}, expected {want:?} (sorted)"
        ));
    }
    Ok(())
}

/// `list` returns exactly the keys equal to or under a prefix, sorted, and prefixes are
/// segment-wise: `a/b` lists the key `a/b` itself and `a/b/x`, not `a/bc/x`.
pub async fn list_prefix(store: &dyn ConditionalStore, prefix: &Key) -> Result<(), String> {
    let all = keys(prefix, &["a/b", "a/b/y", "a/bc/x", "a/b/x", "a/c", "z"])?;
    for key in &all {
        applied(store, "create", key, "x", CasGuard::Absent).await?;
    }
    let cases: [(&str, &[&str]); 5] = [
        ("a/b", &["a/b", "a/b/x", "a/b/y"]),
        ("a", &["a/b", "a/b/x", "a/b/y", "a/bc/x", "a/c"]),
        ("z", &["z"]),
        ("a/c/none", &[]),
        ("none", &[]),
    ];
    for (rel, want) in cases {
        let mut want = keys(prefix, want)?;
        want.sort();
        let at = prefix.join(rel).map_err(|e| e.to_string())?;
        expect_list(store, &at, want).await?;
    }
    let mut everything = all;
    everything.sort();
    expect_list(store, prefix, everything).await
}

/// `list(None)` returns every key of the store, sorted: ours among them.
pub async fn list_all(store: &dyn ConditionalStore, prefix: &Key) -> Result<usize, String> {
    let ours = keys(prefix, &["x", "y/z"])?;
    for key in &ours {
        applied(store, "create", key, "x", CasGuard::Absent).await?;
    }
    let listed = store
        .list(None)
        .await
        .map_err(|e| failed("list everything", &e))?;
    if let Some(missing) = ours.iter().find(|k| !listed.contains(k)) {
        return Err(format!(
            "list(None) of {} keys lacks {missing}",
            listed.len()
        ));
    }
    if !listed.is_sorted() {
        return Err(format!("list(None) of {} keys is not sorted", listed.len()));
    }
    Ok(listed.len())
}

/// A body of `len` bytes that is not all one value.
fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 31 % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

async fn round_trip(
    store: &dyn ConditionalStore,
    what: &str,
    key: &Key,
    body: Bytes,
) -> Result<(), String> {
    let v = applied(store, what, key, body.clone(), CasGuard::Absent).await?;
    expect_stored(store, &format!("read {what}"), key, &body, &v).await
}

/// Empty, large (`large_bytes`) and binary bodies and a unicode key round-trip exactly.
pub async fn bodies(
    store: &dyn ConditionalStore,
    prefix: &Key,
    large_bytes: usize,
) -> Result<(), String> {
    let key = |rel: &str| prefix.join(rel).map_err(|e| e.to_string());
    round_trip(store, "empty body", &key("empty")?, Bytes::new()).await?;
    let binary = Bytes::from_static(b"\0\xff\n\r\x7f{\"v\":1}\0");
    round_trip(store, "binary body", &key("binary")?, binary).await?;
    round_trip(store, "large body", &key("large")?, pattern(large_bytes)).await?;
    let unicode = key("ünïcödé/ключ/鍵 €.json")?;
    round_trip(store, "unicode key", &unicode, Bytes::from("ß→✓")).await?;
    let listed = store
        .list(Some(&key("ünïcödé")?))
        .await
        .map_err(|e| failed("list unicode prefix", &e))?;
    if listed != vec![unicode] {
        return Err(format!("list of a unicode prefix: {listed:?}"));
    }
    Ok(())
}

/// Invalid keys are refused with [`ErrorKind::InvalidKey`] before any I/O.
pub fn invalid_keys() -> Result<(), String> {
    let long = "k".repeat(fence_core::MAX_KEY_LEN + 1);
    let bad = [
        "", "/abs", "a/../b", "..", "a/./b", "a//b", "a/", "a\0b", "a\\b", &long,
    ];
    for key in bad {
        match Key::new(key) {
            Err(e) if e.kind() == ErrorKind::InvalidKey => {}
            Err(e) => {
                return Err(format!(
                    "{key:?}: refused with {:?}, not InvalidKey",
                    e.kind()
                ))
            }
            Ok(_) => return Err(format!("{key:?} was accepted as a key")),
        }
    }
    let base = Key::new("a").map_err(|e| e.to_string())?;
    if base.join("../b").is_ok() {
        return Err("Key::join accepted '../b'".into());
    }
    Ok(())
}
