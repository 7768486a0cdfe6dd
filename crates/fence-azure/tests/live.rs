//! fence-azure against a live Azurite 3.35.0 started by `scripts/servers/azure.sh`. Its
//! address comes from the environment (`$FENCE_SERVERS_DIR/azure.env`); without it every test
//! skips with a notice, or fails when `FENCE_REQUIRE_SERVERS=1`. Each test writes under a
//! fresh random prefix.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use bytes::Bytes;
use common::assert_no_text;
use fence_azure::AzureStore;
use fence_core::{
    CasGuard, Commit, ConditionalStore, DeleteOutcome, Entropy, ErrorKind, Key, PutOutcome, Version,
};
use fence_testkit::scenarios::runtime::SERVER_TTL;
use fence_testkit::{probe, run_all, ProbeConfig, SuiteConfig, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Azurite's coordinates, as written by `scripts/servers/azure.sh`.
struct Azurite {
    endpoint: String,
    container: String,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The server, or `None` (with a notice) when the environment does not name it.
fn azurite(test: &str) -> Option<Azurite> {
    let found = (|| {
        Some(Azurite {
            endpoint: var("FENCE_AZURE_ENDPOINT")?,
            container: var("FENCE_AZURE_CONTAINER")?,
        })
    })();
    if found.is_none() {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "{test}: FENCE_AZURE_* variables missing but FENCE_REQUIRE_SERVERS=1 \
             (run `bash scripts/servers/azure.sh start` and source $FENCE_SERVERS_DIR/azure.env)"
        );
        eprintln!("SKIPPED {test}: no Azurite (run scripts/servers/azure.sh start)");
    }
    found
}

impl Azurite {
    fn builder(&self, endpoint: &str, container: &str) -> fence_azure::AzureStoreBuilder {
        AzureStore::builder()
            .with_emulator(endpoint)
            .with_container(container)
            // Generous: the tests run in parallel on 2 shared cores; the CAS timeout is ttl / 3.
            .with_lease_ttl(Duration::from_secs(30))
    }

    /// A store under a fresh prefix, on the development account.
    fn store(&self, prefix: &str) -> AzureStore {
        self.store_at(&self.endpoint, prefix)
    }

    fn store_at(&self, endpoint: &str, prefix: &str) -> AzureStore {
        self.builder(endpoint, &self.container)
            .with_prefix(prefix)
            .build()
            .expect("valid configuration")
    }
}

fn fresh_prefix(test: &str) -> String {
    format!(
        "fence-azure-tests/{test}-{:016x}",
        Entropy::from_os().next_u64()
    )
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

async fn applied(store: &AzureStore, k: &Key, body: &str, guard: CasGuard) -> Version {
    match store.put(k, Bytes::from(body.to_string()), guard).await {
        Ok(PutOutcome::Applied(v)) => v,
        other => panic!("{k}: expected Applied, got {other:?}"),
    }
}

async fn rejected(store: &AzureStore, k: &Key, body: &str, guard: CasGuard) {
    let got = store.put(k, Bytes::from(body.to_string()), guard).await;
    assert!(
        matches!(got, Ok(PutOutcome::Rejected)),
        "{k}: expected Rejected, got {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_on_azurite() {
    let Some(a) = azurite("conditional_writes_on_azurite") else {
        return;
    };
    let store = a.store(&fresh_prefix("cas"));
    let k = key("cells/c1/own.json");
    let v1 = applied(&store, &k, "one", CasGuard::Absent).await;
    rejected(&store, &k, "two", CasGuard::Absent).await;
    let got = store.get(&k).await.unwrap().expect("present");
    assert_eq!((got.body.as_ref(), &got.version), (&b"one"[..], &v1));
    let v2 = applied(&store, &k, "two", CasGuard::Match(v1.clone())).await;
    assert_ne!(v1, v2);
    rejected(&store, &k, "stale", CasGuard::Match(v1.clone())).await;
    // If-Match on a missing blob: 412 on Azurite and on Azure.
    rejected(&store, &key("missing"), "x", CasGuard::Match(v2.clone())).await;
    assert_eq!(store.get(&key("missing")).await.unwrap(), None);
    assert_eq!(store.get(&k).await.unwrap().unwrap().body.as_ref(), b"two");
    println!("azurite: ETag after create {v1}, after update {v2}");
}

/// A TCP proxy in front of `upstream` that records the status line of every answer.
async fn status_recording_proxy(upstream: SocketAddr) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let seen = statuses.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(relay_recording(client, upstream, seen.clone()));
        }
    });
    (format!("http://{addr}"), statuses)
}

async fn relay_recording(client: TcpStream, upstream: SocketAddr, seen: Arc<Mutex<Vec<String>>>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    tokio::spawn(async move { tokio::io::copy(&mut from_client, &mut to_server).await });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from_server.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        if chunk.starts_with(b"HTTP/1.1 ") {
            let line = String::from_utf8_lossy(&chunk[9..12]).into_owned();
            seen.lock().unwrap().push(line);
        }
        if to_client.write_all(chunk).await.is_err() {
            break;
        }
    }
}

fn socket_of(endpoint: &str) -> SocketAddr {
    endpoint.trim_start_matches("http://").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_create_answered_409_is_rejected_never_an_error() {
    let Some(a) = azurite("a_failed_create_answered_409_is_rejected_never_an_error") else {
        return;
    };
    let (proxy, statuses) = status_recording_proxy(socket_of(&a.endpoint)).await;
    let store = a.store_at(&proxy, &fresh_prefix("create-409"));
    let k = key("nodes/n1.json");
    applied(&store, &k, "first", CasGuard::Absent).await;
    statuses.lock().unwrap().clear();
    rejected(&store, &k, "second", CasGuard::Absent).await;
    assert_eq!(
        *statuses.lock().unwrap(),
        ["409"],
        "Azurite answers a failed create with 409 (BlobAlreadyExists)"
    );
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().body.as_ref(),
        b"first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_bytes_get_distinct_etags() {
    let Some(a) = azurite("identical_bytes_get_distinct_etags") else {
        return;
    };
    let store = a.store(&fresh_prefix("same"));
    assert!(!store.capabilities().content_versions);
    let k = key("same");
    let v1 = applied(&store, &k, "same bytes", CasGuard::Absent).await;
    let v2 = applied(&store, &k, "same bytes", CasGuard::Match(v1.clone())).await;
    assert_ne!(
        v1, v2,
        "Azure ETags change on every write, also of identical bytes"
    );
    rejected(&store, &k, "same bytes", CasGuard::Match(v1)).await;
    // Bodies are stored exactly as given: no trailer.
    let raw = raw_body(&a, &store, &k).await;
    assert_eq!(raw, Bytes::from_static(b"same bytes"));
}

/// A client of the container that is not fence: plain object_store on the development account.
fn raw_client(a: &Azurite) -> object_store::azure::MicrosoftAzure {
    object_store::azure::MicrosoftAzureBuilder::new()
        .with_account(fence_azure::EMULATOR_ACCOUNT)
        .with_access_key(
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
        )
        .with_endpoint(format!("{}/{}", a.endpoint, fence_azure::EMULATOR_ACCOUNT))
        .with_allow_http(true)
        .with_container_name(&a.container)
        .build()
        .unwrap()
}

/// The blob's bytes read by plain object_store.
async fn raw_body(a: &Azurite, store: &AzureStore, k: &Key) -> Bytes {
    use object_store::{path::Path, ObjectStoreExt};
    let path = Path::parse(format!("{}/{k}", store.prefix())).unwrap();
    let raw = raw_client(a);
    raw.get(&path).await.unwrap().bytes().await.unwrap()
}

/// Blob names are the fence key's UTF-8 characters, both ways (issue 18 item 6, on Azure):
/// `ñ` is stored as `ñ`, not as object_store's escaped `%C3%B1`, and a foreign blob named
/// `p%41` lists and reads as the key `p%41`, not `pA`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blob_names_are_utf8_to_other_clients() {
    use object_store::{path::Path, ObjectStore, ObjectStoreExt};
    let Some(a) = azurite("blob_names_are_utf8_to_other_clients") else {
        return;
    };
    let prefix = fresh_prefix("utf8");
    let store = a.store(&prefix);
    applied(&store, &key("uni/ñ ü/日本.json"), "u", CasGuard::Absent).await;
    let raw = raw_client(&a);
    let foreign = Path::parse(format!("{prefix}/p%41")).unwrap();
    raw.put(&foreign, "foreign".into()).await.unwrap();
    let under = Path::parse(&prefix).unwrap();
    let mut names: Vec<String> =
        futures::TryStreamExt::try_collect::<Vec<_>>(raw.list(Some(&under)))
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.location.to_string())
            .collect();
    names.sort();
    assert_eq!(
        names,
        [
            format!("{prefix}/p%41"),
            format!("{prefix}/uni/ñ ü/日本.json")
        ]
    );
    let keys = store.list(None).await.unwrap();
    assert_eq!(keys, [key("p%41"), key("uni/ñ ü/日本.json")]);
    let got = store.get(&key("p%41")).await.unwrap().unwrap();
    assert_eq!(got.body, Bytes::from("foreign"));
}

/// A key stored by earlier fence-azure under its escaped name is not read as absent (a claim
/// would restart its epochs): the read fails and names the blob to rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_under_its_old_escaped_name_is_not_read_as_absent() {
    use object_store::{path::Path, ObjectStoreExt};
    let Some(a) = azurite("a_key_under_its_old_escaped_name_is_not_read_as_absent") else {
        return;
    };
    let prefix = fresh_prefix("escaped");
    let old_name = Path::parse(format!("{prefix}/cells/%C3%B1/own.json")).unwrap();
    raw_client(&a)
        .put(&old_name, "{\"epoch\":9}".into())
        .await
        .unwrap();
    let store = a.store(&prefix);
    let err = store.get(&key("cells/ñ/own.json")).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted),
        "{err:?}"
    );
    assert_eq!(store.get(&key("cells/plain/own.json")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azurite_honours_conditional_delete() {
    let Some(a) = azurite("azurite_honours_conditional_delete") else {
        return;
    };
    let store = a.store(&fresh_prefix("delete"));
    assert!(store.capabilities().conditional_delete);
    let k = key("cells/c1/own.json");
    let v1 = applied(&store, &k, "one", CasGuard::Absent).await;
    let v2 = applied(&store, &k, "two", CasGuard::Match(v1.clone())).await;
    // A stale version deletes nothing.
    assert_eq!(
        store.delete(&k, &v1).await.unwrap(),
        DeleteOutcome::Rejected
    );
    assert_eq!(store.get(&k).await.unwrap().unwrap().version, v2);
    assert_eq!(store.delete(&k, &v2).await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(store.get(&k).await.unwrap(), None);
    // Absent: nothing to delete.
    assert_eq!(
        store.delete(&k, &v2).await.unwrap(),
        DeleteOutcome::Rejected
    );
    // Re-created after the delete: a new ETag, and the old one matches nothing.
    let v3 = applied(&store, &k, "one", CasGuard::Absent).await;
    assert!(v3 != v1 && v3 != v2);
    rejected(&store, &k, "x", CasGuard::Match(v2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_immutable_is_one_unconditional_delete() {
    let Some(a) = azurite("delete_immutable_is_one_unconditional_delete") else {
        return;
    };
    let store = a.store(&fresh_prefix("immutable"));
    let k = key("data/c1/epoch-7/seg-1");
    applied(&store, &k, "written once", CasGuard::Absent).await;
    store.delete_immutable(&k).await.unwrap();
    assert_eq!(store.get(&k).await.unwrap(), None);
    store.delete_immutable(&k).await.expect("absent is Ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_maps_back_to_keys() {
    let Some(a) = azurite("list_maps_back_to_keys") else {
        return;
    };
    let store = a.store(&fresh_prefix("list"));
    for k in ["a", "a/b", "a/c/d", "ab", "odd key %#[]"] {
        applied(&store, &key(k), k, CasGuard::Absent).await;
    }
    let all: Vec<String> = store
        .list(None)
        .await
        .unwrap()
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(all, ["a", "a/b", "a/c/d", "ab", "odd key %#[]"]);
    let under_a = store.list(Some(&key("a"))).await.unwrap();
    assert_eq!(under_a, [key("a"), key("a/b"), key("a/c/d")]);
    let got = store.get(&key("odd key %#[]")).await.unwrap().unwrap();
    assert_eq!(got.body.as_ref(), b"odd key %#[]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_is_honest_on_azurite() {
    let Some(a) = azurite("probe_is_honest_on_azurite") else {
        return;
    };
    let store = a.store("");
    let cfg = ProbeConfig {
        key_prefix: fresh_prefix("probe"),
        ..ProbeConfig::default()
    };
    let report = probe(&store, &cfg).await;
    assert_eq!(report.verdict, Verdict::Honest, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_azurite() {
    let Some(a) = azurite("conformance_suite_passes_on_azurite") else {
        return;
    };
    let store: Arc<dyn ConditionalStore> = Arc::new(a.store(""));
    let cfg = SuiteConfig {
        key_prefix: fresh_prefix("suite"),
        // A guard against a hung scenario, not a measure: a loaded CI machine (two test
        // lanes and the servers on two cores) once took Azurite's linearizability run past
        // 60 s.
        scenario_timeout: Duration::from_secs(180),
        runtime_ttl: SERVER_TTL,
        ..SuiteConfig::default()
    };
    let report = run_all(store, &cfg).await;
    println!("{report}");
    println!(
        "azurite: {} passed, {} failed",
        report.passed(),
        report.failed()
    );
    assert!(report.is_success(), "{report}");
}

/// A TCP proxy that forwards each request to `upstream`, waits until the answer starts (the
/// server has applied the write), then drops the connection: the answer is lost.
async fn answer_dropping_proxy(upstream: SocketAddr) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(forward_then_drop(client, upstream));
        }
    });
    format!("http://{addr}")
}

async fn forward_then_drop(client: TcpStream, upstream: SocketAddr) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut from_client, to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let forward =
        tokio::spawn(async move { tokio::io::copy(&mut from_client, &mut to_server).await });
    let mut first = [0u8; 1];
    let _ = from_server.read(&mut first).await;
    forward.abort();
    drop(to_client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_ambiguous_and_resolved_by_read_back() {
    let Some(a) = azurite("a_lost_answer_is_ambiguous_and_resolved_by_read_back") else {
        return;
    };
    let prefix = fresh_prefix("lost-answer");
    let direct = a.store(&prefix);
    let proxy = answer_dropping_proxy(socket_of(&a.endpoint)).await;
    let lossy = a.store_at(&proxy, &prefix);
    let k = key("nodes/n1.json");
    let v1 = applied(&direct, &k, "prior", CasGuard::Absent).await;
    for (k, guard) in [
        (k.clone(), CasGuard::Match(v1.clone())),
        (key("fresh"), CasGuard::Absent),
    ] {
        let ours = format!("ours {:x}", Entropy::from_os().next_u64());
        let err = lossy
            .put(&k, Bytes::from(ours.clone()), guard.clone())
            .await
            .unwrap_err();
        assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
        let now = direct.get(&k).await.unwrap().expect("the write landed");
        assert_eq!(now.body, Bytes::from(ours.clone()));
        // Re-sending the same conditional write is refused: our own write moved the ETag.
        rejected(&direct, &k, &ours, guard).await;
    }
    // A delete whose answer is lost is ambiguous too.
    let version = direct.get(&k).await.unwrap().unwrap().version;
    let err = lossy.delete(&k, &version).await.unwrap_err();
    assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
    assert_eq!(direct.get(&k).await.unwrap(), None, "the delete landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_permission_denied_and_never_shown() {
    let Some(a) = azurite("a_wrong_key_is_permission_denied_and_never_shown") else {
        return;
    };
    // Valid base64, wrong key.
    let secret = "d3Jvbmcta2V5LTdmM2E5YzAwMDAwMDAwMDAwMDAwMDAwMDA=";
    let store = a
        .builder(&a.endpoint, &a.container)
        .with_account(fence_azure::EMULATOR_ACCOUNT)
        .with_access_key(secret)
        .with_prefix(fresh_prefix("denied"))
        .build()
        .unwrap();
    let k = key("a");
    let stale = Version::new("\"0x8DC0000000000000\"").unwrap();
    let put = store
        .put(&k, "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    let replace = store
        .put(&k, "x".into(), CasGuard::Match(stale.clone()))
        .await
        .unwrap_err();
    let get = store.get(&k).await.unwrap_err();
    let list = store.list(None).await.unwrap_err();
    let delete = store.delete(&k, &stale).await.unwrap_err();
    for err in [&put, &replace, &get, &list, &delete] {
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err:?}");
        assert_eq!(err.commit(), Commit::NotCommitted, "{err:?}");
        assert_no_text(err, secret);
        assert!(
            err.to_string().contains(&a.container),
            "names the container: {err}"
        );
    }
    assert!(!format!("{store:?}").contains(secret));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_container_is_not_found() {
    let Some(a) = azurite("a_missing_container_is_not_found") else {
        return;
    };
    let container = format!("fence-missing-{:x}", Entropy::from_os().next_u64());
    let store = a.builder(&a.endpoint, &container).build().unwrap();
    let stale = Version::new("\"0x8DC0000000000000\"").unwrap();
    let errors = [
        store.get(&key("a")).await.unwrap_err(),
        store
            .put(&key("a"), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err(),
        store
            .put(&key("a"), "x".into(), CasGuard::Match(stale.clone()))
            .await
            .unwrap_err(),
        store.list(None).await.unwrap_err(),
        store.delete(&key("a"), &stale).await.unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err:?}");
        assert_eq!(err.commit(), Commit::NotCommitted, "{err:?}");
        assert!(
            err.to_string().contains(&container),
            "names the container: {err}"
        );
    }
}
