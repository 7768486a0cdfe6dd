//! The GCS JSON API dialect: URLs, the multipart upload body, the answers' fields.

use bytes::{BufMut, Bytes, BytesMut};
use fence_core::{Entropy, Error, ErrorKind};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;

/// Everything but RFC 3986 unreserved characters is escaped, `/` included: an object name is
/// one path segment of the JSON API.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment or query value.
pub(crate) fn enc(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// `POST` target of a single-request multipart upload guarded by `if_generation_match`.
pub(crate) fn upload_url(endpoint: &str, bucket: &str, if_generation_match: u64) -> String {
    format!(
        "{endpoint}/upload/storage/v1/b/{}/o?uploadType=multipart&ifGenerationMatch={if_generation_match}",
        enc(bucket)
    )
}

/// `GET` target that answers the object's bytes with its generation in `x-goog-generation`.
pub(crate) fn media_url(endpoint: &str, bucket: &str, name: &str) -> String {
    format!(
        "{endpoint}/storage/v1/b/{}/o/{}?alt=media",
        enc(bucket),
        enc(name)
    )
}

/// The object resource: the target of an unconditional `DELETE`.
pub(crate) fn object_url(endpoint: &str, bucket: &str, name: &str) -> String {
    format!("{endpoint}/storage/v1/b/{}/o/{}", enc(bucket), enc(name))
}

/// `DELETE` target guarded by the generation.
pub(crate) fn delete_url(endpoint: &str, bucket: &str, name: &str, generation: u64) -> String {
    format!(
        "{}?ifGenerationMatch={generation}",
        object_url(endpoint, bucket, name)
    )
}

/// Bucket metadata, to tell a missing bucket from a missing object when a 404's body does not.
pub(crate) fn bucket_url(endpoint: &str, bucket: &str) -> String {
    format!("{endpoint}/storage/v1/b/{}", enc(bucket))
}

/// One page of a listing under `prefix`.
pub(crate) fn list_url(endpoint: &str, bucket: &str, prefix: &str, page: Option<&str>) -> String {
    let mut url = format!(
        "{endpoint}/storage/v1/b/{}/o?prefix={}&fields=items(name),nextPageToken",
        enc(bucket),
        enc(prefix)
    );
    if let Some(token) = page {
        url.push_str("&pageToken=");
        url.push_str(&enc(token));
    }
    url
}

/// A `multipart/related` upload: JSON metadata naming the object, then the bytes.
#[derive(Debug)]
pub(crate) struct MultipartBody {
    /// The `Content-Type` header value, with the boundary.
    pub content_type: String,
    /// The request body.
    pub payload: Bytes,
}

/// Builds the upload body, with a random boundary that does not occur in `body`.
pub(crate) fn multipart(
    entropy: &Entropy,
    name: &str,
    body: &[u8],
) -> Result<MultipartBody, Error> {
    let metadata = serde_json::json!({ "name": name }).to_string();
    for _ in 0..8 {
        let boundary = format!("fence_{:016x}", entropy.next_u64());
        if contains(body, boundary.as_bytes()) || contains(metadata.as_bytes(), boundary.as_bytes())
        {
            continue;
        }
        return Ok(MultipartBody {
            content_type: format!("multipart/related; boundary={boundary}"),
            payload: assemble(&boundary, &metadata, body),
        });
    }
    Err(Error::new(
        ErrorKind::InvalidInput,
        "no multipart boundary fits this body",
    )
    .not_committed())
}

fn assemble(boundary: &str, metadata: &str, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + metadata.len() + 4 * boundary.len() + 128);
    out.put_slice(
        format!("--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n").as_bytes(),
    );
    out.put_slice(metadata.as_bytes());
    out.put_slice(
        format!("\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
    );
    out.put_slice(body);
    out.put_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    out.freeze()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A generation as GCS writes it: a positive decimal integer. `0` means "absent" in a
/// precondition and is never the generation of an object.
pub(crate) fn parse_generation(token: &str) -> Option<u64> {
    match token.parse::<u64>() {
        Ok(g) if g > 0 && token.bytes().all(|b| b.is_ascii_digit()) => Some(g),
        _ => None,
    }
}

/// The fields of an object resource we read.
#[derive(Debug, Deserialize)]
pub(crate) struct ObjectResource {
    /// Decimal generation, as a JSON string.
    pub generation: Option<String>,
}

/// One page of `objects.list`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListPage {
    #[serde(default)]
    pub items: Vec<ListItem>,
    pub next_page_token: Option<String>,
}

/// One listed object.
#[derive(Debug, Deserialize)]
pub(crate) struct ListItem {
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_one_escaped_segment() {
        assert_eq!(enc("cells/c 1/own.json"), "cells%2Fc%201%2Fown.json");
        assert_eq!(enc("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(enc("ñ%2F"), "%C3%B1%252F");
    }

    #[test]
    fn generations_are_positive_decimals() {
        assert_eq!(
            parse_generation("1796005810086099"),
            Some(1_796_005_810_086_099)
        );
        for bad in ["0", "", "-1", "+5", "m3", "\"abc\"", "99999999999999999999"] {
            assert_eq!(parse_generation(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn multipart_body_frames_metadata_then_bytes() {
        let mp = multipart(&Entropy::seeded(1), "p/k\"1", b"{\"x\":1}").unwrap();
        let boundary = mp
            .content_type
            .strip_prefix("multipart/related; boundary=")
            .unwrap();
        let text = String::from_utf8(mp.payload.to_vec()).unwrap();
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains(r#"{"name":"p/k\"1"}"#));
        assert!(text.ends_with(&format!("\r\n{{\"x\":1}}\r\n--{boundary}--\r\n")));
    }

    #[test]
    fn boundary_never_occurs_in_the_body() {
        let entropy = Entropy::seeded(9);
        let first = format!("fence_{:016x}", Entropy::seeded(9).next_u64());
        let mp = multipart(&entropy, "k", first.as_bytes()).unwrap();
        assert!(!mp.content_type.ends_with(&first));
    }
}
