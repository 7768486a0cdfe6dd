//! `gs://bucket/prefix`: [fence-gcs](fence_gcs), at an emulator named by the option
//! `endpoint`, `FENCE_GCS_ENDPOINT` or `STORAGE_EMULATOR_HOST` (spoken to anonymously), or at
//! real GCS with Google's default credentials (the `gcs-auth` feature).

use std::sync::Arc;

use fence_core::Error;
use fence_gcs::GcsStore;

use crate::message::quoted;
use crate::open::{invalid, unknown_option, OpenOptions, Opened};
use crate::scheme::Scheme;

/// Where an emulator's address may come from, the option first.
const ENDPOINT_SOURCES: [&str; 2] = ["FENCE_GCS_ENDPOINT", "STORAGE_EMULATOR_HOST"];

/// Opens `url`: an emulator if an endpoint is given, else real GCS.
pub(super) fn open(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    let endpoint = endpoint(options)?;
    check_credentials(endpoint.as_deref())?;
    let mut builder = GcsStore::builder().with_url(url);
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint).with_anonymous();
    }
    if let Some(ttl) = options.ttl() {
        builder = builder.with_lease_ttl(ttl);
    }
    Ok(Opened::remote(Scheme::Gcs, url, Arc::new(builder.build()?)))
}

/// The emulator endpoint, if one is given: `http(s)://host[:port]` or `host:port`.
fn endpoint(options: &OpenOptions) -> Result<Option<String>, Error> {
    let mut given = None;
    for (key, value) in options.pairs() {
        match key {
            "endpoint" => given = Some(("the option endpoint", value.to_owned())),
            _ => return Err(unknown_option(Scheme::Gcs, key, "endpoint")),
        }
    }
    let given = given.or_else(|| {
        ENDPOINT_SOURCES
            .into_iter()
            .find_map(|var| Some((var, options.var(var)?)))
    });
    let Some((source, raw)) = given else {
        return Ok(None);
    };
    let endpoint = match raw.contains("://") {
        true => raw.clone(),
        false => format!("http://{raw}"),
    };
    check_endpoint(&endpoint).map_err(|why| {
        invalid(format!(
            "{source} = {} is not an emulator endpoint ({why}): give the emulator's base URL, \
             e.g. FENCE_GCS_ENDPOINT=http://127.0.0.1:4443",
            quoted(&raw)
        ))
    })?;
    Ok(Some(endpoint))
}

/// Whether `endpoint` is `http(s)://host[:port]` with nothing after it but an optional `/`.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let parsed = url::Url::parse(endpoint).map_err(|e| e.to_string())?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("scheme {} is not http or https", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("only scheme, host and port are allowed".into());
    }
    Ok(())
}

/// Without an emulator endpoint, gs:// means real GCS: that needs Google's default
/// credentials, which only the `gcs-auth` feature brings.
fn check_credentials(endpoint: Option<&str>) -> Result<(), Error> {
    if endpoint.is_some() || cfg!(feature = "gcs-auth") {
        return Ok(());
    }
    Err(invalid(
        "gs:// has no credentials in this build: for an emulator set FENCE_GCS_ENDPOINT (e.g. \
         http://127.0.0.1:4443; option endpoint); for real GCS turn on the `gcs-auth` feature \
         (fence-cli: --features gcs-auth) and provide Google's default credentials \
         (GOOGLE_APPLICATION_CREDENTIALS)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_a_scheme_a_host_and_a_port() {
        assert!(check_endpoint("http://127.0.0.1:4443").is_ok());
        assert!(check_endpoint("https://gcs.example/").is_ok());
        for bad in ["ftp://x", "http://[::1", "http://h:1/path", "http://h?q"] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_option_wins_over_the_environment_and_others_are_refused() {
        let options = OpenOptions::new().option("endpoint", "127.0.0.1:9");
        assert_eq!(
            endpoint(&options).unwrap().as_deref(),
            Some("http://127.0.0.1:9")
        );
        let unknown = OpenOptions::new().option("bucket", "other");
        assert!(endpoint(&unknown).is_err());
    }
}
