//! Webhook signatures per the Standard Webhooks specification, shared by the
//! webhook destination and the alert webhook: `webhook-id`,
//! `webhook-timestamp` (Unix seconds) and `webhook-signature: v1,<base64 of
//! HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`. Signing the id and the time
//! with the body lets a receiver refuse a captured request replayed later
//! (outside its tolerance window) or under another id.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use sha2::Sha256;

/// The message's id: the same on every retry of one message, so a receiver
/// can drop duplicates.
pub const ID_HEADER: &str = "webhook-id";
/// When this attempt was signed, in Unix seconds.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// `v1,<base64 signature>`.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// Prefix of a secret given in the specification's own format: the key is
/// the base64 text after it.
const SECRET_PREFIX: &str = "whsec_";

/// The shortest key the specification allows ("secrets should be between
/// 24 bytes and 64 bytes"): a shorter one can be guessed offline from one
/// captured signature.
pub const MIN_KEY_BYTES: usize = 24;

/// The HMAC key of one webhook.
pub struct WebhookSigner {
    key: SecretSlice<u8>,
}

impl std::fmt::Debug for WebhookSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSigner([redacted])")
    }
}

impl WebhookSigner {
    /// The key from a configured secret: `whsec_<base64>` (as the
    /// specification's libraries generate and take them) is the base64-decoded
    /// bytes; any other secret is used as its raw UTF-8 bytes. Err with the
    /// problem (never the secret) when a `whsec_` secret is not base64 or
    /// the key is shorter than `MIN_KEY_BYTES`.
    pub fn from_secret(secret: &SecretString) -> Result<Self, String> {
        let text = secret.expose_secret();
        let key = match text.strip_prefix(SECRET_PREFIX) {
            Some(encoded) => STANDARD.decode(encoded).map_err(|_| {
                "starts with whsec_ but the rest is not base64 (the standard alphabet, padded)"
                    .to_string()
            })?,
            None => text.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err("is empty".into());
        }
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "is a key of {} bytes; the Standard Webhooks specification asks for {MIN_KEY_BYTES} to 64 \
                 (generate one with `echo whsec_$(openssl rand -base64 32)`)",
                key.len()
            ));
        }
        Ok(Self { key: key.into() })
    }

    /// `v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        // HMAC takes keys of any length, so this cannot fail.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.key.expose_secret())
            .expect("HMAC accepts any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    /// The three headers for one attempt to send `body` as message `id`, signed now.
    pub fn headers(&self, id: &str, body: &[u8]) -> [(&'static str, String); 3] {
        let timestamp = chrono::Utc::now().timestamp();
        [
            (ID_HEADER, id.to_string()),
            (TIMESTAMP_HEADER, timestamp.to_string()),
            (SIGNATURE_HEADER, self.sign(id, timestamp, body)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(secret: &str) -> WebhookSigner {
        WebhookSigner::from_secret(&SecretString::from(secret.to_owned())).expect("valid secret")
    }

    /// The example of the specification's reference libraries
    /// (standard-webhooks, `libraries/python/tests`): this secret, id,
    /// timestamp and payload give this signature.
    #[test]
    fn matches_the_reference_libraries_example() {
        let signed = signer("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_secret_without_the_prefix_is_its_raw_bytes() {
        let raw = signer("a-hook-secret-of-32-bytes-length");
        let encoded = signer(&format!(
            "whsec_{}",
            STANDARD.encode("a-hook-secret-of-32-bytes-length")
        ));
        assert_eq!(raw.sign("a", 1, b"{}"), encoded.sign("a", 1, b"{}"));
        assert_ne!(raw.sign("a", 1, b"{}"), raw.sign("a", 2, b"{}"));
        assert_ne!(raw.sign("a", 1, b"{}"), raw.sign("b", 1, b"{}"));
    }

    #[test]
    fn a_prefixed_secret_that_is_not_base64_is_refused_without_echoing_it() {
        let problem = WebhookSigner::from_secret(&SecretString::from("whsec_not*base64!"))
            .expect_err("not base64");
        assert!(!problem.contains("not*base64"), "{problem}");
        assert!(WebhookSigner::from_secret(&SecretString::from("")).is_err());
    }

    #[test]
    fn a_key_shorter_than_the_specifications_24_bytes_is_refused() {
        let short = format!("whsec_{}", STANDARD.encode([7u8; 23]));
        let problem = WebhookSigner::from_secret(&SecretString::from(short)).expect_err("23 bytes");
        assert!(
            problem.contains("23 bytes") && problem.contains("24"),
            "{problem}"
        );
        assert!(WebhookSigner::from_secret(&SecretString::from("hook-secret")).is_err());
        signer(&format!("whsec_{}", STANDARD.encode([7u8; 24])));
        signer("twenty-four-bytes-secret");
    }
}
