//! `ShopifySourceConfig`: the `[source]` table for `kind = "shopify"`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connector_config::{EnvVarName, FieldError};

const fn default_page_size() -> u32 {
    250
}

const fn default_bulk_above() -> u64 {
    10_000
}

const fn default_bulk_page_size() -> u32 {
    5_000
}

const fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

/// Shopify's largest `first:` for a connection.
pub const MAX_PAGE_SIZE: u32 = 250;

/// Most customers a page read from a bulk operation's file holds.
pub const MAX_BULK_PAGE_SIZE: u32 = 10_000;

/// The oldest Admin API version the customers query works with:
/// `Customer.defaultEmailAddress` (e-mail and marketing state) exists from
/// 2025-04 on.
pub const OLDEST_API_VERSION: &str = "2025-04";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShopifySourceConfig {
    /// The shop's name: `acme` for `acme.myshopify.com`.
    pub shop: String,
    /// Admin API version, `YYYY-MM` (e.g. `2025-07`), 2025-04 or later (the
    /// first with `Customer.defaultEmailAddress`). Shopify serves a newer
    /// one once this is retired: a run then warns (log and run timeline).
    pub api_version: String,
    /// Environment variable that holds the Admin API access token.
    pub access_token_env: EnvVarName,
    /// Customers per request (1 to 250). Default 250.
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// A first read (and a `sync resync`) of a store with this many
    /// customers or more exports them in one bulk operation
    /// (`bulkOperationRunQuery`) instead of paging; `0` never does. Default
    /// 10000.
    #[serde(default = "default_bulk_above")]
    pub bulk_above: u64,
    /// Customers per page read from a bulk operation's file (1 to 10000).
    /// Default 5000.
    #[serde(default = "default_bulk_page_size")]
    pub bulk_page_size: u32,
    /// Optional Shopify search filter for `customers(query:)`, e.g.
    /// `"updated_at:>2025-01-01"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Where the API lives. Default `https://{shop}.myshopify.com`; point it at
    /// a local fake in tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<url::Url>,
    /// Longest wait for one response. Default 30s.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// How far before the last `updatedAt` read each run starts again (the
    /// overlap window, `source::overlap`). Default 5m; `0s` turns it off.
    #[serde(
        default = "crate::source::overlap::default_overlap",
        with = "humantime_serde"
    )]
    pub overlap: Duration,
}

impl ShopifySourceConfig {
    /// The fields whose change changes every delivery key: the source's
    /// fingerprint is made of them, and the page sizes place records on
    /// pages. `kind` is the table's tag.
    pub const KEY_FIELDS: &'static [&'static str] = &[
        "kind",
        "shop",
        "query",
        "page_size",
        "bulk_page_size",
        "overlap",
    ];
    /// The fields that change no key.
    pub const KEY_NEUTRAL: &'static [&'static str] = &[
        "api_version",
        "access_token_env",
        "bulk_above",
        "base_url",
        "timeout",
    ];

    pub fn validate(&self) -> Result<(), FieldError> {
        let shop_ok = !self.shop.is_empty()
            && self.shop.len() <= 60
            && self
                .shop
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !self.shop.starts_with('-');
        if !shop_ok {
            return Err(FieldError::new(
                "source.shop".into(),
                format!(
                    "\"{}\" is not a shop name (the part before .myshopify.com: a-z, 0-9, '-')",
                    self.shop.escape_default()
                ),
            ));
        }
        let v = self.api_version.as_bytes();
        let version_ok = v.len() == 7
            && v[4] == b'-'
            && v.iter()
                .enumerate()
                .all(|(i, b)| i == 4 || b.is_ascii_digit());
        if !version_ok {
            return Err(FieldError::new(
                "source.api_version".into(),
                format!(
                    "\"{}\" is not an API version like 2025-07",
                    self.api_version.escape_default()
                ),
            ));
        }
        // `YYYY-MM` strings order as the versions do.
        if self.api_version.as_str() < OLDEST_API_VERSION {
            return Err(FieldError::new(
                "source.api_version".into(),
                format!(
                    "{} is older than {OLDEST_API_VERSION}, the first version with \
                     Customer.defaultEmailAddress (the e-mail address and marketing state \
                     syncward reads); pin {OLDEST_API_VERSION} or later",
                    self.api_version
                ),
            ));
        }
        if self.page_size == 0 || self.page_size > MAX_PAGE_SIZE {
            return Err(FieldError::new(
                "source.page_size".into(),
                format!("{} is out of range 1..={MAX_PAGE_SIZE}", self.page_size),
            ));
        }
        if self.bulk_page_size == 0 || self.bulk_page_size > MAX_BULK_PAGE_SIZE {
            return Err(FieldError::new(
                "source.bulk_page_size".into(),
                format!(
                    "{} is out of range 1..={MAX_BULK_PAGE_SIZE}",
                    self.bulk_page_size
                ),
            ));
        }
        if let Some(url) = &self.base_url
            && !matches!(url.scheme(), "http" | "https")
        {
            return Err(FieldError::new(
                "source.base_url".into(),
                "must be an http or https URL".into(),
            ));
        }
        if self.timeout.is_zero() {
            return Err(FieldError::new(
                "source.timeout".into(),
                "must be longer than zero".into(),
            ));
        }
        crate::source::overlap::validate(self.overlap)
    }

    /// `{base}/admin/api/{version}/graphql.json`.
    pub fn endpoint(&self) -> String {
        let base = match &self.base_url {
            Some(url) => url.as_str().trim_end_matches('/').to_string(),
            None => format!("https://{}.myshopify.com", self.shop),
        };
        format!("{base}/admin/api/{}/graphql.json", self.api_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(version: &str) -> ShopifySourceConfig {
        ShopifySourceConfig {
            shop: "acme".into(),
            api_version: version.into(),
            access_token_env: serde_json::from_value(serde_json::json!("SHOPIFY_TOKEN"))
                .expect("a valid variable name"),
            page_size: 250,
            bulk_above: default_bulk_above(),
            bulk_page_size: default_bulk_page_size(),
            query: None,
            base_url: None,
            timeout: default_timeout(),
            overlap: crate::source::overlap::DEFAULT_OVERLAP,
        }
    }

    #[test]
    fn versions_before_default_email_address_are_refused_with_the_reason() {
        for old in ["2024-10", "2025-01", "2019-04"] {
            let FieldError {
                field: key,
                why: problem,
            } = config(old).validate().unwrap_err();
            assert_eq!(key, "source.api_version");
            assert!(problem.contains("defaultEmailAddress"), "{problem}");
            assert!(problem.contains("2025-04"), "{problem}");
        }
        for ok in ["2025-04", "2025-07", "2026-01"] {
            assert_eq!(config(ok).validate(), Ok(()), "{ok}");
        }
    }
}
