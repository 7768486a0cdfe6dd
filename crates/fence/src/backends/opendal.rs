//! `opendal+<service>://<bucket or container>/<prefix>`: [fence-opendal](fence_opendal) over
//! OpenDAL's s3, azblob or gcs service, configured with OpenDAL's own config keys: from
//! `OPENDAL_<SERVICE>_<KEY>` variables (e.g. `OPENDAL_S3_ENDPOINT`,
//! `OPENDAL_AZBLOB_ACCOUNT_KEY`), whatever the service's builder reads itself (the s3
//! service: `AWS_*`), and options of the same keys (`endpoint`, `account_key`, …) over them.

use std::sync::Arc;

use fence_core::{Error, ErrorKind};
use fence_opendal::OpendalStore;
use opendal::services::{Azblob, Gcs, S3};
use opendal::Operator;

use crate::message::quoted;
use crate::open::{fence_decides, invalid, OpenOptions, Opened};
use crate::scheme::Scheme;

use super::truthy;

/// The config keys the URL decides.
const FROM_THE_URL: [&str; 3] = ["root", "bucket", "container"];

/// Opens `url`: its service, bucket (or container) and root from the URL, the rest from the
/// environment and the options.
pub(super) fn open(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    let (service, name, prefix) = parse(url)?;
    let mut config = config(service, options)?;
    check_credentials(service, &config, options)?;
    config.push(("root".into(), format!("/{prefix}")));
    let mut builder = OpendalStore::builder(operator(service, name, config)?);
    if let Some(ttl) = options.ttl() {
        builder = builder.with_lease_ttl(ttl);
    }
    Ok(Opened::remote(
        Scheme::Opendal,
        url,
        Arc::new(builder.build()?),
    ))
}

/// (service, bucket or container, prefix) of `opendal+<service>://<name>/<prefix>`.
fn parse(url: &str) -> Result<(&str, &str, &str), Error> {
    let malformed = || {
        invalid(format!(
            "malformed OpenDAL store URL {}: use opendal+s3://bucket/prefix, \
             opendal+azblob://container/prefix or opendal+gcs://bucket/prefix",
            quoted(url)
        ))
    };
    let (service, rest) = url["opendal+".len()..]
        .split_once("://")
        .ok_or_else(malformed)?;
    let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if name.is_empty() || name.contains(['?', '#', '@']) {
        return Err(malformed());
    }
    Ok((service, name, prefix))
}

/// The service's config: the `OPENDAL_<SERVICE>_<KEY>` variables (`key` lower-cased; those
/// the URL decides left out), then the options over them.
fn config(service: &str, options: &OpenOptions) -> Result<Vec<(String, String)>, Error> {
    let mut config: Vec<(String, String)> = Vec::new();
    if options.reads_environment() {
        let prefix = format!("OPENDAL_{}_", service.to_ascii_uppercase());
        config = std::env::vars()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_ascii_lowercase(), v)))
            .filter(|(k, _)| !FROM_THE_URL.contains(&k.as_str()))
            .collect();
    }
    for (key, value) in options.pairs() {
        if FROM_THE_URL.contains(&key) {
            let why = "the URL names the bucket (or container) and the root";
            return Err(fence_decides(Scheme::Opendal, key, why));
        }
        config.retain(|(k, _)| k != key);
        config.push((key.to_owned(), value.to_owned()));
    }
    Ok(config)
}

/// Without explicit credentials OpenDAL's builders fall back to a cloud metadata service
/// (EC2 IMDS, the GCE metadata server, Azure's managed identity), which serves only that
/// cloud: refused up front for a custom endpoint, with what to set.
fn check_credentials(
    service: &str,
    config: &[(String, String)],
    options: &OpenOptions,
) -> Result<(), Error> {
    let has = |k: &str| config.iter().any(|(key, v)| key == k && !v.is_empty());
    let env = |k: &str| options.var(k).is_some();
    let unsigned = config
        .iter()
        .any(|(k, v)| k == "skip_signature" && truthy(v));
    let (custom_endpoint, credentials, what) = match service {
        "s3" => (
            has("endpoint") || env("AWS_ENDPOINT_URL") || env("AWS_ENDPOINT"),
            has("access_key_id") || env("AWS_ACCESS_KEY_ID") || env("AWS_WEB_IDENTITY_TOKEN_FILE"),
            "OPENDAL_S3_ACCESS_KEY_ID and OPENDAL_S3_SECRET_ACCESS_KEY (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; options access_key_id and secret_access_key)",
        ),
        "gcs" => (
            has("endpoint"),
            has("credential") || has("credential_path") || has("token"),
            "OPENDAL_GCS_CREDENTIAL_PATH (or OPENDAL_GCS_TOKEN; options credential_path, token)",
        ),
        _ => (
            true,
            has("account_key") || has("sas_token"),
            "OPENDAL_AZBLOB_ACCOUNT_NAME and OPENDAL_AZBLOB_ACCOUNT_KEY (or OPENDAL_AZBLOB_SAS_TOKEN; options account_name, account_key, sas_token)",
        ),
    };
    if custom_endpoint && !credentials && !unsigned {
        return Err(invalid(format!(
            "opendal+{service}:// needs explicit credentials here: set {what}, or \
             OPENDAL_{}_SKIP_SIGNATURE=true (option skip_signature) for a store that checks none",
            service.to_ascii_uppercase()
        )));
    }
    Ok(())
}

/// The operator of `service` on `name` (bucket or container) with `config`.
fn operator(service: &str, name: &str, config: Vec<(String, String)>) -> Result<Operator, Error> {
    let secrets = secret_values(&config);
    let named = |key: &str, mut config: Vec<(String, String)>| {
        config.push((key.to_string(), name.to_string()));
        config
    };
    let op = match service {
        "s3" => Operator::from_iter::<S3>(named("bucket", config)),
        "gcs" => Operator::from_iter::<Gcs>(named("bucket", config)),
        "azblob" => Operator::from_iter::<Azblob>(named("container", config)),
        other => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "OpenDAL service {} is not a fence store: opendal+s3, opendal+azblob and \
                     opendal+gcs are (services without compare-and-swap, such as fs, memory, \
                     oss, cos, webdav, cannot fence anything)",
                    quoted(other)
                ),
            )
            .not_committed())
        }
    };
    op.map_err(|e| {
        invalid(format!(
            "OpenDAL refused the opendal+{service}:// configuration ({}): {}",
            e.kind(),
            quoted(&redacted(e.message(), &secrets))
        ))
    })
}

/// The values OpenDAL's refusal may not print: every configuration value but those of the
/// few keys that are no secret (the endpoint, region, root, bucket or container, account
/// name) — an allow-list, so that a key fence does not know (a role ARN, an external id, a
/// service account) is never printed either. Values under 4 characters (`true`, a port) stay.
fn secret_values(config: &[(String, String)]) -> Vec<String> {
    const PUBLIC: [&str; 6] = [
        "endpoint",
        "region",
        "root",
        "bucket",
        "container",
        "account_name",
    ];
    config
        .iter()
        .filter(|(k, v)| v.len() >= 4 && !PUBLIC.contains(&k.to_ascii_lowercase().as_str()))
        .map(|(_, v)| v.clone())
        .collect()
}

/// `message` with every one of `secrets` in it replaced by `<redacted>`.
fn redacted(message: &str, secrets: &[String]) -> String {
    secrets.iter().fold(message.to_owned(), |m, s| {
        m.replace(s.as_str(), "<redacted>")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_never_prints_a_secret_of_the_configuration() {
        let config = vec![
            ("access_key_id".to_owned(), "AKIDEXAMPLE".to_owned()),
            ("secret_access_key".to_owned(), "s3cr3t/VALUE".to_owned()),
            ("role_arn".to_owned(), "arn:aws:iam::1:role/x".to_owned()),
            ("endpoint".to_owned(), "http://127.0.0.1:1".to_owned()),
        ];
        let secrets = secret_values(&config);
        let said = redacted(
            "bad key AKIDEXAMPLE with s3cr3t/VALUE as arn:aws:iam::1:role/x at http://127.0.0.1:1",
            &secrets,
        );
        assert_eq!(
            said,
            "bad key <redacted> with <redacted> as <redacted> at http://127.0.0.1:1"
        );
    }

    #[test]
    fn urls_name_a_service_a_bucket_and_a_prefix() {
        assert_eq!(parse("opendal+s3://b/p/q").unwrap(), ("s3", "b", "p/q"));
        assert_eq!(parse("opendal+azblob://c").unwrap(), ("azblob", "c", ""));
        for bad in ["opendal+", "opendal+s3", "opendal+s3://", "opendal+s3:///p"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_override_and_never_name_the_bucket_or_root() {
        let options = OpenOptions::new()
            .environment(false)
            .option("endpoint", "http://a");
        assert_eq!(
            config("s3", &options).unwrap(),
            [("endpoint".to_owned(), "http://a".to_owned())]
        );
        for own in FROM_THE_URL {
            let options = OpenOptions::new().option(own, "x");
            assert!(config("s3", &options).is_err(), "{own}");
        }
    }
}
