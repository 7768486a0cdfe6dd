//! Every URL form opened by the library: `file://` on a temp dir and `memory://` always; `s3://`
//! on SeaweedFS and moto, `gs://` on fake-gcs-server, `az://` on Azurite, `dynamodb://` on
//! moto's DynamoDB and `opendal+s3://` on SeaweedFS when those backends are built in and their servers' `FENCE_*` variables are
//! set (skipped otherwise, failing when `FENCE_REQUIRE_SERVERS=1`). Each opened store takes one
//! write and a read under a fresh prefix. The remote stores are configured by options only,
//! with the environment left out, so no test depends on (or changes) the process environment.
//!
//! Then what must fail, and how: bad URLs, a backend not built in, unknown options and the
//! options fence sets itself, and missing credentials, refused before any request.
// The helpers below serve the remote backends' tests: a build without all of them (the
// default, `fs` only) leaves some unused.
#![cfg_attr(
    not(all(
        feature = "s3",
        feature = "gcs",
        feature = "azure",
        feature = "opendal",
        feature = "dynamodb"
    )),
    allow(dead_code, unused_imports)
)]

use std::time::Duration;

use fence::{CasGuard, Commit, ErrorKind, Key, OpenOptions, Opened, PutOutcome, Scheme};

use fence_testkit::canned;
use fence_testkit::servers::from_env as server;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A prefix no other run uses.
fn fresh(test: &str) -> String {
    let n = fence::Entropy::from_os().next_u64();
    format!("fence-lib-tests/{test}-{n:016x}")
}

/// One create and one read through `opened`, then the object removed.
async fn round_trip(opened: &Opened) {
    let store = &opened.store;
    let key = Key::new("opened/by-url").unwrap();
    let put = store.put(&key, "hello".into(), CasGuard::Absent).await;
    assert!(
        matches!(put, Ok(PutOutcome::Applied(_))),
        "{}: {put:?}",
        opened.url
    );
    let got = store.get(&key).await.unwrap().expect("written");
    assert_eq!(&got.body[..], b"hello", "{}", opened.url);
    store.delete_immutable(&key).await.unwrap();
}

fn kind(result: Result<Opened, fence::Error>) -> ErrorKind {
    let e = result.expect_err("opening must fail");
    assert_eq!(e.commit(), Commit::NotCommitted, "{e}");
    e.kind()
}

fn message(result: Result<Opened, fence::Error>) -> String {
    fence::describe(&result.expect_err("opening must fail"))
}

#[cfg(feature = "fs")]
#[tokio::test]
async fn a_file_url_opens_an_existing_absolute_directory_and_names_it_canonically() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("locks")).unwrap();
    let url = format!("file://{}/./locks", dir.path().display());
    let opened = fence::open(&url).unwrap();
    let root = std::fs::canonicalize(dir.path().join("locks")).unwrap();
    assert_eq!(opened.scheme, Scheme::File);
    assert_eq!(opened.url, format!("file://{}", root.display()));
    assert_eq!(opened.root.as_deref(), Some(root.as_path()));
    round_trip(&opened).await;

    let missing = format!("file://{}/absent", dir.path().display());
    for bad in [
        "file://",
        "file://locks",
        "file://./locks",
        missing.as_str(),
    ] {
        assert_eq!(kind(fence::open(bad)), ErrorKind::InvalidInput, "{bad}");
    }
}

#[cfg(feature = "fs")]
#[tokio::test]
async fn a_file_store_takes_its_file_mode_and_opens_read_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let shared = OpenOptions::new().file_mode(0o660).open(&url).unwrap();
    assert_eq!(shared.file_mode, Some(0o660));
    let key = Key::new("cells/a").unwrap();
    shared
        .store
        .put(&key, "x".into(), CasGuard::Absent)
        .await
        .unwrap();
    let cell_dir = dir.path().join("cells");
    let mode = std::fs::metadata(&cell_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o770, "directories get the execute bits");

    let reader = OpenOptions::new().read_only(true).open(&url).unwrap();
    assert!(reader.store.get(&key).await.unwrap().is_some());
    let write = reader.store.put(&key, "y".into(), CasGuard::Absent).await;
    assert_eq!(write.unwrap_err().kind(), ErrorKind::PermissionDenied);

    let executable = OpenOptions::new().file_mode(0o700).open(&url);
    assert_eq!(kind(executable), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn memory_opens_a_store_of_its_own_and_takes_no_path_or_options() {
    let opened = fence::open("memory://").unwrap();
    assert_eq!(opened.scheme, Scheme::Memory);
    round_trip(&opened).await;
    let other = fence::open("memory://").unwrap();
    let key = Key::new("opened/by-url").unwrap();
    opened
        .store
        .put(&key, "x".into(), CasGuard::Absent)
        .await
        .unwrap();
    assert_eq!(other.store.get(&key).await.unwrap(), None, "one per open");
    assert_eq!(kind(fence::open("memory://x")), ErrorKind::InvalidInput);
    let options = fence::open_with("memory://", [("endpoint", "http://x")]);
    assert_eq!(kind(options), ErrorKind::InvalidInput);
}

#[test]
fn a_url_of_no_backend_is_invalid_input_naming_the_forms() {
    for bad in [
        "",
        "ftp://host/x",
        "S3://bucket",
        "s3:/bucket",
        "/var/lock",
        "memory:",
    ] {
        let e = fence::open(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
        assert!(e.to_string().contains("s3://bucket/prefix"), "{e}");
    }
}

/// In a build without a backend (e.g. `cargo test -p fence`, whose default is `fs` alone),
/// its URLs are refused naming the feature; in a build with every backend there is none.
#[test]
fn a_url_of_a_backend_not_built_in_names_its_feature() {
    let urls = [
        "file:///tmp",
        "s3://bucket/p",
        "gs://bucket/p",
        "az://container/p",
        "dynamodb://table/p",
        "opendal+s3://bucket/p",
    ];
    for url in urls {
        let scheme = Scheme::of(url).unwrap();
        if scheme.is_built_in() {
            continue;
        }
        let e = fence::open(url).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{url}");
        assert_eq!(e.commit(), Commit::NotCommitted);
        let feature = scheme.feature().unwrap();
        assert!(e.to_string().contains(&format!("`{feature}`")), "{e}");
        println!("{url}: not built in: {e}");
    }
}

#[cfg(feature = "s3")]
fn s3_options(endpoint: &str, key: &str, secret: &str) -> OpenOptions {
    OpenOptions::new()
        .environment(false)
        .lease_ttl(Duration::from_secs(6))
        .options([
            ("endpoint", endpoint),
            (
                "region",
                var("FENCE_S3_REGION").as_deref().unwrap_or("us-east-1"),
            ),
            ("access_key_id", key),
            ("secret_access_key", secret),
            ("allow_http", "true"),
        ])
}

#[cfg(feature = "s3")]
#[tokio::test]
async fn s3_urls_open_on_seaweedfs_and_moto() {
    let test = "s3_urls_open_on_seaweedfs_and_moto";
    let names = [
        "FENCE_S3_SEAWEED_ENDPOINT",
        "FENCE_S3_MOTO_ENDPOINT",
        "FENCE_S3_BUCKET",
        "FENCE_S3_ACCESS_KEY_ID",
        "FENCE_S3_SECRET_ACCESS_KEY",
    ];
    let Some(v) = server(test, &names) else {
        return;
    };
    for endpoint in [&v[0], &v[1]] {
        let url = format!("s3://{}/{}", v[2], fresh("s3"));
        let opened = s3_options(endpoint, &v[3], &v[4]).open(&url).unwrap();
        assert_eq!(
            (opened.scheme, opened.url.as_str()),
            (Scheme::S3, url.as_str())
        );
        round_trip(&opened).await;
    }
}

#[cfg(feature = "dynamodb")]
#[tokio::test]
async fn dynamodb_urls_open_on_moto() {
    let test = "dynamodb_urls_open_on_moto";
    let names = [
        "FENCE_DYNAMODB_ENDPOINT",
        "FENCE_DYNAMODB_TABLE",
        "FENCE_DYNAMODB_ACCESS_KEY_ID",
        "FENCE_DYNAMODB_SECRET_ACCESS_KEY",
    ];
    let Some(v) = server(test, &names) else {
        return;
    };
    let url = format!("dynamodb://{}/{}", v[1], fresh("dynamodb"));
    let opened = OpenOptions::new()
        .environment(false)
        .lease_ttl(Duration::from_secs(6))
        .options([
            ("endpoint", v[0].as_str()),
            ("region", "us-east-1"),
            ("access_key_id", &v[2]),
            ("secret_access_key", &v[3]),
            ("allow_http", "true"),
        ])
        .open(&url)
        .unwrap();
    assert_eq!(
        (opened.scheme, opened.url.as_str()),
        (Scheme::DynamoDb, url.as_str())
    );
    assert!(opened.store.capabilities().current_on_reject);
    round_trip(&opened).await;
}

/// A DynamoDB store takes the AWS keys it signs and connects with, and the endpoint; not the
/// table the URL names, not its timeouts, not S3's own settings, and without credentials
/// for an endpoint that is not AWS's it is refused before any request.
#[cfg(feature = "dynamodb")]
#[tokio::test]
async fn dynamodb_options_and_credentials_are_checked_before_any_request() {
    let url = "dynamodb://table/p";
    for key in [
        "bucket",
        "timeout",
        "conditional_put",
        "virtual_hosted_style_request",
        "nope",
    ] {
        let e = fence::open_with(url, [(key, "x")]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{key}");
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
    let server = canned::serve(|_| canned::Reply::status(200, "application/json", "{}")).await;
    let endpoint = server.endpoint();
    let bare = OpenOptions::new()
        .environment(false)
        .options([("endpoint", endpoint.as_str()), ("allow_http", "true")]);
    let text = message(bare.open(url));
    assert!(
        text.contains("AWS_ACCESS_KEY_ID") && text.contains("access_key_id"),
        "{text}"
    );
    let keyed = bare.options([("access_key_id", "k"), ("secret_access_key", "s")]);
    let opened = keyed.open(url).unwrap();
    assert_eq!(opened.scheme, Scheme::DynamoDb);
    assert_eq!(server.requests().len(), 0, "nothing is sent at open");
    let via_sdk_name = OpenOptions::new()
        .environment(false)
        .options([
            ("aws_endpoint_url_dynamodb", endpoint.as_str()),
            ("allow_http", "true"),
        ])
        .options([("access_key_id", "k"), ("secret_access_key", "s")]);
    let store = via_sdk_name.open(url).unwrap().store;
    let _ = store.get(&Key::new("k").unwrap()).await;
    assert!(
        !server.requests().is_empty(),
        "the option's endpoint was asked"
    );
}

#[cfg(feature = "gcs")]
#[tokio::test]
async fn gs_urls_open_on_fake_gcs_server() {
    let test = "gs_urls_open_on_fake_gcs_server";
    let Some(v) = server(test, &["FENCE_GCS_ENDPOINT", "FENCE_GCS_BUCKET"]) else {
        return;
    };
    let url = format!("gs://{}/{}", v[1], fresh("gcs"));
    let opened = OpenOptions::new()
        .environment(false)
        .option("endpoint", &v[0])
        .open(&url)
        .unwrap();
    assert_eq!(opened.scheme, Scheme::Gcs);
    round_trip(&opened).await;
}

#[cfg(feature = "azure")]
#[tokio::test]
async fn az_and_azure_urls_open_on_azurite() {
    let test = "az_and_azure_urls_open_on_azurite";
    let Some(v) = server(test, &["FENCE_AZURE_ENDPOINT", "FENCE_AZURE_CONTAINER"]) else {
        return;
    };
    for scheme in ["az", "azure"] {
        let url = format!("{scheme}://{}/{}", v[1], fresh("azure"));
        let opened = OpenOptions::new()
            .environment(false)
            .option("azurite_blob_storage_url", &v[0])
            .open(&url)
            .unwrap();
        assert_eq!(opened.scheme, Scheme::Azure);
        round_trip(&opened).await;
    }
}

#[cfg(feature = "opendal")]
#[tokio::test]
async fn opendal_s3_urls_open_on_seaweedfs() {
    let test = "opendal_s3_urls_open_on_seaweedfs";
    let names = [
        "FENCE_S3_SEAWEED_ENDPOINT",
        "FENCE_S3_BUCKET",
        "FENCE_S3_ACCESS_KEY_ID",
        "FENCE_S3_SECRET_ACCESS_KEY",
    ];
    let Some(v) = server(test, &names) else {
        return;
    };
    let url = format!("opendal+s3://{}/{}", v[1], fresh("opendal"));
    let opened = OpenOptions::new()
        .environment(false)
        .options([
            ("endpoint", v[0].as_str()),
            ("region", "us-east-1"),
            ("access_key_id", &v[2]),
            ("secret_access_key", &v[3]),
            ("disable_config_load", "true"),
            ("disable_ec2_metadata", "true"),
        ])
        .open(&url)
        .unwrap();
    assert_eq!(opened.scheme, Scheme::Opendal);
    round_trip(&opened).await;
}

/// Options configure the backend and nothing else: not the bucket or container the URL
/// names, not what fence sets itself (conditional writes, deletes, timeouts), not a key the
/// backend does not know, and not the process environment.
#[cfg(all(
    feature = "s3",
    feature = "azure",
    feature = "opendal",
    feature = "gcs"
))]
#[test]
fn options_override_nothing_fence_or_the_url_decides() {
    let refused = [
        ("s3://b/p", "bucket"),
        ("s3://b/p", "aws_bucket_name"),
        ("s3://b/p", "conditional_put"),
        ("s3://b/p", "disable_bulk_delete"),
        ("s3://b/p", "timeout"),
        ("s3://b/p", "no_such_key"),
        ("az://container/p", "container_name"),
        ("az://container/p", "connect_timeout"),
        ("az://container/p", "no_such_key"),
        ("gs://bucket/p", "bucket"),
        ("opendal+s3://b/p", "root"),
        ("opendal+s3://b/p", "bucket"),
        ("opendal+azblob://c/p", "container"),
        ("file:///tmp", "file_mode"),
    ];
    let before = std::env::vars().collect::<Vec<_>>();
    for (url, key) in refused {
        let e = fence::open_with(url, [(key, "other")]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url} {key}");
        assert!(e.to_string().contains(key), "{url} {key}: {e}");
    }
    // Accepted ones are used, and the environment stays as it was.
    let opened = fence::open_with(
        "s3://b/p",
        [
            ("ENDPOINT", "http://127.0.0.1:9"),
            ("allow_http", "true"),
            ("access_key_id", "k"),
            ("secret_access_key", "s"),
        ],
    );
    assert!(opened.is_ok(), "{opened:?}");
    assert_eq!(std::env::vars().collect::<Vec<_>>(), before);
}

/// An option wins over the variable it stands for: with `FENCE_GCS_ENDPOINT` set (to the
/// test server, under `scripts/test.sh`), the option's endpoint is the one asked.
#[cfg(feature = "gcs")]
#[tokio::test]
async fn an_option_wins_over_the_environment() {
    let server = canned::serve(|_| canned::Reply::status(404, "application/json", "{}")).await;
    let opened = fence::open_with("gs://bucket/p", [("endpoint", server.endpoint())]).unwrap();
    let key = Key::new("k").unwrap();
    let _ = opened.store.get(&key).await;
    assert!(
        !server.requests().is_empty(),
        "the option's endpoint was asked"
    );
}

/// With no credentials for an endpoint that is not the cloud's own, opening fails naming the
/// sources tried and what to set; nothing is asked, neither the store nor a metadata service.
#[cfg(all(feature = "s3", feature = "azure", feature = "opendal"))]
#[tokio::test]
async fn missing_credentials_are_named_before_any_request() {
    let server = canned::serve(|_| canned::Reply::status(200, "application/xml", "")).await;
    let endpoint = server.endpoint();
    let bare = || OpenOptions::new().environment(false);
    let s3 = bare().options([("endpoint", endpoint.as_str()), ("allow_http", "true")]);
    let text = message(s3.open("s3://bucket/p"));
    for source in [
        "AWS_ACCESS_KEY_ID",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "access_key_id",
    ] {
        assert!(text.contains(source), "{source}: {text}");
    }
    assert_eq!(kind(s3.open("s3://bucket/p")), ErrorKind::InvalidInput);

    let imds_off = bare().option("aws_ec2_metadata_disabled", "true");
    let text = message(imds_off.open("s3://bucket/p"));
    assert!(text.contains("AWS_EC2_METADATA_DISABLED"), "{text}");
    assert!(text.contains("AWS_SECRET_ACCESS_KEY"), "{text}");

    let azure = bare().options([
        ("account_name", "acct"),
        ("endpoint", endpoint.as_str()),
        ("allow_http", "true"),
    ]);
    assert_eq!(
        kind(azure.open("az://container/p")),
        ErrorKind::InvalidInput
    );
    let text = message(azure.open("az://container/p"));
    assert!(text.contains("AZURE_STORAGE_ACCOUNT_KEY"), "{text}");

    let opendal = bare().option("endpoint", endpoint.as_str());
    let text = message(opendal.open("opendal+s3://bucket/p"));
    assert!(text.contains("OPENDAL_S3_ACCESS_KEY_ID"), "{text}");

    #[cfg(not(feature = "gcs-auth"))]
    {
        let text = message(bare().open("gs://bucket/p"));
        assert!(text.contains("FENCE_GCS_ENDPOINT"), "{text}");
    }
    assert_eq!(server.requests().len(), 0, "a request was sent");
}

/// A metadata service that was configured (here a canned one answering 404) and gave no
/// credentials: the store's first operation fails, and [`fence::missing_credentials`] says
/// so as the `fence` command does, naming the sources and the endpoint asked.
#[cfg(feature = "s3")]
#[tokio::test]
async fn credentials_a_metadata_service_did_not_give_are_said_as_such() {
    let imds = canned::serve(|_| canned::Reply::status(404, "text/plain", "")).await;
    let opened = OpenOptions::new()
        .environment(false)
        .options([
            ("region", "us-east-1"),
            ("metadata_endpoint", &imds.endpoint()),
        ])
        .open("s3://bucket/p")
        .unwrap();
    let e = opened.store.get(&Key::new("k").unwrap()).await.unwrap_err();
    let said = fence::missing_credentials(&e).expect("missing credentials");
    assert_eq!(said.kind(), ErrorKind::PermissionDenied);
    assert_eq!(said.commit(), Commit::NotCommitted);
    let text = fence::describe(&said);
    for part in ["AWS_ACCESS_KEY_ID", "~/.aws", imds.endpoint().as_str()] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert!(
        !imds.requests().is_empty(),
        "the configured service was asked"
    );
    assert!(imds
        .requests()
        .iter()
        .all(|r| r.target.starts_with("/latest/")));
}
