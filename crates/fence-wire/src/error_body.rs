//! Error answers cut down to their code and message.
//!
//! object_store puts whole error bodies into its error text, and both S3 and Azure echo
//! secrets in theirs: an AWS `SignatureDoesNotMatch` body carries the canonical request (with
//! an `x-amz-security-token` value), the string to sign and the signature; an Azure
//! `AuthenticationFailed` body carries the request's signature and the string the server
//! signed. The adapters hand object_store [`sanitized`] bodies only.

/// The longest `<Message>` kept, in bytes.
pub const MAX_MESSAGE: usize = 256;

/// The most of an error answer's body that is read: its code and message come first in
/// every store's error bodies (AWS's and Azure's are a few hundred bytes), and the rest of a
/// longer body is never read.
pub const ERROR_BODY_LIMIT: usize = 4096;

/// An XML error body with only the code and the (bounded) message.
///
/// ```
/// use fence_wire::error_body::{error_code, sanitized, xml_element};
/// let body = b"<Error><Code>SignatureDoesNotMatch</Code><Message>no</Message>\
///     <SignatureProvided>deadbeef</SignatureProvided></Error>";
/// let clean = sanitized(error_code(body).as_deref(), xml_element(body, "Message").as_deref());
/// assert_eq!(clean, "<Error><Code>SignatureDoesNotMatch</Code><Message>no</Message></Error>");
/// ```
pub fn sanitized(code: Option<&str>, message: Option<&str>) -> String {
    let mut out = String::from("<Error>");
    if let Some(code) = code {
        out.push_str(&format!("<Code>{code}</Code>"));
    }
    if let Some(message) = message {
        out.push_str(&format!(
            "<Message>{}</Message>",
            bounded(message, MAX_MESSAGE)
        ));
    }
    out.push_str("</Error>");
    out
}

fn bounded(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The `<Code>` of an XML error body, if there is one and it looks like a code.
pub fn error_code(body: &[u8]) -> Option<String> {
    let code = xml_element(body, "Code")?;
    code.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        .then_some(code)
}

/// The text of the first `<name>` element of an XML body (no nesting, no markup inside). A
/// body cut inside a character (at [`ERROR_BODY_LIMIT`]) is read up to that character.
pub fn xml_element(body: &[u8], name: &str) -> Option<String> {
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&body[..e.valid_up_to()]).ok()?,
    };
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find(&format!("</{name}>"))?;
    let value = text[start..start + len].trim();
    (!value.is_empty() && !value.contains('<')).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_error_code() {
        let body =
            "\u{feff}<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>x</Message></Error>";
        assert_eq!(error_code(body.as_bytes()).as_deref(), Some("NoSuchBucket"));
        assert_eq!(error_code(b"<Error></Error>"), None);
        assert_eq!(error_code(b"<Code> </Code>"), None);
        assert_eq!(error_code(b"<Code>a b</Code>"), None);
        assert_eq!(error_code(&[0xff, 0xfe]), None);
    }

    #[test]
    fn sanitized_bodies_keep_code_and_message_only() {
        let body = b"<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature \
            we calculated does not match</Message><AWSAccessKeyId>AKID</AWSAccessKeyId>\
            <StringToSign>AWS4-HMAC-SHA256 secret-scope</StringToSign>\
            <SignatureProvided>deadbeef</SignatureProvided>\
            <CanonicalRequest>PUT /b/k x-amz-security-token:TOKEN</CanonicalRequest>\
            <AuthenticationErrorDetail>The MAC signature found in the HTTP request 'MAC' \
            </AuthenticationErrorDetail></Error>";
        let clean = sanitized(
            error_code(body).as_deref(),
            xml_element(body, "Message").as_deref(),
        );
        assert!(clean.contains("SignatureDoesNotMatch"));
        for secret in ["AKID", "secret-scope", "deadbeef", "TOKEN", "MAC"] {
            assert!(!clean.contains(secret), "{clean}");
        }
    }

    #[test]
    fn a_body_cut_inside_a_character_keeps_its_code() {
        let mut body = "<Error><Code>SlowDown</Code><Message>ñ".as_bytes().to_vec();
        body.pop();
        assert_eq!(error_code(&body).as_deref(), Some("SlowDown"));
    }

    #[test]
    fn messages_are_bounded_on_a_char_boundary() {
        let long = "ñ".repeat(MAX_MESSAGE);
        let cut = bounded(&long, MAX_MESSAGE);
        assert!(cut.len() <= MAX_MESSAGE && long.starts_with(cut));
    }
}
